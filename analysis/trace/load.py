"""Read a Chrome-trace JSON file (``.json`` or ``.json.gz``) into typed events.

Bounded (:mod:`gpulens.core.limits`): only regular files; the
uncompressed size may not exceed ``max_bytes`` (``--max-mib``) nor
``max_ratio`` times the file (``--max-ratio``), both checked while
decompressing, so a gzip bomb stops early; the events may not number more
than ``max_events`` (``--max-events``), checked after the fast C scan that
splits them and before any is decoded; JSON nested deeper than Python's
recursion limit is refused. A truncated or invalid file raises
:class:`TraceFileError` naming the file and what is wrong. ``progress`` is
called with a fraction in [0, 1] while reading; parsing itself is one fast
C call (msgspec), reported as a final step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from gpulens.analysis.trace.errors import TraceFileError
from gpulens.analysis.trace.events import FullEvent, RawEvent
from gpulens.core.limits import (
    ANALYZE_MAX_MIB,
    DEFAULT_MAX_EVENTS,
    DEFAULT_MAX_RATIO,
    InputLimits,
    InputRefused,
    MiB,
    read_input,
    too_many,
)

DEFAULT_MAX_BYTES = ANALYZE_MAX_MIB * MiB
"""Default ``--max-mib`` of ``gpulens analyze``: 4 GiB uncompressed."""
Progress = Callable[[float, str], None]


@dataclass(slots=True)
class Trace:
    """A loaded trace: events plus the top-level metadata Kineto writes."""

    path: str
    events: list[Any]
    device_properties: list[dict[str, Any]]
    distributed_info: dict[str, Any] | None
    size_bytes: int


def trace_limits(
    max_bytes: int = DEFAULT_MAX_BYTES, max_ratio: float = DEFAULT_MAX_RATIO, max_events: int = DEFAULT_MAX_EVENTS
) -> InputLimits:
    """The limits for one trace (defaults: those of ``gpulens analyze`` without flags)."""
    return InputLimits(max_bytes=max_bytes, max_ratio=max_ratio, max_events=max_events)


def read_bytes(
    path: str | Path,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    limits: InputLimits | None = None,
    progress: Progress | None = None,
) -> bytearray:
    """The uncompressed file contents (``limits`` wins over ``max_bytes`` when given).

    Raises:
        TraceFileError: missing, not a regular file, bad gzip, or over a limit.
    """
    try:
        return read_input(str(path), limits or trace_limits(max_bytes), what="trace file (.json or .json.gz)",
                          progress=progress)
    except InputRefused as err:
        raise TraceFileError(str(err)) from None


class _RawDoc(msgspec.Struct):
    traceEvents: list[msgspec.Raw] = []
    deviceProperties: Any = None
    distributedInfo: Any = None


@dataclass(frozen=True, slots=True)
class TraceMeta:
    """Top-level facts of a trace file (everything but the events)."""

    path: str
    size_bytes: int
    events: int
    device_properties: list[dict[str, Any]]
    distributed_info: dict[str, Any] | None


BATCH = 8192


def stream_events(
    path: str | Path,
    sink: Callable[[list[Any]], None],
    *,
    keep_args: bool = False,
    max_bytes: int = DEFAULT_MAX_BYTES,
    limits: InputLimits | None = None,
    progress: Progress | None = None,
) -> TraceMeta:
    """Decode a trace in batches of typed events handed to ``sink``; returns its metadata.

    The file is first split into raw event slices (a fast C scan), then
    decoded a batch at a time, so only one batch of full event objects is
    alive at once: the sink keeps what it needs in compact form. ``limits``
    (default :func:`trace_limits` with ``max_bytes``) bound the read and the
    number of events.

    Raises:
        TraceFileError: missing, over a limit, truncated, not JSON, or not a trace.
    """
    name = str(path)
    limits = limits or trace_limits(max_bytes)
    buf = read_bytes(path, limits=limits, progress=progress)
    size = len(buf)
    head = bytes(buf[:64]).lstrip()[:1]
    if not head:
        raise TraceFileError(f"{name}: empty file")
    try:
        if head == b"[":  # a bare event array (Chrome's "JSON array format")
            doc = _RawDoc(traceEvents=msgspec.json.decode(buf, type=list[msgspec.Raw]))
        else:
            doc = msgspec.json.decode(buf, type=_RawDoc)
    except msgspec.ValidationError as err:
        raise TraceFileError(f"{name}: not a Chrome trace: {err}") from err
    except msgspec.DecodeError as err:
        raise TraceFileError(_explain(name, str(err), size)) from err
    except RecursionError:
        raise TraceFileError(
            f"{name}: JSON nested deeper than Python's recursion limit (about 1000 levels); "
            "no Chrome trace nests this deep"
        ) from None
    event_type: Any = FullEvent if keep_args else RawEvent
    decoder = msgspec.json.Decoder(list[event_type])
    raws = doc.traceEvents
    doc.traceEvents = []
    del buf  # the raw slices keep what they need of it
    count = len(raws)
    if count > limits.max_events:
        raise TraceFileError(too_many(name, "events", limits.max_events))
    for i in range(0, count, BATCH):
        chunk = raws[i : i + BATCH]
        try:
            batch = decoder.decode(b"[" + b",".join(chunk) + b"]")
        except msgspec.ValidationError:
            batch = _lenient(chunk, event_type)
        except RecursionError:  # msgspec.Raw skips nesting that decoding then meets
            batch = _lenient(chunk, event_type)
        sink(batch)
        if progress is not None:
            progress(0.8 + 0.2 * min(i + BATCH, count) / count, "parsing")
    del raws
    props = _props(doc.deviceProperties)
    dist = doc.distributedInfo if isinstance(doc.distributedInfo, dict) else None
    return TraceMeta(name, size, count, props, dist)


def _lenient(chunk: list[msgspec.Raw], event_type: Any) -> list[Any]:
    """Decode events one by one, converting loosely typed fields; skip the unconvertible."""
    out = []
    for raw in chunk:
        try:
            item = msgspec.json.decode(raw)
            if not isinstance(item, dict):
                continue
            args = item.pop("args", None)
            ev = msgspec.convert(item, event_type, strict=False)
            if event_type is RawEvent:
                ev.args = msgspec.Raw(msgspec.json.encode(args)) if isinstance(args, dict) else msgspec.Raw(b"")
            elif isinstance(args, dict):
                ev.args = args
            out.append(ev)
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
            continue  # one odd event must not make the whole trace unreadable
    return out


def _props(value: Any) -> list[dict[str, Any]]:
    return [d for d in value if isinstance(d, dict)] if isinstance(value, list) else []


def load_trace(
    path: str | Path,
    *,
    keep_args: bool = False,
    max_bytes: int = DEFAULT_MAX_BYTES,
    limits: InputLimits | None = None,
    progress: Progress | None = None,
) -> Trace:
    """Load every event (FullEvent with ``keep_args``, else RawEvent); analysis uses compact loading.

    Raises:
        TraceFileError: missing, over a limit, truncated, not JSON, or not a trace.
    """
    events: list[Any] = []
    meta = stream_events(path, events.extend, keep_args=keep_args, max_bytes=max_bytes, limits=limits,
                         progress=progress)
    return Trace(meta.path, events, meta.device_properties, meta.distributed_info, meta.size_bytes)


def _explain(path: str, why: str, size: int) -> str:
    if "truncated" in why:
        return (
            f"{path}: truncated: the JSON ends early after {size} bytes "
            "(still being written, or a copy was cut short)"
        )
    return f"{path}: not valid JSON: {why}"
