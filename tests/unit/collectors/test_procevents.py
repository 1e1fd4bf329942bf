"""The kernel's process connector (collectors/procevents.py): real events as root, hostile datagrams always."""

from __future__ import annotations

import errno
import secrets
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator
from typing import cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpulens.collectors import procevents
from gpulens.collectors.procevents import (
    CN_IDX_PROC,
    CN_VAL_PROC,
    EVENT_COMM,
    EVENT_EXEC,
    EVENT_EXIT,
    EVENT_NONE,
    NETLINK_CONNECTOR,
    Drained,
    Event,
    NoEvents,
    NoEventsKind,
    ProcEvents,
    open_events,
    parse,
)


def _message(what: int, pid: int, tgid: int, *, ack: int = 0, extra: bytes = b"\0" * 16) -> bytes:
    """One netlink message as the kernel writes it: nlmsghdr, cn_msg, proc_event."""
    event = struct.pack("=IIQii", what, 0, 0, pid, tgid) + extra
    cn = struct.pack("=IIIIHH", CN_IDX_PROC, CN_VAL_PROC, 7, ack, len(event), 0) + event
    return struct.pack("=IHHII", 16 + len(cn), 3, 0, 0, 0) + cn


def test_parse_reads_the_kernel_layout() -> None:
    one = _message(EVENT_EXEC, 42, 42)
    assert parse(one) == [Event(EVENT_EXEC, 42, 42, 7, 0)]
    two = one + _message(EVENT_EXIT, 43, 41)  # 60-byte messages: already 4-aligned
    assert [(e.what, e.pid, e.tgid) for e in parse(two)] == [(EVENT_EXEC, 42, 42), (EVENT_EXIT, 43, 41)]


@pytest.mark.parametrize("bad", [
    _message(EVENT_EXEC, 1, 1)[:-1],  # runs past the datagram
    struct.pack("=IHHII", 0, 3, 0, 0, 0) + b"\0" * 40,  # a zero length would never advance
    struct.pack("=IHHII", 20, 3, 0, 0, 0) + b"\0" * 40,  # shorter than its own headers
    struct.pack("=IHHII", 1 << 31, 3, 0, 0, 0),  # claims 2 GiB
], ids=["truncated", "zero-length", "short", "huge"])
def test_parse_refuses_malformed(bad: bytes) -> None:
    with pytest.raises(ValueError, match="netlink message of"):
        parse(bad)


def test_parse_skips_other_connectors() -> None:
    other = bytearray(_message(EVENT_EXEC, 5, 5))
    struct.pack_into("=I", other, 16, 99)  # cn_msg.idx of another connector
    assert parse(bytes(other)) == []


class _Kernel:
    """A connector socket that answers a listen request with ``datagrams`` ((bytes, sender port)), then nothing."""

    def __init__(self, datagrams: list[tuple[bytes, int]]) -> None:
        self.datagrams = datagrams

    def send(self, data: bytes) -> int:
        return len(data)

    def recvfrom_into(self, buf: bytearray) -> tuple[int, tuple[int, int]]:
        if not self.datagrams:
            raise BlockingIOError
        data, port = self.datagrams.pop(0)
        buf[:len(data)] = data
        return len(data), (port, 0)


def _subscribe(datagrams: list[tuple[bytes, int]], monkeypatch: pytest.MonkeyPatch) -> NoEvents | None:
    monkeypatch.setattr(secrets, "randbits", lambda _: 41)  # the kernel acknowledges 42
    return procevents._subscribe(cast(socket.socket, _Kernel(datagrams)), with_filter=False)


def test_why_the_kernel_does_not_let_us_listen(monkeypatch: pytest.MonkeyPatch) -> None:
    ack = _message(EVENT_NONE, 0, 0, ack=42)
    assert _subscribe([(b"junk", 0), (ack, 5), (ack, 0)], monkeypatch) is None  # not from the kernel: skipped
    assert _subscribe([], monkeypatch) == NoEvents(NoEventsKind.NO_ACK)
    refused = _subscribe([(_message(EVENT_NONE, errno.EPERM, 0, ack=42), 0)], monkeypatch)
    assert refused == NoEvents(NoEventsKind.REFUSED, errno.EPERM)
    assert str(refused) == "the kernel refused: Operation not permitted"  # pinned on purpose: the kernel's words
    other = _message(EVENT_NONE, 0, 0, ack=9)  # another listener's acknowledgement
    assert _subscribe([(other, 0)] * 70, monkeypatch) == NoEvents(NoEventsKind.ACK_NOT_SEEN)


