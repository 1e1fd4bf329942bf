"""Open any supported profile file: the format is detected from its bytes.

==================  =============================================
folded / collapsed  ``a;b;c 42`` lines (py-spy raw, FlameGraph)
speedscope JSON     ``{"shared": {"frames": ...}, "profiles": ...}``
                    (py-spy: one profile per thread; speedscope's own)
Kineto trace JSON   ``{"traceEvents": [...]}`` or a bare event array
Chrome trace        B/E/X events (or samples) without Kineto's
                    categories (py-spy ``-f chrometrace``): one profile
                    per thread, read as speedscope reads them
perf script         ``perf script`` text (stackcollapse-perf's input)
Chrome cpuprofile   ``.cpuprofile`` / ``.heapprofile`` (DevTools, V8)
Firefox / Gecko     raw Gecko or Firefox Profiler (processed) JSON
memory snapshot     a pickle from ``torch.cuda.memory._dump_snapshot``
==================  =============================================

Files with several profiles load as a :class:`~.group.ProfileGroup`
(:func:`load_group`); :func:`load_profile` picks one (default: the one the
file marks active) or ``"all"`` merged. Anything else (an SVG flame graph,
perf.data, an HTML report, a Safari or stackprof profile) is refused with
one line naming what it looks like and the command that makes a readable
profile (:mod:`.sniff`, :func:`.foreign.unsupported_json`).

Gzip-compressed files of any of these are read too. Every read is bounded
(:mod:`gpulens.core.limits`): only regular files, at most
``--max-mib`` MiB after decompression and ``--max-ratio`` times the file
size, at most ``--max-events`` records (JSON objects, folded lines, pickle
objects), JSON nested at most as deep as Python's recursion limit allows.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable
from typing import Any, Protocol

from gpulens.analysis.flame.errors import FlameError, FlameFormatError, FlameProblem
from gpulens.analysis.flame.folded import parse_folded, unit_from_name
from gpulens.analysis.flame.foreign import foreign_group, foreign_kind, unsupported_json
from gpulens.analysis.flame.group import ProfileGroup, single
from gpulens.analysis.flame.kineto import kineto_auto, kineto_memory, kineto_time
from gpulens.analysis.flame.model import Profile
from gpulens.analysis.flame.perfscript import looks_like_perf_script, parse_perf_script
from gpulens.analysis.flame.pprof import looks_like_pprof, read_pprof
from gpulens.analysis.flame.snapshot import load_snapshot_bytes, snapshot_profile
from gpulens.analysis.flame.sniff import describe, unreadable_line
from gpulens.analysis.flame.speedscope import speedscope_group
from gpulens.analysis.flame.traceevents import (
    close_truncated,
    has_samples,
    has_stack_events,
    is_kineto,
    trace_event_group,
    trace_events,
)
from gpulens.core.limits import (
    FLAME_MAX_MIB,
    InputLimits,
    InputProblem,
    InputRefused,
    MiB,
    read_input,
    too_many,
)

MAX_FILE_BYTES = FLAME_MAX_MIB * MiB
"""Default ``--max-mib`` of ``gpulens flame``: 1 GiB uncompressed."""
METRICS = ("auto", "time", "memory", "live", "allocated")


def default_limits() -> InputLimits:
    """The limits ``gpulens flame`` uses without flags."""
    return InputLimits(max_bytes=MAX_FILE_BYTES)


def _read(path: str, limits: InputLimits) -> bytes:
    try:
        return bytes(read_input(path, limits, what="profile file"))
    except InputRefused as err:
        if err.problem is InputProblem.CANNOT_OPEN:
            raise FlameError(str(err)) from None
        raise FlameFormatError(str(err), problem=_REFUSED[err.problem]) from None


_REFUSED = {InputProblem.NOT_REGULAR: FlameProblem.NOT_REGULAR, InputProblem.TOO_LARGE: FlameProblem.TOO_LARGE,
            InputProblem.TOO_COMPRESSED: FlameProblem.TOO_LARGE, InputProblem.DAMAGED_GZIP: FlameProblem.TRUNCATED}
"""The input guard's refusal -> the flame error's reason (one that cannot open is a plain FlameError)."""


class _TooManyObjects(Exception):
    pass


def _json(data: bytes, source: str, max_objects: int) -> object:
    """``json.loads`` that stops as soon as it has built more than ``max_objects`` objects.

    Each JSON object opens with ``{``: when the text has no more of them
    than the limit, the hook (a Python call per object) is not needed.
    """
    hook = None
    if data.count(b"{") > max_objects:
        counter = itertools.count(1)

        def hook(obj: dict[str, Any]) -> dict[str, Any]:
            if next(counter) > max_objects:
                raise _TooManyObjects
            return obj

    try:
        return json.loads(data, object_hook=hook)
    except _TooManyObjects:
        raise FlameFormatError(too_many(source, "JSON objects (events, frames and their arguments)",
                                        max_objects), problem=FlameProblem.TOO_LARGE) from None
    except RecursionError:
        raise FlameFormatError(
            f"{source}: invalid JSON: nested deeper than Python's recursion limit "
            "(about 1000 levels; no profile format nests this deep)", problem=FlameProblem.NOT_JSON,
        ) from None
    except json.JSONDecodeError as err:  # its sentence ends "line L column C (char N)"
        raise FlameFormatError(f"{source}: invalid JSON: {err}", problem=FlameProblem.NOT_JSON,
                               at=f"line {err.lineno} column {err.colno}") from None
    except UnicodeDecodeError as err:
        raise FlameFormatError(f"{source}: invalid JSON: {err}", problem=FlameProblem.NOT_JSON) from None


def _json_or_cut_array(data: bytes, source: str, max_objects: int) -> tuple[object, bool]:
    """The JSON document, and whether it is an event array whose missing ``]`` was added to read it."""
    try:
        return _json(data, source, max_objects), False
    except FlameFormatError as err:
        closed = close_truncated(data) if err.problem is FlameProblem.NOT_JSON else None
        if closed is None:
            raise
        try:
            doc = _json(closed, source, max_objects)
        except FlameFormatError:
            raise err from None
        if not isinstance(doc, list) or not has_stack_events(doc):  # read closed only as a trace (what such files are)
            raise err from None
        return doc, True


def detect_format(data: bytes) -> str:
    """``snapshot``, ``pprof``, ``json``, ``perf``, ``folded`` or ``unknown`` from the first bytes."""
    if data[:1] == b"\x80":
        return "snapshot"
    if looks_like_pprof(data):
        return "pprof"
    head = data[:64].lstrip()
    if head[:1] in (b"{", b"["):
        return "json"
    if describe(data) is not None:
        return "unknown"
    if looks_like_perf_script(data):
        return "perf"
    return "folded"


def group_from_bytes(
    data: bytes, source: str = "input", metric: str = "auto", limits: InputLimits | None = None
) -> ProfileGroup:
    """Decode every profile of a file of any supported format from bytes (already decompressed).

    ``metric`` picks a view: Kineto ``time`` or ``memory``; snapshot
    ``live`` or ``allocated``; ``auto`` chooses what the file has.
    ``limits.max_events`` bounds the records built (default
    :func:`default_limits`). Raises FlameFormatError naming the file and the
    line or field at fault, the limit that was reached, or (one line) what
    an unreadable file looks like and how to make a readable one.
    """
    limits = limits or default_limits()
    if metric not in METRICS:
        raise FlameFormatError(f"unknown metric {metric!r}; expected one of {', '.join(METRICS)}",
                               problem=FlameProblem.BAD_OPTION)
    data = _utf8(data)
    kind = detect_format(data)
    if kind == "unknown":
        raise FlameFormatError(unreadable_line(data, source), problem=FlameProblem.UNSUPPORTED)
    return _READERS[kind](data, source, metric, limits.max_events, os.path.basename(source))


def _pprof_group(data: bytes, source: str, metric: str, cap: int, title: str) -> ProfileGroup:
    _check_metric(metric, (), "a pprof profile", source)
    return single(_titled(read_pprof(data, source), title))


def _snapshot_group(data: bytes, source: str, metric: str, cap: int, title: str) -> ProfileGroup:
    _check_metric(metric, ("live", "allocated"), "a memory snapshot", source)
    snap = load_snapshot_bytes(data, source, max_objects=cap)
    view = metric if metric in ("live", "allocated") else "auto"
    return single(_titled(snapshot_profile(snap, view, source, file_bytes=len(data)), title))


def _json_group(data: bytes, source: str, metric: str, cap: int, title: str) -> ProfileGroup:
    """speedscope, a foreign JSON profile, a Chrome trace with stacks, or a Kineto trace."""
    doc, truncated = _json_or_cut_array(data, source, cap)
    if isinstance(doc, dict) and "profiles" in doc:
        _check_metric(metric, (), "a speedscope profile", source)
        return _titled_group(speedscope_group(doc, source), title)
    foreign = foreign_kind(doc)
    if foreign is not None:
        _check_metric(metric, (), f"a {foreign} profile", source)
        return _titled_group(foreign_group(doc, foreign, source, "", cap), title)
    refusal = unsupported_json(doc)
    if refusal is not None:
        raise FlameFormatError(f"{source}: {refusal}", problem=FlameProblem.UNSUPPORTED)
    events = trace_events(doc)
    if events is not None and not is_kineto(events) and (has_stack_events(events) or has_samples(doc)):
        _check_metric(metric, ("time",), "a Chrome trace", source)
        return _titled_group(trace_event_group(doc, source, max_events=cap, truncated=truncated), title)
    if events is None:
        raise FlameFormatError(f"{source}: JSON, but neither speedscope ('profiles') nor a Chrome/Kineto "
                               "trace ('traceEvents' or an event array)", problem=FlameProblem.UNSUPPORTED)
    _check_metric(metric, ("time", "memory"), "a Kineto trace", source)
    kineto = _KINETO_VIEWS.get(metric, kineto_auto)
    return single(_titled(kineto(doc, source, max_events=cap), title))


def _check_lines(data: bytes, source: str, cap: int) -> None:
    """Text formats: at most ``cap`` lines."""
    if data.count(b"\n") > cap:
        raise FlameFormatError(too_many(source, "lines", cap), problem=FlameProblem.TOO_LARGE)


def _perf_group(data: bytes, source: str, metric: str, cap: int, title: str) -> ProfileGroup:
    _check_lines(data, source, cap)
    _check_metric(metric, (), "perf script output", source)
    prof = parse_perf_script(data, source)
    return single(_titled(prof, title))


def _folded_group(data: bytes, source: str, metric: str, cap: int, title: str) -> ProfileGroup:
    _check_lines(data, source, cap)
    _check_metric(metric, (), "folded stacks", source)
    unit, scale = unit_from_name(source)
    try:
        return single(parse_folded(data, unit, title, source, scale))
    except FlameFormatError:
        if not _first_line_folded(data):
            raise FlameFormatError(unreadable_line(data, source), problem=FlameProblem.UNSUPPORTED) from None
        raise


_READERS: dict[str, Callable[[bytes, str, str, int, str], ProfileGroup]] = {
    "pprof": _pprof_group, "snapshot": _snapshot_group, "json": _json_group, "perf": _perf_group,
    "folded": _folded_group,
}
""":func:`detect_format`'s kind -> its reader ``(data, source, metric, max records, title)``."""


