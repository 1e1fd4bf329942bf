"""Chrome trace events that are not Kineto's: py-spy's ``--format chrometrace`` and other producers.

Each thread (pid, tid) is one profile of a :class:`~.group.ProfileGroup`,
in seconds. Its ``B``/``E`` (begin/end) and ``X`` (complete) events are one
timeline of nested frames (:mod:`.tracetimeline`): a stack's weight is its
self time. The import follows speedscope's (``src/import/trace-event.ts``),
so a trace reads the same in both:

* profiles are named like speedscope's, always with the pid (two processes
  with the same names stay apart): ``proc (pid 1), main (tid 7)``, or
  ``main (pid 1, tid 7)``, or ``pid 1, tid 7``, from ``process_name`` /
  ``thread_name`` metadata, and ordered by pid, then tid;
* a bare event array whose first event carries Hermes' arguments names
  frames ``name (url:line)``;
* a trace object with ``samples`` and ``stackFrames`` (Hermes' sampling
  profiler) is read from those: each sample's stack weighs the time to the
  thread's next sample;
* a bare event array cut off before its closing ``]`` (a trace written by a
  process that died) is read with the ``]`` added: :func:`close_truncated`.

py-spy writes each sample's stack as B/E events with ``args.filename`` and
``args.line``: frames read ``name (file:line)`` as in its other formats.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any, TypeGuard

from gpulens.analysis.flame.errors import FlameFormatError, FlameProblem, Where
from gpulens.analysis.flame.group import ALL, Part, ProfileGroup, group_of
from gpulens.analysis.flame.jsvalues import (
    MISSING,
    identity,
    number_text,
    template,
    to_number,
    truthy,
)
from gpulens.analysis.flame.model import Profile, build_from_stacks, build_profile
from gpulens.analysis.flame.tracetimeline import TraceEvent, timeline
from gpulens.core.limits import too_many

_KINETO_CATS = frozenset(("python_function", "cpu_op", "Operator", "cuda_runtime", "kernel", "gpu_memcpy",
                          "cuda_driver", "user_annotation", "gpu_user_annotation", "ac2g"))
_HERMES_ARGS = ("line", "column", "name", "category", "url", "params", "allocatedCategory", "allocatedName")
_WS = b" \t\n\r\x0b\x0c"
_NUMBERS = (int, float)  # not bool: type() is exact


def trace_events(doc: object) -> list[Any] | None:
    """The event list of a Chrome trace (an object with ``traceEvents`` or a bare array), else None."""
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    return events if isinstance(events, list) else None


def is_kineto(events: list[Any]) -> bool:
    """True when the trace has the PyTorch profiler's categories or memory events."""
    return any(isinstance(ev, dict) and (ev.get("cat") in _KINETO_CATS or ev.get("name") == "[memory]")
               for ev in events)


def has_stack_events(events: list[Any]) -> bool:
    return any(isinstance(ev, dict) and ev.get("ph") in ("B", "E", "X") for ev in events)


def has_samples(doc: object) -> TypeGuard[dict[str, Any]]:
    """A trace object with ``samples`` and ``stackFrames`` (read from those, as speedscope does)."""
    return isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list) and "samples" in doc \
        and "stackFrames" in doc


def close_truncated(data: bytes) -> bytes | None:
    """A bare event array with a trailing comma dropped and its missing ``]`` added; None if not an array.

    Trace writers stream events and cannot always write the ``]``; Chrome's
    trace viewer and speedscope read such files this way. Meant for text that
    did not parse as it is.
    """
    start = _skip_space(data, 0, 1)
    if data[start:start + 1] != b"[":
        return None
    end = _skip_space(data, len(data), -1)
    if data[end - 1:end] == b",":
        end = _skip_space(data, end - 1, -1)
    return data[start:end] + (b"" if data[end - 1:end] == b"]" else b"]")


def _skip_space(data: bytes, at: int, step: int) -> int:
    """The offset after the whitespace from ``at`` forwards (step 1), or before it backwards (-1), 64 KiB at a time."""
    while at > 0 if step < 0 else at < len(data):
        chunk = data[max(at - 65536, 0):at] if step < 0 else data[at:at + 65536]
        kept = chunk.rstrip(_WS) if step < 0 else chunk.lstrip(_WS)
        at += step * (len(chunk) - len(kept))
        if kept:
            break
    return at


def _zpad(text: str) -> str:
    return text.rjust(10, "0")


def _thread_key(pid: object, tid: object) -> str:
    """speedscope's profile key: ``Number(pid)`` and ``Number(tid)``, zero-padded (profiles sort by it)."""
    return f"{_zpad(number_text(to_number(pid)))}:{_zpad(number_text(to_number(tid)))}"


