"""Open any supported profile file: the format is detected from its bytes.

==================  =============================================
folded / collapsed  ``a;b;c 42`` lines (py-spy raw, FlameGraph)
speedscope JSON     ``{"shared": {"frames": ...}, "profiles": ...}``
Kineto trace JSON   ``{"traceEvents": [...]}`` or a bare event array
memory snapshot     a pickle from ``torch.cuda.memory._dump_snapshot``
==================  =============================================

Gzip-compressed files of any of these are read too (bounded).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import stat
import zlib
from typing import Any

from .errors import FlameError, FlameFormatError
from .folded import parse_folded
from .kineto import kineto_auto, kineto_memory, kineto_time
from .model import Profile
from .snapshot import load_snapshot_bytes, snapshot_profile
from .speedscope import parse_speedscope

MAX_FILE_BYTES = 1 << 30
METRICS = ("auto", "time", "memory", "live", "allocated")


def _read(path: str) -> bytes:
    try:
        st = os.stat(path)
        if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
            raise FlameFormatError(f"{path}: a device, not a profile file (a pipe or regular file is fine)")
        size = st.st_size
        if size > MAX_FILE_BYTES:
            raise FlameFormatError(f"{path}: {size} bytes is over the {MAX_FILE_BYTES}-byte limit")
        with open(path, "rb") as fh:
            # Bounded even where getsize says 0: /dev/zero, a FIFO, /proc files.
            data = fh.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise FlameFormatError(f"{path}: more than {MAX_FILE_BYTES} bytes; over the limit")
    except OSError as err:
        raise FlameError(f"{path}: cannot read: {err.strerror or err}") from None
    if data[:2] == b"\x1f\x8b":
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(data)) as gz:
                data = gz.read(MAX_FILE_BYTES + 1)
        except (OSError, EOFError, zlib.error) as err:
            raise FlameFormatError(f"{path}: broken gzip data: {err}") from None
        if len(data) > MAX_FILE_BYTES:
            raise FlameFormatError(f"{path}: unpacks to more than {MAX_FILE_BYTES} bytes")
    return data


def detect_format(data: bytes) -> str:
    """``snapshot``, ``json`` or ``folded`` from the first bytes."""
    if data[:1] == b"\x80":
        return "snapshot"
    head = data[:64].lstrip()
    if head[:1] in (b"{", b"["):
        return "json"
    return "folded"


def profile_from_bytes(data: bytes, source: str = "input", metric: str = "auto") -> Profile:
    """Decode a profile of any supported format from bytes (already decompressed).

    ``metric`` picks a view: Kineto ``time`` or ``memory``; snapshot
    ``live`` or ``allocated``; ``auto`` chooses what the file has.
    Raises FlameFormatError naming the file and the line or field at fault.
    """
    if metric not in METRICS:
        raise FlameFormatError(f"unknown metric {metric!r}; expected one of {', '.join(METRICS)}")
    kind = detect_format(data)
    title = os.path.basename(source)
    if kind == "snapshot":
        _check_metric(metric, ("live", "allocated"), "a memory snapshot", source)
        snap = load_snapshot_bytes(data, source)
        view = metric if metric in ("live", "allocated") else "auto"
        return _titled(snapshot_profile(snap, view, source), title)
    if kind == "json":
        try:
            doc: Any = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as err:
            raise FlameFormatError(f"{source}: invalid JSON: {err}") from None
        if isinstance(doc, dict) and "profiles" in doc:
            _check_metric(metric, (), "a speedscope profile", source)
            return _titled(parse_speedscope(doc, source), title)
        _check_metric(metric, ("time", "memory"), "a Kineto trace", source)
        if metric == "memory":
            return _titled(kineto_memory(doc, source), title)
        if metric == "time":
            return _titled(kineto_time(doc, source), title)
        return _titled(kineto_auto(doc, source), title)
    _check_metric(metric, (), "folded stacks", source)
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


def load_profile(path: str, metric: str = "auto") -> Profile:
    """Open a profile file of any supported format (see the module docstring)."""
    return profile_from_bytes(_read(path), path, metric)
