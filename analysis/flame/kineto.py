"""Kineto (PyTorch profiler) Chrome traces -> time or memory profiles.

* ``time``: ``python_function`` events (``with_stack=True``) nest per
  thread into stacks; each event's self time (its duration minus its
  children's) is that stack's weight, in seconds. Traces without Python
  events fall back to CPU operator nesting (``cpu_op`` / ``Operator``).
* ``memory``: every ``[memory]`` instant event with ``Bytes > 0`` is an
  allocation; its weight goes to the stack of events enclosing it on the
  same thread (plus the operator's ``Call stack`` argument where older
  traces carry one), for one device type (CUDA when present, else CPU).
"""

from __future__ import annotations

import math
from typing import Any

from gpulens.analysis.flame.errors import FlameFormatError, FlameProblem, Where
from gpulens.analysis.flame.model import Profile, build_from_stacks
from gpulens.core.limits import DEFAULT_MAX_EVENTS, too_many

MAX_EVENTS = DEFAULT_MAX_EVENTS
_STACK_CATS = ("python_function", "cpu_op", "Operator", "user_annotation", "gpu_user_annotation")
_DEVICE_NAMES = {0: "CPU", 1: "CUDA"}


def _events(doc: object, source: str, max_events: int) -> list[Any]:
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise Where(source, "traceEvents").error("expected a list of events")
    if len(events) > max_events:
        raise FlameFormatError(too_many(f"{source}: traceEvents", "events", max_events), problem=FlameProblem.TOO_LARGE,
                               at="traceEvents")
    return events


def _intervals(events: list[Any], cats: tuple[str, ...], source: str) -> dict[tuple[str, str], list[tuple[float, float, str, str]]]:
    by_thread: dict[tuple[str, str], list[tuple[float, float, str, str]]] = {}
    for k, ev in enumerate(events):
        if not isinstance(ev, dict) or ev.get("ph") != "X" or ev.get("cat") not in cats:
            continue
        ts, dur, name = ev.get("ts"), ev.get("dur", 0), ev.get("name")
        if not isinstance(ts, (int, float)) or not isinstance(dur, (int, float)) or not isinstance(name, str) \
                or not (math.isfinite(ts) and 0 <= dur < math.inf):
            raise Where(source, f"traceEvents[{k}]").error("expected numeric 'ts', 'dur' >= 0 and a string 'name'")
        args = ev.get("args")
        call_stack = args.get("Call stack", "") if isinstance(args, dict) else ""
        key = (str(ev.get("pid")), str(ev.get("tid")))
        by_thread.setdefault(key, []).append((float(ts), float(dur), name, call_stack if isinstance(call_stack, str) else ""))
    return by_thread


def _root_path(name: str, call_stack: str) -> list[str]:
    # "Call stack" lists Python frames innermost first, separated by ';'.
    frames = [f for f in call_stack.split(";") if f] if call_stack else []
    frames.reverse()
    frames.append(name)
    return frames


def kineto_time(doc: object, source: str = "input", *, max_events: int = MAX_EVENTS) -> Profile:
    """Self time per stack of nested ``python_function`` (else CPU op) events, in seconds."""
    events = _events(doc, source, max_events)
    threads = _intervals(events, ("python_function",), source)
    title = "Python time"
    if not threads:
        threads = _intervals(events, ("cpu_op", "Operator"), source)
        title = "CPU operator time (no python_function events: record with with_stack=True)"
    if not threads:
        raise FlameFormatError(f"{source}: no python_function or CPU operator events to build a time profile from", problem=FlameProblem.NO_SAMPLES)
    stacks: list[tuple[list[str], float]] = []
    for (pid, tid), ivs in threads.items():
        ivs.sort(key=lambda e: (e[0], -e[1]))
        open_: list[tuple[float, list[str], list[float]]] = []  # (end, path, [self_us])
        thread_frame = f"thread {tid}" if pid == tid or tid == "None" else f"pid {pid} thread {tid}"
        for ts, dur, name, call_stack in ivs:
            while open_ and open_[-1][0] <= ts:
                _end, path, self_us = open_.pop()
                stacks.append(([thread_frame, *path], self_us[0] * 1e-6))
            if open_:
                parent = open_[-1]
                parent[2][0] -= min(dur, parent[0] - ts)
                path = [*parent[1], name]
            else:
                path = _root_path(name, call_stack)
            open_.append((ts + dur, path, [dur]))
        for _end, path, self_us in open_:
            stacks.append(([thread_frame, *path], self_us[0] * 1e-6))
    return build_from_stacks(((p, max(w, 0.0)) for p, w in stacks), "seconds", title)


