"""Which processes exec'd, renamed themselves or exited: the kernel's process connector.

The job scanner re-reads every shell and every young process each tick only to
catch ``exec`` (a batch script that ends in ``exec python train.py`` keeps its
pid). On a login node with hundreds of idle shells that is hundreds of ``stat``
reads a tick for nothing. The kernel says instead: the process connector
(``NETLINK_CONNECTOR``, group ``CN_IDX_PROC``; ``forkstat`` and ``pmon`` use it)
multicasts an event for each ``exec``, each ``comm`` change (``prctl(PR_SET_NAME)``)
and each exit, and :meth:`ProcEvents.drain` reads what came since the last tick.

Only root can listen (``CAP_NET_ADMIN``), and the kernel answers a request to
listen only from the initial user and pid namespaces (an agent in a container
with its own namespaces gets no answer): :func:`open_events` returns None with
why (a :class:`NoEvents`, rendered to its sentence there), and the scanner re-reads shells and young processes as before. Kernels from
6.6 on filter by event type (fork events, the most numerous, are never sent
here); older ones send every event and the unwanted are skipped here.

Bounds: a drain reads at most :data:`MAX_DATAGRAMS` datagrams and each is parsed
within its length. A datagram not from the kernel (netlink port 0) is dropped:
another user can send to this socket's port. A drain that hit the bound, a
malformed datagram, or a full socket buffer (``ENOBUFS``: events were dropped)
says ``complete=False``, and the scanner re-reads as it does without events, so
no exec is missed whatever a busy or hostile node does.
"""

from __future__ import annotations

import enum
import errno
import os
import secrets
import socket
import struct
from dataclasses import dataclass
from typing import ClassVar

from gpulens.core.reasons import Reason, ReasonText

NETLINK_CONNECTOR = 11
CN_IDX_PROC = 1
CN_VAL_PROC = 1
PROC_CN_MCAST_LISTEN = 1
NLMSG_DONE = 3
EVENT_NONE = 0x0
EVENT_EXEC = 0x2
EVENT_COMM = 0x200
EVENT_EXIT = 0x80000000
WANTED = EVENT_EXEC | EVENT_COMM | EVENT_EXIT
"""The events asked for (a 6.6+ kernel sends only these)."""
MAX_DATAGRAMS = 4096
"""Datagrams read by one drain at most (~2 us each); more waiting: the drain is incomplete."""
RCVBUF_BYTES = 1 << 20

_NLMSG = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_CN_MSG = struct.Struct("=IIIIHH")  # idx, val, seq, ack, len, flags
_EVENT = struct.Struct("=IIQ")  # what, cpu, timestamp_ns
_PIDS = struct.Struct("=ii")  # process_pid, process_tgid (exec, comm, exit); err, (ack)
_HEAD = _NLMSG.size + _CN_MSG.size + _EVENT.size


@dataclass(frozen=True, slots=True)
class Drained:
    """What the kernel told since the last drain.

    ``changed``: processes (tgids) that exec'd or renamed themselves; ``exited``: processes
    (tgids) gone; ``complete``: False when events may be missing (buffer overflowed, too
    many to read, a malformed datagram): read as if there were no events.
    """

    changed: frozenset[int] = frozenset()
    exited: frozenset[int] = frozenset()
    complete: bool = True


@dataclass(frozen=True, slots=True)
class Event:
    """One process event: its kind (``EVENT_*``), pid and tgid; for an acknowledgement, its seq/ack."""

    what: int
    pid: int
    tgid: int
    seq: int = 0
    ack: int = 0


def parse(datagram: bytes) -> list[Event]:
    """The process events in one netlink datagram.

    Raises:
        ValueError: a message is shorter than its headers or runs past the datagram.
    """
    out: list[Event] = []
    at, end = 0, len(datagram)
    while at + _NLMSG.size <= end:
        length = _NLMSG.unpack_from(datagram, at)[0]
        if length < _HEAD + _PIDS.size or at + length > end:
            raise ValueError(f"netlink message of {length} bytes at {at} in a {end}-byte datagram")
        idx, val, seq, ack, size, _flags = _CN_MSG.unpack_from(datagram, at + _NLMSG.size)
        if (idx, val) == (CN_IDX_PROC, CN_VAL_PROC) and size >= _EVENT.size + _PIDS.size:
            what = _EVENT.unpack_from(datagram, at + _NLMSG.size + _CN_MSG.size)[0]
            pid, tgid = _PIDS.unpack_from(datagram, at + _HEAD)
            out.append(Event(what, pid, tgid, seq, ack))
        at += (length + 3) & ~3  # NLMSG_ALIGN
    return out


def _listen_request(seq: int, ack: int, with_filter: bool) -> bytes:
    op = struct.pack("=II", PROC_CN_MCAST_LISTEN, WANTED) if with_filter else struct.pack("=I", PROC_CN_MCAST_LISTEN)
    cn = _CN_MSG.pack(CN_IDX_PROC, CN_VAL_PROC, seq, ack, len(op), 0) + op
    return _NLMSG.pack(_NLMSG.size + len(cn), NLMSG_DONE, 0, 0, 0) + cn