class _KinetoView(Protocol):
    """One of :mod:`.kineto`'s readers."""

    def __call__(self, doc: object, source: str = ..., *, max_events: int = ...) -> Profile: ...


_KINETO_VIEWS: dict[str, _KinetoView] = {"memory": kineto_memory, "time": kineto_time}
"""A Kineto trace's view by metric; ``auto`` is :func:`~.kineto.kineto_auto`."""


def _utf8(data: bytes) -> bytes:
    """Text with a byte-order mark as UTF-8 without it (Windows tools write UTF-16 folded files)."""
    if data.startswith(b"\xef\xbb\xbf"):
        return data[3:]
    if data.startswith((b"\xff\xfe", b"\xfe\xff")) and not looks_like_pprof(data):
        return data.decode("utf-16", "replace").encode("utf-8")
    return data


def _first_line_folded(data: bytes) -> bool:
    """Does the first non-blank line end in `` COUNT``? (else the file is not folded at all)."""
    for line in data[:65536].split(b"\n"):
        if line.strip():
            if b"\x00" in line:
                return False
            count = line.rstrip().rpartition(b" ")[2]
            return b" " in line.rstrip() and count.replace(b".", b"", 1).isdigit()
    return True


def _check_metric(metric: str, allowed: tuple[str, ...], what: str, source: str) -> None:
    """A metric the file cannot have is an error, not silently ignored."""
    if metric == "auto" or metric in allowed:
        return
    choices = f"use {' or '.join(allowed)} (or auto)" if allowed else "it has one metric: use auto"
    raise FlameFormatError(f"{source}: metric {metric!r} does not apply to {what}; {choices}",
                           problem=FlameProblem.BAD_OPTION)