def _allocations(events: list[Any], source: str) -> dict[int, dict[tuple[str, str], list[tuple[float, float]]]]:
    """Device type -> (pid, tid) -> (ts, bytes) of each ``[memory]`` event with ``Bytes > 0``."""
    allocs: dict[int, dict[tuple[str, str], list[tuple[float, float]]]] = {}
    for k, ev in enumerate(events):
        if not isinstance(ev, dict) or ev.get("name") != "[memory]":
            continue
        args, ts = ev.get("args"), ev.get("ts")
        if not isinstance(args, dict) or not isinstance(ts, (int, float)):
            raise Where(source, f"traceEvents[{k}]").error("[memory] event needs numeric 'ts' and 'args'")
        nbytes, dev = args.get("Bytes"), args.get("Device Type", 0)
        if not isinstance(nbytes, (int, float)) or not isinstance(dev, int) or not math.isfinite(nbytes) \
                or not math.isfinite(ts):
            raise Where(source, f"traceEvents[{k}].args").error("expected numeric 'Bytes' and 'Device Type'")
        if nbytes > 0:
            key = (str(ev.get("pid")), str(ev.get("tid")))
            allocs.setdefault(dev, {}).setdefault(key, []).append((float(ts), float(nbytes)))
    return allocs


def _enclosing_stacks(ivs: list[tuple[float, float, str, str]],
                      points: list[tuple[float, float]]) -> list[tuple[list[str], float]]:
    """Each allocation of one thread with the path of the events open when it happened."""
    ivs = sorted(ivs, key=lambda e: (e[0], -e[1]))
    merged = sorted([(ts, 0, dur, name, cs) for ts, dur, name, cs in ivs] + [(ts, 1, b, "", "") for ts, b in points],
                    key=lambda e: (e[0], e[1]))
    stacks: list[tuple[list[str], float]] = []
    open_: list[tuple[float, list[str]]] = []
    for ts, kind, val, name, cs in merged:
        while open_ and (open_[-1][0] <= ts if kind == 0 else open_[-1][0] < ts):
            open_.pop()
        if kind == 0:
            path = [*open_[-1][1], name] if open_ else _root_path(name, cs)
            open_.append((ts + val, path))
        else:
            stacks.append((open_[-1][1] if open_ else ["<no enclosing op>"], val))
    return stacks


def kineto_memory(
    doc: object, source: str = "input", device_type: int | None = None, *, max_events: int = MAX_EVENTS
) -> Profile:
    """Bytes allocated per enclosing stack from ``[memory]`` events (CUDA first, else CPU)."""
    events = _events(doc, source, max_events)
    allocs = _allocations(events, source)
    if not allocs:
        raise FlameFormatError(f"{source}: no [memory] allocation events (record with profile_memory=True)", problem=FlameProblem.NO_SAMPLES)
    if device_type is None:
        device_type = 1 if 1 in allocs else min(allocs)
    if device_type not in allocs:
        raise FlameFormatError(f"{source}: no [memory] events for device type {device_type}", problem=FlameProblem.NO_SAMPLES)
    threads = _intervals(events, _STACK_CATS, source)
    stacks: list[tuple[list[str], float]] = []
    for key, points in allocs[device_type].items():
        stacks += _enclosing_stacks(threads.get(key, []), points)
    device = _DEVICE_NAMES.get(device_type, f"device type {device_type}")
    return build_from_stacks(stacks, "bytes", f"{device} memory allocated")


def kineto_auto(doc: object, source: str = "input", *, max_events: int = MAX_EVENTS) -> Profile:
    """Time when the trace has Python or CPU operator events, else memory."""
    events = _events(doc, source, max_events)
    timed = ("python_function", "cpu_op", "Operator")
    if any(isinstance(ev, dict) and ev.get("ph") == "X" and ev.get("cat") in timed for ev in events):
        return kineto_time(doc, source, max_events=max_events)
    if any(isinstance(ev, dict) and ev.get("name") == "[memory]" for ev in events):
        return kineto_memory(doc, source, max_events=max_events)
    raise FlameFormatError(f"{source}: no python_function, CPU operator or [memory] events in this trace", problem=FlameProblem.NO_SAMPLES)