class ProcEvents:
    """A listening process-connector socket; :meth:`drain` every tick. Build with :func:`open_events`."""

    __slots__ = ("_buf", "_emptied", "_sock")

    def __init__(self, sock: socket.socket) -> None:
        self._sock: socket.socket | None = sock
        self._buf = bytearray(8192)
        self._emptied = True
        """Whether the last drain read the queue empty. Once a queue overflows the kernel drops every
        event silently (one ENOBUFS, then nothing) until the queue is read empty: a drain after one
        that stopped early cannot know what it missed."""

    def drain(self) -> Drained:
        """The events since the last drain (never blocks)."""
        sock = self._sock
        if sock is None:
            return Drained(complete=False)
        changed: set[int] = set()
        exited: set[int] = set()
        complete = self._emptied
        view = memoryview(self._buf)
        for _ in range(MAX_DATAGRAMS):
            try:
                n, addr = sock.recvfrom_into(self._buf)
            except BlockingIOError:
                self._emptied = True
                break
            except OSError as err:
                complete = False
                if err.errno == errno.ENOBUFS:  # events were dropped: read on, so that delivery resumes
                    continue
                self.close()  # anything else: stop listening
                break
            if addr[0] != 0:  # not from the kernel: another process wrote to our port
                continue
            try:
                events = parse(bytes(view[:n]))
            except ValueError:
                complete = False
                continue
            for ev in events:
                if ev.pid != ev.tgid:  # a thread's exec is reported by its new leader; threads' names and exits
                    continue
                if ev.what == EVENT_EXIT:
                    exited.add(ev.tgid)
                elif ev.what in (EVENT_EXEC, EVENT_COMM):
                    changed.add(ev.tgid)
        else:
            complete = self._emptied = False  # more waiting than one drain reads
        return Drained(frozenset(changed), frozenset(exited), complete)

    def close(self) -> None:
        """Stop listening (idempotent); later drains are incomplete."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None


class NoEventsKind(enum.Enum):
    """Why no process events are heard; the comment says which fields of :class:`NoEvents` it fills."""

    NO_CONNECTOR = "no-connector"  # detail: why no connector socket could be made (the error's words)
    SOCKET_FAILED = "socket-failed"  # detail: binding, configuring or asking failed (the OSError's words)
    NO_ACK = "no-ack"  # the kernel did not answer the listen request (a namespace of its own?)
    REFUSED = "refused"  # code: the errno the kernel answered the listen request with
    ACK_NOT_SEEN = "ack-not-seen"  # no acknowledgement among the first 64 datagrams


@dataclass(frozen=True, slots=True)
class NoEvents(Reason):
    """Why the process connector cannot be listened to: ``kind`` and the facts its sentence names; ``str()`` is
    the one line the job scanner keeps as its reason (``JobScanner.events_why``)."""

    kind: NoEventsKind
    code: int = 0
    detail: str = ""

    TEXT: ClassVar[ReasonText] = {
        NoEventsKind.NO_CONNECTOR: "no process connector: {0.detail}",
        NoEventsKind.SOCKET_FAILED: "process connector: {0.detail}",
        NoEventsKind.NO_ACK: "the kernel did not acknowledge (not in the initial user and pid namespaces?)",
        NoEventsKind.REFUSED: lambda v: f"the kernel refused: {os.strerror(v.code)}",
        NoEventsKind.ACK_NOT_SEEN: "no acknowledgement among the first 64 datagrams",
    }


def _subscribe(sock: socket.socket, with_filter: bool) -> NoEvents | None:
    """Ask to listen; None when the kernel acknowledged, else why not (unfiltered requests only:
    a filtered listener never gets the acknowledgement, whose event type is none)."""
    ack = secrets.randbits(31)
    sock.send(_listen_request(0, ack, with_filter))
    buf = bytearray(8192)
    for _ in range(64):  # the acknowledgement is queued before send() returns; events may come first
        try:
            n, addr = sock.recvfrom_into(buf)
        except BlockingIOError:
            return NoEvents(NoEventsKind.NO_ACK)
        if addr[0] != 0:
            continue
        try:
            events = parse(bytes(buf[:n]))
        except ValueError:
            continue
        for ev in events:
            if ev.what == EVENT_NONE and ev.ack == ack + 1:  # the kernel numbers seq itself
                return None if ev.pid == 0 else NoEvents(NoEventsKind.REFUSED, ev.pid)
    return NoEvents(NoEventsKind.ACK_NOT_SEEN)


def open_events() -> tuple[ProcEvents | None, str]:
    """A listening :class:`ProcEvents`, or None and why not (not root, no connector, a namespace), in words:
    the job scanner keeps them as text."""
    try:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC, NETLINK_CONNECTOR)
    except (OSError, AttributeError) as err:  # AttributeError: no AF_NETLINK on this platform
        return None, str(NoEvents(NoEventsKind.NO_CONNECTOR, detail=str(err)))
    try:
        sock.bind((0, CN_IDX_PROC))
        sock.setblocking(False)
        try:
            sock.setsockopt(socket.SOL_SOCKET, 33, RCVBUF_BYTES)  # SO_RCVBUFFORCE (root)
        except OSError:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF_BYTES)
        why = _subscribe(sock, with_filter=False)
        if why is None:  # now narrow it: a 6.6+ kernel sends only WANTED (its acknowledgement is
            # filtered out too); an older one ignores the longer request and sends everything
            sock.send(_listen_request(0, 0, with_filter=True))
    except OSError as err:
        sock.close()
        return None, str(NoEvents(NoEventsKind.SOCKET_FAILED, detail=str(err.strerror or err)))
    if why is not None:
        sock.close()
        return None, str(why)
    return ProcEvents(sock), ""