def profile_name(process: str | None, thread: str | None, pid: str, tid: str) -> str:
    """speedscope's profile name: the pid always, so two processes with the same names differ."""
    if process is not None and thread is not None:
        return f"{process} (pid {pid}), {thread} (tid {tid})"
    if process is not None:
        return f"{process} (pid {pid}, tid {tid})"
    if thread is not None:
        return f"{thread} (pid {pid}, tid {tid})"
    return f"pid {pid}, tid {tid}"


def _metadata(events: list[Any]) -> tuple[dict[tuple[Any, ...], str], dict[str, str]]:
    """Process names by pid (as ``===`` compares it) and thread names by ``pid:tid`` text."""
    processes: dict[tuple[Any, ...], str] = {}
    threads: dict[str, str] = {}
    for k, ev in enumerate(events):
        if not isinstance(ev, dict) or ev.get("ph") != "M" or not isinstance(ev.get("args"), dict):
            continue
        label = ev["args"].get("name")
        if not truthy(label):
            continue
        pid = ev.get("pid", MISSING)
        if ev.get("name") == "process_name":
            processes[identity(pid, k)] = template(label)
        elif ev.get("name") == "thread_name":
            threads[f"{_zpad(template(pid))}:{_zpad(template(ev.get('tid', MISSING)))}"] = template(label)
    return processes, threads


def _is_hermes(doc: object) -> TypeGuard[list[Any]]:
    """speedscope's test: a bare array of events that all have ``ph`` (and B/E/X a ``ts``), the first with Hermes' args."""
    if not isinstance(doc, list) or not doc or not isinstance(doc[0], dict):
        return False
    args = doc[0].get("args")
    if not isinstance(args, dict) or not all(a in args for a in _HERMES_ARGS):
        return False
    return all(isinstance(ev, dict) and "ph" in ev and (ev["ph"] not in ("B", "E", "X") or "ts" in ev) for ev in doc)


def _checked(ev: dict[str, Any], k: int, source: str, hermes: bool, shared: dict[str, str]) -> TraceEvent:
    ph: str = ev["ph"]
    ts: Any = ev.get("ts")
    dur: Any = 0.0
    if ph == "X":
        dur = ev.get("dur")
        if dur is None:  # speedscope: dur ?? tdur ?? 0
            dur = ev.get("tdur")
            dur = 0.0 if dur is None else dur
    if type(ts) not in _NUMBERS or not math.isfinite(ts) or type(dur) not in _NUMBERS or not 0 <= dur < math.inf:
        raise Where(source, f"traceEvents[{k}]").error("expected a numeric 'ts'"
                                                       + (" and 'dur' (or 'tdur') >= 0" if ph == "X" else ""))
    return TraceEvent(float(ts), k, ph, float(dur), ev, hermes, shared)


def trace_event_group(doc: object, source: str = "input", max_events: int = 10_000_000,
                      truncated: bool = False) -> ProfileGroup:
    """One time profile per thread of a Chrome trace's B/E/X events, or of its samples (seconds of self time).

    ``truncated``: the array was read closed by :func:`close_truncated`.
    Raises FlameFormatError naming the event at fault, or when there are no such events.
    """
    events = trace_events(doc)
    if events is None:
        raise Where(source, "traceEvents").error("expected a list of events")
    if len(events) > max_events:
        raise FlameFormatError(too_many(f"{source}: traceEvents", "events", max_events), problem=FlameProblem.TOO_LARGE,
                               at="traceEvents")
    cut = "; its event array was not closed properly (a trace cut off?): read as if it ended with ']'" \
        if truncated else ""
    if has_samples(doc):
        return _samples_group(doc, source, max_events, cut)
    hermes = _is_hermes(doc)
    shared: dict[str, str] = {}
    threads: dict[str, list[TraceEvent]] = {}
    keys: dict[tuple[Any, Any], list[TraceEvent]] = {}  # by the raw (pid, tid), when hashable
    for k, ev in enumerate(events):
        if isinstance(ev, dict) and ev.get("ph") in ("B", "E", "X"):
            pid, tid = ev.get("pid", MISSING), ev.get("tid", MISSING)
            try:
                got = keys.get((pid, tid))  # 1, 1.0 and True share an entry: Number() gives all three 1
            except TypeError:  # an object or array as pid or tid
                got = None
            if got is None:
                got = threads.setdefault(_thread_key(pid, tid), [])
                if not isinstance(pid, (dict, list)) and not isinstance(tid, (dict, list)):
                    keys[(pid, tid)] = got
            got.append(_checked(ev, k, source, hermes, shared))
    if not threads:
        raise FlameFormatError(f"{source}: no B/E or X events to build a flame graph from", problem=FlameProblem.NO_SAMPLES)
    processes, thread_names = _metadata(events)
    pyspy = any(isinstance(ev, dict) and ev.get("cat") == "py-spy" for ev in events[:100])
    parts = []
    for key in sorted(threads):
        first = events[threads[key][0].k]
        pid, tid = first.get("pid", MISSING), first.get("tid", MISSING)
        label = profile_name(processes.get(identity(pid, -1)),
                             thread_names.get(f"{_zpad(template(pid))}:{_zpad(template(tid))}"),
                             template(pid), template(tid))
        title = f"{label} (wall time between py-spy samples)" if pyspy else label
        parts.append(Part(label, "seconds", partial(_thread_profile, threads[key], title, source, max_events)))
    # py-spy closes a stack only when the next sample differs: idle time counts toward the last stack seen.
    note = "py-spy chrometrace: wall time between samples (idle time counts toward the last stack)" if pyspy \
        else "trace events: self time"
    return group_of(note + cut, parts, ALL)  # no thread is "the" one: all merged, T picks one


