"""Read a Chrome-trace JSON file (``.json`` or ``.json.gz``) into typed events.

Bounded (:mod:`gpulens.core.limits`): only regular files; the
uncompressed size may not exceed ``max_bytes`` (``--max-mib``) nor
``max_ratio`` times the file (``--max-ratio``), both checked while
decompressing, so a gzip bomb stops early; the events may not number more
than ``max_events`` (``--max-events``), counted chunk by chunk as they
decode, so the sink never receives more; JSON nested deeper than Python's
recursion limit is refused. A truncated or invalid file raises
:class:`TraceFileError` naming the file and what is wrong. ``progress`` is
called with a fraction in [0, 1] while reading; parsing (one C scan for the
document, then one C call per chunk of events) is reported as a final step.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from gpulens.analysis.trace.errors import TraceFileError, TraceProblem
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
        raise TraceFileError.refused(err) from None


class _RawDoc(msgspec.Struct):
    traceEvents: msgspec.Raw = msgspec.Raw(b"[]")
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
CHUNK_BYTES = 2 * MiB
"""Bytes of event text decoded at once (about 8,000 Kineto events)."""
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")  # between two events: "}" "," "{" with only whitespace around
_WS = b" \t\r\n"


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

    One C scan finds the ``traceEvents`` array (and decodes the small
    metadata around it); the array is then cut into chunks of about
    :data:`CHUNK_BYTES` at event boundaries and each chunk decoded in one
    call, so only one chunk's event objects are alive at once: the sink keeps
    what it needs in compact form. A cut that is not between two events (the
    bytes ``}, {`` inside a string or a nested value) makes that chunk invalid
    JSON; from there on the rest is split into single raw events first and
    decoded in batches of :data:`BATCH`. ``limits`` (default
    :func:`trace_limits` with ``max_bytes``) bound the read and the number of
    events (counted as they decode; the sink never sees more than the limit).

    Raises:
        TraceFileError: missing, over a limit, truncated, not JSON, or not a trace.
    """
    name = str(path)
    limits = limits or trace_limits(max_bytes)
    buf = read_bytes(path, limits=limits, progress=progress)
    size = len(buf)
    head = bytes(buf[:64]).lstrip()[:1]
    if not head:
        raise TraceFileError(f"{name}: empty file", problem=TraceProblem.EMPTY)
    try:
        if head == b"[":  # a bare event array (Chrome's "JSON array format")
            doc = _RawDoc(traceEvents=msgspec.json.decode(buf, type=msgspec.Raw))
        else:
            doc = msgspec.json.decode(buf, type=_RawDoc)
    except msgspec.ValidationError as err:
        raise TraceFileError(f"{name}: not a Chrome trace: {err}", problem=TraceProblem.NOT_A_TRACE) from err
    except msgspec.DecodeError as err:
        raise _explain(name, str(err), size) from err
    except RecursionError:
        raise TraceFileError(
            f"{name}: JSON nested deeper than Python's recursion limit (about 1000 levels); "
            "no Chrome trace nests this deep", problem=TraceProblem.NOT_JSON,
        ) from None
    arr = memoryview(doc.traceEvents)
    lo, hi = _strip(arr)
    if hi - lo < 2 or arr[lo] != ord("[") or arr[hi - 1] != ord("]"):
        raise TraceFileError(f"{name}: not a Chrome trace: `traceEvents` is not an array",
                             problem=TraceProblem.NOT_A_TRACE)
    event_type: Any = FullEvent if keep_args else RawEvent
    reader = _Chunks(name, arr[lo + 1 : hi - 1], event_type, sink, limits.max_events, progress)
    count = reader.run()
    props = _props(doc.deviceProperties)
    dist = doc.distributedInfo if isinstance(doc.distributedInfo, dict) else None
    return TraceMeta(name, size, count, props, dist)


def _strip(view: memoryview) -> tuple[int, int]:
    """Offsets of the first and one past the last non-whitespace byte."""
    lo, hi = 0, len(view)
    while lo < hi and view[lo] in _WS:
        lo += 1
    while hi > lo and view[hi - 1] in _WS:
        hi -= 1
    return lo, hi


