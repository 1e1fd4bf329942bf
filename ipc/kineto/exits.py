"""How traced processes ended, from the kernel's process-exit events (root only).

gpulens is not the parent of the programs it traces, so it cannot ``waitpid``
them (``pidfd_open`` + ``waitid(P_PIDFD)`` is for children too). A zombie's
status can be read until its parent reaps it
(:func:`gpulens.ipc.kineto.liveness.zombie_status`); a shell or torchrun often
reaps it within milliseconds. The kernel's process events connector
(``NETLINK_CONNECTOR``, ``CN_IDX_PROC``) tells every listener the status word of
each exit, whoever the parent is. Listening needs ``CAP_NET_ADMIN`` in the
initial namespaces (a root agent on the host), and the events carry the pids
of the initial pid namespace, so it is used only there. The trace service
opens it while a trace runs and closes it when none does (every exit, fork and
exec of the host is sent to a listener).

Only the kernel (netlink port 0) is listened to; what is kept is bounded: the
status of the processes asked about, at most :data:`MAX_KEPT`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import struct
from collections.abc import Callable, Collection

from gpulens.ipc.kineto.liveness import ProcIdentity, zombie_status

log = logging.getLogger(__name__)

NETLINK_CONNECTOR = 11
CN_IDX_PROC = 1
CN_VAL_PROC = 1
PROC_CN_MCAST_LISTEN = 1
PROC_CN_MCAST_IGNORE = 2
PROC_EVENT_EXIT = 0x80000000
NLMSG_DONE = 3
_NLMSG = struct.Struct("=IHHII")  # nlmsghdr: len, type, flags, seq, port
_CN = struct.Struct("=IIIIHH")  # cn_msg: idx, val, seq, ack, len, flags
_EVENT = struct.Struct("=IIQ")  # proc_event: what, cpu, timestamp
_EXIT = struct.Struct("=IIII")  # exit_proc_event: pid, tgid, exit_code, exit_signal
_EVENT_AT = _NLMSG.size + _CN.size
MAX_KEPT = 4096
MAX_READS = 4096
"""Datagrams read per drain: a host forking hard cannot keep the watch thread here."""


class ExitEvents:
    """A non-blocking listener to the kernel's process-exit events; :meth:`open` or None."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._status: dict[int, int] = {}

    @classmethod
    def open(cls) -> ExitEvents | None:
        """Listen, or None where the kernel will not tell us (not root, a container's pid namespace)."""
        if not _in_initial_pid_namespace():
            return None
        try:
            sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC, NETLINK_CONNECTOR)
        except (OSError, AttributeError):
            return None
        try:
            sock.bind((0, CN_IDX_PROC))
            sock.setblocking(False)
            sock.sendto(_control(PROC_CN_MCAST_LISTEN), (0, 0))
        except OSError as err:
            log.debug("process exit events unavailable: %s", err)
            sock.close()
            return None
        return cls(sock)

    def drain(self, pids: Collection[int]) -> None:
        """Read what the kernel sent so far; keep the exit status of ``pids``."""
        self._read(pids)

    def status(self, pid: int) -> int | None:
        """The ``waitpid`` status word of ``pid``'s exit, if an event for it was read."""
        return self._status.get(pid)

    def forget(self, pid: int) -> None:
        """Drop what is kept of ``pid`` (its trace is over; the pid may be reused)."""
        self._status.pop(pid, None)

    def close(self) -> None:
        """Stop listening."""
        with contextlib.suppress(OSError):
            self._sock.sendto(_control(PROC_CN_MCAST_IGNORE), (0, 0))
        self._sock.close()

    def _read(self, pids: Collection[int]) -> None:
        for _ in range(MAX_READS):
            try:
                data, addr = self._sock.recvfrom(65536)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as err:  # ENOBUFS: events were lost while nobody read; carry on
                log.debug("process exit events: %s", err)
                continue
            if addr[0] != 0:
                continue  # not the kernel
            for pid, status in _exits(data):
                if pid in pids:
                    self._status[pid] = status
                    while len(self._status) > MAX_KEPT:
                        del self._status[next(iter(self._status))]


class ExitWatch:
    """How traced processes ended, for the trace service's watch thread (its alone: not thread-safe).

    Listens to :class:`ExitEvents` while a trace runs (root on the host) and
    not while idle; ``open_pids()`` are the processes whose end matters now.
    """

    def __init__(self, open_pids: Callable[[], Collection[int]]) -> None:
        self._open_pids = open_pids
        self._events: ExitEvents | None = None
        self._tried = False

    def listen(self, on: bool) -> None:
        """Hear the kernel's exit events while a trace runs (``on``), not while idle."""
        if on and self._events is None and not self._tried:
            self._tried = True  # once per busy spell: a refusal is not retried every tick
            self._events = ExitEvents.open()
        elif not on:
            self._tried = False
            if self._events is not None:
                self._events.close()
                self._events = None
        if self._events is not None:
            self._events.drain(self._open_pids())

    def ended(self, pid: int, ident: ProcIdentity | None) -> int | None:
        """How a traced process that is gone ended: its zombie's status, else the kernel's exit event."""
        status = zombie_status(pid, ident)
        if status is None and self._events is not None:
            self._events.drain(self._open_pids())  # the event is sent before the process shows as gone
            status = self._events.status(pid)
            self._events.forget(pid)
        return status


def _control(op: int) -> bytes:
    payload = struct.pack("=I", op)
    cn = _CN.pack(CN_IDX_PROC, CN_VAL_PROC, 0, 0, len(payload), 0) + payload
    return _NLMSG.pack(_NLMSG.size + len(cn), NLMSG_DONE, 0, 0, os.getpid()) + cn


def _exits(data: bytes) -> list[tuple[int, int]]:
    """(pid, status) of each whole-process exit in one datagram (a thread's own exit is skipped)."""
    out = []
    at = 0
    while at + _NLMSG.size <= len(data):
        length = _NLMSG.unpack_from(data, at)[0]
        if length < _NLMSG.size or at + length > len(data):
            break
        msg = data[at : at + length]
        if len(msg) >= _EVENT_AT + _EVENT.size + _EXIT.size:
            idx, val = _CN.unpack_from(msg, _NLMSG.size)[:2]
            what = _EVENT.unpack_from(msg, _EVENT_AT)[0]
            if (idx, val, what) == (CN_IDX_PROC, CN_VAL_PROC, PROC_EVENT_EXIT):
                pid, tgid, code, _sig = _EXIT.unpack_from(msg, _EVENT_AT + _EVENT.size)
                if pid == tgid:
                    out.append((pid, code))
        at += (length + 3) & ~3  # NLMSG_ALIGN
    return out


def _in_initial_pid_namespace() -> bool:
    """One pid in ``NSpid``: this process sees the pids the kernel's events carry."""
    try:
        with open("/proc/self/status", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("NSpid:"):
                    return len(line.split()) == 2
    except OSError:
        return False
    return True  # kernels before 4.1 have no NSpid line: no pid namespaces to tell apart