def _thread_profile(events: list[TraceEvent], title: str, source: str, max_frames: int) -> Profile:
    keys = timeline(events).keys(max_frames)
    if keys is None:
        raise FlameFormatError(too_many(source, "frames in the distinct stacks", max_frames), problem=FlameProblem.TOO_LARGE)
    return build_profile({key: us * 1e-6 for key, us in keys.items()}, "seconds", title)


def _samples_group(doc: dict[str, Any], source: str, max_events: int, cut: str) -> ProfileGroup:
    """One profile per thread of a trace's ``samples``: each stack weighs the time to the thread's next sample."""
    samples, frames = doc["samples"], doc["stackFrames"]
    if not isinstance(samples, list) or not isinstance(frames, dict):
        raise FlameFormatError(f"{source}: expected 'samples' to be a list and 'stackFrames' an object")
    threads: dict[str, list[tuple[float, Any]]] = {}
    firsts: dict[str, dict[str, Any]] = {}
    for k, sample in enumerate(samples):
        ts = to_number(sample.get("ts", MISSING)) if isinstance(sample, dict) else math.nan
        if not math.isfinite(ts):
            raise Where(source, f"samples[{k}]").error("expected an object with a numeric 'ts'")
        key = _thread_key(sample.get("pid", MISSING), sample.get("tid", MISSING))
        threads.setdefault(key, []).append((ts, sample.get("sf", MISSING)))
        firsts.setdefault(key, sample)
    if not threads:
        raise FlameFormatError(f"{source}: no samples to build a flame graph from", problem=FlameProblem.NO_SAMPLES)
    processes, thread_names = _metadata(doc["traceEvents"])
    parts = []
    for key in sorted(threads):
        pid, tid = (to_number(firsts[key].get(f, MISSING)) for f in ("pid", "tid"))
        label = profile_name(processes.get(identity(pid, -1)), thread_names.get(key), number_text(pid),
                             number_text(tid))
        parts.append(Part(label, "seconds", partial(_samples_profile, threads[key], frames, label, source,
                                                    max_events)))
    return group_of("trace samples: time to the next sample" + cut, parts, ALL)


def _samples_profile(rows: list[tuple[float, Any]], frames: dict[str, Any], title: str, source: str,
                     max_frames: int) -> Profile:
    """speedscope weighs each sample with the time to the next one in file order; out-of-order samples are sorted."""
    rows = sorted(rows, key=lambda r: r[0])
    weights: dict[str, float] = {}
    for i, (ts, sf) in enumerate(rows):
        if truthy(sf):
            fid = template(sf)
            weights[fid] = weights.get(fid, 0.0) + (rows[i + 1][0] - ts if i + 1 < len(rows) else 0.0)
    stacks: list[tuple[list[str], float]] = []
    budget = max_frames
    for fid, us in weights.items():
        path: list[str] = []
        at: Any = fid
        while truthy(at):
            frame = frames.get(template(at))
            if not isinstance(frame, dict):
                raise Where(source, "stackFrames").error(f"no frame {template(at)!r}, which a sample's stack uses",
                                                         FlameProblem.BAD_REFERENCE)
            if len(path) >= len(frames):
                raise Where(source, f"stackFrames[{fid!r}]").error("its chain of parents loops", FlameProblem.BAD_REFERENCE)
            path.append(template(frame.get("name", MISSING)))
            at = frame.get("parent", MISSING)
        budget -= len(path)
        if budget < 0:
            raise FlameFormatError(too_many(source, "frames in the distinct sampled stacks", max_frames), problem=FlameProblem.TOO_LARGE)
        path.reverse()
        stacks.append((path, us * 1e-6))
    return build_from_stacks(stacks, "seconds", title)