def _titled(profile: Profile, name: str) -> Profile:
    if profile.title and name:
        object.__setattr__(profile, "title", f"{name}: {profile.title}")
    elif name:
        object.__setattr__(profile, "title", name)
    return profile


def _titled_group(group: ProfileGroup, name: str) -> ProfileGroup:
    if name:
        object.__setattr__(group, "title", f"{name}: {group.title}" if group.title else name)
        parts = tuple(type(p)(p.name, p.unit, _retitle(p.build, name)) for p in group.parts)
        object.__setattr__(group, "parts", parts)
    return group


def _retitle(build: Callable[[], Profile], name: str) -> Callable[[], Profile]:
    return lambda: _titled(build(), name)


def load_group(path: str, metric: str = "auto", limits: InputLimits | None = None) -> ProfileGroup:
    """Open a profile file of any supported format, every profile in it (see the module docstring).

    Raises:
        FlameError: missing or unreadable file.
        FlameFormatError: malformed, not a regular file, over one of ``limits``, or not a profile.
    """
    limits = limits or default_limits()
    return group_from_bytes(_read(path, limits), path, metric, limits)


def load_profile(
    path: str, metric: str = "auto", limits: InputLimits | None = None, profile: int | str | None = None
) -> Profile:
    """Open one profile of a file: index ``profile``, ``"all"`` merged, or (None) the file's active one.

    Raises as :func:`load_group`; FlameError for a ``profile`` the file does not have.
    """
    return load_group(path, metric, limits).pick(profile)
