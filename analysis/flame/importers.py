"""Open any supported profile file: the format is detected from its bytes.

==================  =============================================
folded / collapsed  ``a;b;c 42`` lines (py-spy raw, FlameGraph)
speedscope JSON     ``{"shared": {"frames": ...}, "profiles": ...}``
Kineto trace JSON   ``{"traceEvents": [...]}`` or a bare event array
memory snapshot     a pickle from ``torch.cuda.memory._dump_snapshot``
==================  =============================================

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
from typing import Any

from gpulens.analysis.flame.errors import FlameError, FlameFormatError
from gpulens.analysis.flame.folded import parse_folded
from gpulens.analysis.flame.kineto import kineto_auto, kineto_memory, kineto_time
from gpulens.analysis.flame.model import Profile
from gpulens.analysis.flame.snapshot import load_snapshot_bytes, snapshot_profile
from gpulens.analysis.flame.speedscope import parse_speedscope
from gpulens.core.limits import FLAME_MAX_MIB, InputLimits, InputRefused, MiB, read_input, too_many

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
        raise (FlameError if err.cannot_open else FlameFormatError)(str(err)) from None


class _TooManyObjects(Exception):
    pass


def _json(data: bytes, source: str, max_objects: int) -> Any:
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
                                        max_objects)) from None
    except RecursionError:
        raise FlameFormatError(
            f"{source}: invalid JSON: nested deeper than Python's recursion limit "
            "(about 1000 levels; no profile format nests this deep)"
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise FlameFormatError(f"{source}: invalid JSON: {err}") from None


def detect_format(data: bytes) -> str:
    """``snapshot``, ``json`` or ``folded`` from the first bytes."""
    if data[:1] == b"\x80":
        return "snapshot"
    head = data[:64].lstrip()
    if head[:1] in (b"{", b"["):
        return "json"
    return "folded"


def profile_from_bytes(
    data: bytes, source: str = "input", metric: str = "auto", limits: InputLimits | None = None
) -> Profile:
    """Decode a profile of any supported format from bytes (already decompressed).

    ``metric`` picks a view: Kineto ``time`` or ``memory``; snapshot
    ``live`` or ``allocated``; ``auto`` chooses what the file has.
    ``limits.max_events`` bounds the records built (default
    :func:`default_limits`). Raises FlameFormatError naming the file and the
    line or field at fault, or the limit that was reached.
    """
    limits = limits or default_limits()
    cap = limits.max_events
    if metric not in METRICS:
        raise FlameFormatError(f"unknown metric {metric!r}; expected one of {', '.join(METRICS)}")
    kind = detect_format(data)
    title = os.path.basename(source)
    if kind == "snapshot":
        _check_metric(metric, ("live", "allocated"), "a memory snapshot", source)
        snap = load_snapshot_bytes(data, source, max_objects=cap)
        view = metric if metric in ("live", "allocated") else "auto"
        return _titled(snapshot_profile(snap, view, source, file_bytes=len(data)), title)
    if kind == "json":
        doc: Any = _json(data, source, cap)
        if isinstance(doc, dict) and "profiles" in doc:
            _check_metric(metric, (), "a speedscope profile", source)
            return _titled(parse_speedscope(doc, source), title)
        _check_metric(metric, ("time", "memory"), "a Kineto trace", source)
        if metric == "memory":
            return _titled(kineto_memory(doc, source, max_events=cap), title)
        if metric == "time":
            return _titled(kineto_time(doc, source, max_events=cap), title)
        return _titled(kineto_auto(doc, source, max_events=cap), title)
    _check_metric(metric, (), "folded stacks", source)
    if data.count(b"\n") > cap:
        raise FlameFormatError(too_many(source, "lines", cap))
    return parse_folded(data, "samples", title, source)


def _check_metric(metric: str, allowed: tuple[str, ...], what: str, source: str) -> None:
    """A metric the file cannot have is an error, not silently ignored."""
    if metric == "auto" or metric in allowed:
        return
    choices = f"use {' or '.join(allowed)} (or auto)" if allowed else "it has one metric: use auto"
    raise FlameFormatError(f"{source}: metric {metric!r} does not apply to {what}; {choices}")


def _titled(profile: Profile, name: str) -> Profile:
    if profile.title and name:
        object.__setattr__(profile, "title", f"{name}: {profile.title}")
    elif name:
        object.__setattr__(profile, "title", name)
    return profile


def load_profile(path: str, metric: str = "auto", limits: InputLimits | None = None) -> Profile:
    """Open a profile file of any supported format (see the module docstring).

    Raises:
        FlameError: missing or unreadable file.
        FlameFormatError: malformed, not a regular file, or over one of ``limits``.
    """
    limits = limits or default_limits()
    return profile_from_bytes(_read(path, limits), path, metric, limits)
