"""Tracing through the gpulens that owns this host's Kineto endpoint (its control socket).

One gpulens per host binds the Kineto name (an agent, or a TUI's or
``gpulens trace``'s in-process owner, ``gpulens.agent.agent.endpoint_owner``);
every other one traces through its control socket. :func:`connect_owner`
finds the holder of the name and checks it (a process of our uid or root's
that runs gpulens; the control socket's ``SO_PEERCRED`` pid must be that
holder, :class:`~gpulens.sources.stream.local_agent.ControlChannel`);
:class:`ControlTraceService` is the profiler screen's trace service over
that link: a :class:`~gpulens.sources.remote_trace.RemoteTraceService`
whose polling set comes from the owner's ``trace_processes`` answer
(``PollerCache``: a second old at most, asked off the caller's thread).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from gpulens.core.procfs import proc_uid
from gpulens.ipc.control import control_name, peer_cred
from gpulens.ipc.errors import StreamError, StreamProblem
from gpulens.ipc.kineto.endpoint import holder_of, resolve_socket_dir
from gpulens.sources.remote_trace import RemoteTraceService
from gpulens.sources.stream.local_agent import (
    HolderKind,
    HolderRefusal,
    LocalAgentLink,
    trusted_peer,
)


def is_gpulens(pid: int) -> bool:
    """True when ``pid``'s command line runs gpulens (``gpulens ...`` or ``python -m gpulens ...``)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read(65536).split(b"\0")
    except OSError:
        return False
    return any(b"gpulens" in a for a in argv[:3])


def untrusted_holder(pid: int) -> HolderRefusal | None:
    """Why the holder ``pid`` of the Kineto name must not get our request (another non-root user), or None."""
    uid = proc_uid(pid)
    if uid is None or trusted_peer(uid, os.geteuid()):
        return None
    return HolderRefusal(HolderKind.OTHER_USER, pid, uid)


def root_control_pid(socket_dir: str | None) -> int | None:
    """The pid of the root process serving the control socket for this Kineto address, if one does.

    Anyone may bind the abstract name first; the kernel's ``SO_PEERCRED`` says
    who holds it, and only uid 0 is taken (nobody else can be root).
    """
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(2.0)
        probe.connect(control_name(socket_dir, 0))
        pid, uid = peer_cred(probe)
    except OSError:
        return None
    finally:
        probe.close()
    return pid if uid == 0 else None


def connect_owner(socket_dir: str | None, download_dir: Path) -> LocalAgentLink:
    """A link to the gpulens holding this host's Kineto name, checked before anything is sent.

    An ordinary user cannot read a root agent's ``/proc/PID/fd``, so a holder
    not found there is looked for as root's control socket (issue 27 item 8:
    the TUI did, ``gpulens trace`` said "busy").

    Raises:
        StreamError: nobody gpulens holds it, the holder is another user's, or its control socket fails.
    """
    held = holder_of(resolve_socket_dir(socket_dir))
    if held is None:
        pid = root_control_pid(socket_dir) if os.geteuid() != 0 else None
        if pid is None:
            raise StreamError("the Kineto name's holder is not found in /proc and no root gpulens serves "
                              "its control socket: it is not a gpulens this one can use", problem=StreamProblem.NO_HOLDER)
        return _serving_traces(LocalAgentLink(socket_dir, pid, 0, download_dir), pid)
    pid = held[0]
    squat = untrusted_holder(pid)
    if squat is not None:
        raise StreamError(str(squat), problem=StreamProblem.UNTRUSTED_HOLDER)
    if not is_gpulens(pid):
        raise StreamError(f"the Kineto name is held by {held[1]} (pid {pid}), not by gpulens", problem=StreamProblem.NOT_GPULENS)
    uid = proc_uid(pid)
    if uid is None:
        raise StreamError(f"the gpulens process {pid} holding the Kineto name is gone; try again",
                          problem=StreamProblem.HOLDER_GONE)
    return _serving_traces(LocalAgentLink(socket_dir, pid, uid, download_dir), pid)


def _serving_traces(link: LocalAgentLink, pid: int) -> LocalAgentLink:
    if "trace" not in link.hello.caps:
        link.close()
        raise StreamError(f"the gpulens holding the Kineto name (pid {pid}) does not serve traces",
                          problem=StreamProblem.NO_TRACE_SERVICE)
    return link


class ControlTraceService(RemoteTraceService):
    """The endpoint owner's traces, for this process's profiler screen (a ``TraceService``).

    The polling set is the owner's ``trace_processes`` answer (this link
    carries no samples to read it from).
    """

    def __init__(self, link: LocalAgentLink) -> None:
        super().__init__(link, link.address, self._pids)
        self.link = link

    @property
    def address(self) -> str:
        """Where the traces are taken (shown in the profiler's title)."""
        return f"the Kineto endpoint of {self.link.address}"

    def _pids(self) -> list[int]:
        return [p.pid for p in self.processes()]

    def stop(self) -> None:
        """Close the control connection."""
        self.link.close()
