"""Compact typed records for Chrome-trace events, decoded straight from JSON by msgspec.

Only the fields gpulens uses are declared; msgspec skips the rest without
building Python objects for them, which keeps big traces lean. ``args``
values stay ``Any`` because producers disagree on their types (AMD writes
sizes as strings).
"""

from __future__ import annotations

from typing import Any

import msgspec


class Args(msgspec.Struct, gc=False):
    """The event arguments analysis needs (each None when absent)."""

    name: Any = None  # process_name / thread_name metadata
    labels: Any = None
    stream: Any = None
    device: Any = None
    correlation: Any = None
    bytes: Any = None
    external_id: Any = msgspec.field(default=None, name="External id")
    external_id_old: Any = msgspec.field(default=None, name="external id")
    total_allocated: Any = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Any = msgspec.field(default=None, name="Total Reserved")
    device_type: Any = msgspec.field(default=None, name="Device Type")
    device_id: Any = msgspec.field(default=None, name="Device Id")
    mem_bytes: Any = msgspec.field(default=None, name="Bytes")
    rank: Any = None
    input_dims: Any = msgspec.field(default=None, name="Input Dims")


class _EventHead(msgspec.Struct, gc=False):
    """The fields every trace event has; times in microseconds as in the Chrome trace format."""

    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: float = 0.0
    dur: float = 0.0


class Event(_EventHead, gc=False):
    """One trace event with its args decoded."""

    args: Args | None = None


class RawEvent(_EventHead, gc=False):
    """An event whose args are left undecoded: most events (CPU ops) never need them."""

    args: msgspec.Raw = msgspec.Raw(b"")  # b"" when absent


ARGS_DECODER = msgspec.json.Decoder(Args)


def with_args(ev: RawEvent) -> Event:
    """The typed Event for a RawEvent, decoding its args (malformed args become None)."""
    args = None
    if len(ev.args):
        try:
            args = ARGS_DECODER.decode(ev.args)
        except (msgspec.ValidationError, msgspec.DecodeError):
            args = None  # null, not an object, or odd field types: treat as absent
    return Event(ev.ph, ev.cat, ev.name, ev.pid, ev.tid, ev.ts, ev.dur, args)


class FullEvent(_EventHead, gc=False):
    """An event with every argument kept (for the timeline's detail view)."""

    args: dict[str, Any] | None = None


def external_id(ev: Event) -> int | None:
    """The op/launch link id, in either the new or the old (lower-case) spelling."""
    a = ev.args
    if a is None:
        return None
    v = a.external_id if a.external_id is not None else a.external_id_old
    return v if isinstance(v, int) else None