@given(st.binary(max_size=512))
def test_parse_hostile_bytes_never_crash(data: bytes) -> None:
    try:
        events = parse(data)
    except ValueError:
        return
    assert all(isinstance(e, Event) for e in events)


@pytest.fixture
def events() -> Iterator[ProcEvents]:
    ev, why = open_events()
    if ev is None:
        pytest.skip(f"no process connector here (needs root in the initial namespaces): {why}")
    yield ev
    ev.close()


def test_exec_and_exit_of_a_real_process(events: ProcEvents) -> None:
    child = subprocess.Popen(["/bin/sh", "-c", "exec /bin/true"])
    child.wait()
    got = events.drain()
    assert got.complete
    assert child.pid in got.changed  # sh exec'd true, keeping its pid
    assert child.pid in got.exited


def test_a_rename_is_a_change(events: ProcEvents) -> None:
    code = "import ctypes; ctypes.CDLL(None).prctl(15, b'renamed', 0, 0, 0)"  # PR_SET_NAME
    child = subprocess.Popen([sys.executable, "-c", code])
    child.wait()
    got = events.drain()
    assert child.pid in got.changed and child.pid in got.exited


def test_a_datagram_not_from_the_kernel_is_dropped(events: ProcEvents) -> None:
    sock = events._sock
    assert sock is not None
    port = sock.getsockname()[0]
    forger = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_CONNECTOR)
    try:
        forger.bind((0, 0))
        forger.sendto(_message(EVENT_EXEC, 4242, 4242), (port, 0))
    except OSError as err:
        pytest.skip(f"this kernel refuses the forged unicast itself: {err}")
    finally:
        forger.close()
    got = events.drain()
    assert 4242 not in got.changed


def test_dropped_events_make_the_drain_incomplete(events: ProcEvents) -> None:
    sock = events._sock
    assert sock is not None
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 0)  # the kernel's least: a few messages
    for _ in range(40):
        subprocess.run(["/bin/true"], check=True)
    assert not events.drain().complete  # ENOBUFS: the scanner re-reads as without events
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, procevents.RCVBUF_BYTES)
    child = subprocess.Popen(["/bin/true"])
    child.wait()
    assert child.pid in events.drain().exited  # and listens on


def test_too_many_datagrams_for_one_drain(events: ProcEvents, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(procevents, "MAX_DATAGRAMS", 2)
    for _ in range(3):
        subprocess.run(["/bin/true"], check=True)
    assert not events.drain().complete
    monkeypatch.setattr(procevents, "MAX_DATAGRAMS", 4096)
    # The queue was left full: what the kernel dropped meanwhile is unknown, so the next drain is
    # incomplete too even when it reads the queue empty; the one after is whole again.
    assert not events.drain().complete
    assert events.drain().complete


def test_a_closed_listener_is_incomplete(events: ProcEvents) -> None:
    events.close()
    events.close()  # idempotent
    assert events.drain() == Drained(complete=False)


def test_thread_renames_are_not_changes(events: ProcEvents) -> None:
    code = ("import threading, ctypes\n"
            "def run():\n    ctypes.CDLL(None).prctl(15, b'worker', 0, 0, 0); print(threading.get_native_id())\n"
            "t = threading.Thread(target=run); t.start(); t.join()")
    child = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    tid = int(child.stdout)
    got = events.drain()
    assert got.complete
    assert tid not in got.changed and tid not in got.exited  # a thread's name and end are not the process's


def test_comm_event_value() -> None:
    assert EVENT_COMM == 0x200  # linux/cn_proc.h PROC_EVENT_COMM
