"""Chrome trace events that are not Kineto's: py-spy's ``--format chrometrace`` and other producers.

A thread's ``B``/``E`` (begin/end) and ``X`` (complete, with ``dur``) events
nest into stacks; the time between two events goes to the stack open then,
so a stack's weight is its self time, in seconds (``ts`` is in µs, as the
Trace Event Format says). Each (pid, tid) is one profile of a
:class:`~.group.ProfileGroup`, named from ``thread_name``/``process_name``
metadata when there is some. py-spy writes each sample's stack as B/E
events with ``args.filename`` and ``args.line``: frames read
``name (file:line)`` as in its other formats.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

from gpulens.analysis.flame.errors import FlameFormatError
from gpulens.analysis.flame.group import ALL, Part, ProfileGroup, group_of
from gpulens.analysis.flame.model import Profile, build_from_stacks

_KINETO_CATS = frozenset(("python_function", "cpu_op", "Operator", "cuda_runtime", "kernel", "gpu_memcpy",
                          "cuda_driver", "user_annotation", "gpu_user_annotation", "ac2g"))
_Event = tuple[float, int, str, float]  # ts (µs), file order, frame text, dur (µs; -1 for B, -2 for E)


def trace_events(doc: Any) -> list[Any] | None:
    """The event list of a Chrome trace (an object with ``traceEvents`` or a bare array), else None."""
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    return events if isinstance(events, list) else None


def is_kineto(events: list[Any]) -> bool:
    """True when the trace has the PyTorch profiler's categories or memory events."""
    return any(isinstance(ev, dict) and (ev.get("cat") in _KINETO_CATS or ev.get("name") == "[memory]")
               for ev in events)


def has_stack_events(events: list[Any]) -> bool:
    return any(isinstance(ev, dict) and ev.get("ph") in ("B", "E", "X") for ev in events)


def _frame(ev: dict[str, Any]) -> str:
    name = str(ev.get("name", "?"))
    args = ev.get("args")
    if isinstance(args, dict) and isinstance(args.get("filename"), str):
        line = args.get("line")
        return f"{name} ({args['filename']}:{line})" if isinstance(line, int) else f"{name} ({args['filename']})"
    return name


def trace_event_group(doc: Any, source: str = "input", max_events: int = 10_000_000) -> ProfileGroup:
    """One time profile per thread of a Chrome trace's B/E/X events (seconds of self time).

    Raises FlameFormatError naming the event at fault, or when there are no such events.
    """
    events = trace_events(doc)
    if events is None:
        raise FlameFormatError(f"{source}: traceEvents: expected a list of events")
    if len(events) > max_events:
        raise FlameFormatError(f"{source}: more than {max_events} trace events")
    threads: dict[tuple[str, str], list[_Event]] = {}
    names: dict[tuple[str, str], str] = {}
    processes: dict[str, str] = {}
    for k, ev in enumerate(events):
        if not isinstance(ev, dict):
            continue
        ph = ev.get("ph")
        key = (str(ev.get("pid")), str(ev.get("tid")))
        if ph == "M" and isinstance(ev.get("args"), dict):
            label = ev["args"].get("name")
            if ev.get("name") == "thread_name" and isinstance(label, str):
                names[key] = label
            elif ev.get("name") == "process_name" and isinstance(label, str):
                processes[key[0]] = label
            continue
        if ph not in ("B", "E", "X"):
            continue
        ts, dur = ev.get("ts"), ev.get("dur", 0) if ph == "X" else (-1.0 if ph == "B" else -2.0)
        if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts) \
                or not isinstance(dur, (int, float)) or (ph == "X" and not 0 <= dur < math.inf):
            raise FlameFormatError(f"{source}: traceEvents[{k}]: expected a numeric 'ts'"
                                   + (" and 'dur' >= 0" if ph == "X" else ""))
        threads.setdefault(key, []).append((float(ts), k, _frame(ev), float(dur)))
    if not threads:
        raise FlameFormatError(f"{source}: no B/E or X events to build a flame graph from")
    pyspy = any(isinstance(ev, dict) and ev.get("cat") == "py-spy" for ev in events[:100])
    parts = []
    for key in sorted(threads, key=lambda t: min(e[0] for e in threads[t])):
        pid, tid = key
        label = f"thread {tid}" + (f" ({names[key]})" if key in names else "")
        if len({p for p, _ in threads}) > 1:
            label = f"{processes.get(pid, 'pid ' + pid)} {label}"
        title = f"{label} (wall time between py-spy samples)" if pyspy else label
        parts.append(Part(label, "seconds", partial(_thread_profile, threads[key], title)))
    # py-spy closes a stack only when the next sample differs: idle time counts toward the last stack seen.
    note = "py-spy chrometrace: wall time between samples (idle time counts toward the last stack)" if pyspy \
        else "trace events: self time"
    return group_of(note, parts, ALL)  # no thread is "the" one: all merged, T picks one


def _thread_profile(events: list[_Event], title: str) -> Profile:
    events = sorted(events, key=lambda e: e[0])  # stable: file order within one timestamp
    stacks: list[tuple[list[str], float]] = []
    stacks.extend(_begin_end([e for e in events if e[3] < 0]))
    stacks.extend(_complete([e for e in events if e[3] >= 0]))
    return build_from_stacks(stacks, "seconds", title)


def _begin_end(events: list[_Event]) -> list[tuple[list[str], float]]:
    """B pushes, E pops the innermost open frame; the time between goes to the open stack."""
    out: list[tuple[list[str], float]] = []
    stack: list[str] = []
    now = events[0][0] if events else 0.0
    for ts, _k, frame, kind in events:
        if stack and ts > now:
            out.append((list(stack), (ts - now) * 1e-6))
        now = max(now, ts)
        if kind == -1.0:
            stack.append(frame)
        elif stack:  # an E without its B (a trace cut at the start) closes nothing
            stack.pop()
    return out


def _complete(events: list[_Event]) -> list[tuple[list[str], float]]:
    """X events nest by time: a longer event that starts first encloses the ones inside it."""
    out: list[tuple[list[str], float]] = []
    events.sort(key=lambda e: (e[0], -e[3], e[1]))
    stack: list[tuple[str, float]] = []  # (frame, end)
    now = 0.0

    def close_until(t: float) -> float:
        at = now
        while stack and stack[-1][1] <= t:
            end = max(stack[-1][1], at)
            if end > at:
                out.append(([f for f, _ in stack], (end - at) * 1e-6))
            at = end
            stack.pop()
        return at

    for ts, _k, frame, dur in events:
        now = close_until(ts)
        if stack and ts > now:
            out.append(([f for f, _ in stack], (ts - now) * 1e-6))
        now = max(now, ts)
        end = ts + dur
        if stack:
            end = min(end, stack[-1][1])  # a child never outlives its parent
        stack.append((frame, end))
    close_until(math.inf)
    return out