@dataclass(slots=True)
class _Chunks:
    """Decode the inside of the events array chunk by chunk into ``sink``."""

    name: str
    inner: memoryview  # the array's text without its brackets
    event_type: Any
    sink: Callable[[list[Any]], None]
    max_events: int
    progress: Progress | None
    count: int = 0

    def run(self) -> int:
        inner, end = self.inner, len(self.inner)
        event_type: Any = self.event_type
        decoder = msgspec.json.Decoder(list[event_type])
        pos = _strip(inner)[0]
        while pos < end:
            m = _BOUNDARY.search(inner, pos + CHUNK_BYTES) if pos + CHUNK_BYTES < end else None
            stop = m.start() + 1 if m else end
            text = b"".join((b"[", inner[pos:stop], b"]"))
            try:
                batch = decoder.decode(text)
                n = len(batch)
            except (msgspec.ValidationError, RecursionError):  # odd field types; nesting Raw skipped
                raws = self._raws(text)
                batch, n = _lenient(raws, self.event_type), len(raws)
            except msgspec.DecodeError:  # the cut fell inside a string or a nested value
                self._by_event(inner[pos:end])
                return self.count
            self._deliver(batch, n)
            if self.progress is not None:
                self.progress(0.8 + 0.2 * stop / end, "parsing")
            pos = m.end() - 1 if m else end
        return self.count

    def _raws(self, text: bytes) -> list[msgspec.Raw]:
        try:
            return msgspec.json.decode(text, type=list[msgspec.Raw])
        except (msgspec.DecodeError, RecursionError):
            return []

    def _deliver(self, batch: list[Any], n: int) -> None:
        self.count += n
        if self.count > self.max_events:
            raise TraceFileError(too_many(self.name, "events", self.max_events), problem=TraceProblem.TOO_MANY_EVENTS)
        self.sink(batch)

    def _by_event(self, rest: memoryview) -> None:
        """The slow, always-right path: split the rest into raw events, then decode in batches."""
        try:
            raws = msgspec.json.decode(b"".join((b"[", rest, b"]")), type=list[msgspec.Raw])
        except (msgspec.DecodeError, RecursionError) as err:
            raise TraceFileError(f"{self.name}: not valid JSON in traceEvents: {err}",
                                 problem=TraceProblem.NOT_JSON) from None
        if self.count + len(raws) > self.max_events:
            raise TraceFileError(too_many(self.name, "events", self.max_events), problem=TraceProblem.TOO_MANY_EVENTS)
        event_type: Any = self.event_type
        decoder = msgspec.json.Decoder(list[event_type])
        for i in range(0, len(raws), BATCH):
            chunk = raws[i : i + BATCH]
            try:
                batch = decoder.decode(b"[" + b",".join(chunk) + b"]")
            except (msgspec.ValidationError, RecursionError):
                batch = _lenient(chunk, self.event_type)
            self._deliver(batch, len(chunk))


def _lenient(chunk: list[msgspec.Raw], event_type: type[RawEvent | FullEvent]) -> list[Any]:
    """Decode events one by one, converting loosely typed fields; skip the unconvertible."""
    out = []
    for raw in chunk:
        try:
            item = msgspec.json.decode(raw)
            if not isinstance(item, dict):
                continue
            args = item.pop("args", None)
            ev = msgspec.convert(item, event_type, strict=False)
            if isinstance(ev, RawEvent):
                ev.args = msgspec.Raw(msgspec.json.encode(args)) if isinstance(args, dict) else msgspec.Raw(b"")
            elif isinstance(args, dict):
                ev.args = args
            out.append(ev)
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
            continue  # one odd event must not make the whole trace unreadable
    return out


def _props(value: object) -> list[dict[str, Any]]:
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


def _explain(path: str, why: str, size: int) -> TraceFileError:
    if "truncated" in why:
        return TraceFileError(
            f"{path}: truncated: the JSON ends early after {size} bytes "
            "(still being written, or a copy was cut short)", problem=TraceProblem.TRUNCATED,
        )
    return TraceFileError(f"{path}: not valid JSON: {why}", problem=TraceProblem.NOT_JSON)
