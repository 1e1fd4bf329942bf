"""Why a process cannot be traced, as a value: :class:`Untraceable` (a kind and the facts), rendered to text at the edge.

Every ``TraceService.diagnose`` answers one (None: the process can be traced
now). Code decides on ``kind`` (a launcher's reason ranks below its Python's,
a process that has not polled yet may still be traced); people read
``str(reason)``, the one line with the fix, and so does the wire: an agent's
``trace_diagnose`` answer carries :func:`rendered` text, as it always has.

Usage::

    why = service.diagnose(pid)
    if why is not None and why.kind is UntraceableKind.NO_TORCH:
        ...
    print(rendered(why))  # None, or the sentence
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from gpulens.ipc.kineto.endpoint import describe_address


class UntraceableKind(enum.Enum):
    """The kinds of reason; the comment says which fields of :class:`Untraceable` it fills."""

    GONE = "gone"  # pid
    OTHER_USER = "other-user"  # pid, uid (the owner)
    DESCENDANTS_POLL = "descendants-poll"  # pid, pids (the polling descendants shown), more
    FORKED_AFTER_INIT = "forked-after-init"  # pid, parent (the polling one)
    ENVIRON_UNREADABLE = "environ-unreadable"  # pid
    NO_DAEMON_ENV = "no-daemon-env"  # KINETO_USE_DAEMON unset or 0
    SOCKET_DIR_MISMATCH = "socket-dir-mismatch"  # theirs, serving (None: the abstract name)
    NO_TORCH = "no-torch"  # libtorch is not mapped
    SOCKET_DIR_CLOSED = "socket-dir-closed"  # serving, mode, uid (the program's)
    NOT_POLLED_YET = "not-polled-yet"  # everything checks out: it may still poll
    NOT_POLLING_AGENT = "not-polling-agent"  # host: it does not poll that agent's endpoint
    AGENT_FAILED = "agent-failed"  # host, detail: the agent's last failure tracing it
    TRACING_OFF = "tracing-off"  # detail: why this service traces nothing (a failed hand-over, ...)
    NO_SERVICE = "no-service"  # no trace service for the host
    CHECK_FAILED = "check-failed"  # detail: diagnosing raised


DESCENDANTS_SHOWN = 16

_ABOUT_THE_PROCESS = frozenset({
    UntraceableKind.GONE, UntraceableKind.OTHER_USER, UntraceableKind.DESCENDANTS_POLL,
    UntraceableKind.FORKED_AFTER_INIT, UntraceableKind.NO_TORCH,
})


@dataclass(frozen=True, slots=True)
class Untraceable:
    """Why one process cannot be traced: ``kind`` and the facts its sentence names."""

    kind: UntraceableKind
    pid: int = 0
    uid: int | None = None
    pids: tuple[int, ...] = ()
    more: int = 0
    parent: int | None = None
    theirs: str | None = None
    serving: str | None = None
    mode: int = 0
    host: str = ""
    detail: str = ""

    @property
    def ranks_low(self) -> bool:
        """A reason about the process itself (gone, not ours, a launcher, no PyTorch): for a job, a
        reason of another of its processes says more (a shell or launcher never loads torch)."""
        return self.kind in _ABOUT_THE_PROCESS

    def __str__(self) -> str:
        return self.render()

    def render(self) -> str:
        """The one line a person reads, with the fix."""
        k, pid = self.kind, self.pid
        if k is UntraceableKind.GONE:
            return f"process {pid} is gone"
        if k is UntraceableKind.OTHER_USER:
            return f"process {pid} belongs to uid {self.uid}: only its owner or root can trace it"
        if k is UntraceableKind.DESCENDANTS_POLL:
            shown = ",".join(map(str, self.pids))
            more = f" (and {self.more} more)" if self.more > 0 else ""
            return (
                f"process {pid} polls nothing itself, but its descendants do: {shown}{more}; trace those "
                f"(gpulens trace --pid {shown}, or --pid {pid} --children)"
            )
        if k is UntraceableKind.FORKED_AFTER_INIT:
            return (
                f"process {pid} was forked from process {self.parent} after PyTorch initialised: it never polls; "
                f"use the parent (--pid {self.parent}), or the spawn start method"
            )
        if k is UntraceableKind.ENVIRON_UNREADABLE:
            return f"cannot read /proc/{pid}/environ: run gpulens as the process's owner"
        if k is UntraceableKind.NO_DAEMON_ENV:
            return (
                "KINETO_USE_DAEMON is not set in its environment: restart it with "
                "KINETO_USE_DAEMON=1 (on-demand tracing is off without it)"
            )
        if k is UntraceableKind.SOCKET_DIR_MISMATCH:
            return self._mismatch()
        if k is UntraceableKind.NO_TORCH:
            return "no PyTorch loaded in it (libtorch is not mapped): only PyTorch programs can be traced"
        if k is UntraceableKind.SOCKET_DIR_CLOSED:
            return (
                f"the socket dir {self.serving} has mode {self.mode:04o}: programs of uid {self.uid} "
                f"cannot create their client sockets there, so they never poll: chmod 1733 {self.serving}"
            )
        if k is UntraceableKind.NOT_POLLED_YET:
            return (
                "it has not polled yet: PyTorch polls every ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS "
                "(5 s by default) once torch is imported; wait a few seconds (a program started "
                "before its KINETO_IPC_SOCKET_DIR existed never polls: restart it)"
            )
        if k is UntraceableKind.NOT_POLLING_AGENT:
            return (f"it does not poll the Kineto endpoint of the agent on {self.host} (start it with "
                    "KINETO_USE_DAEMON=1 and the agent's KINETO_IPC_SOCKET_DIR)")
        if k is UntraceableKind.AGENT_FAILED:
            return f"the agent on {self.host} says: {self.detail}"
        if k is UntraceableKind.NO_SERVICE:
            return "no trace service for this host"
        if k is UntraceableKind.CHECK_FAILED:
            return f"cannot check: {self.detail}"
        return self.detail  # TRACING_OFF: the service's own words

    def _mismatch(self) -> str:
        fix = (
            f"start gpulens with --ipc-socket-dir {self.theirs}"
            if self.theirs
            else "start gpulens without --ipc-socket-dir / KINETO_IPC_SOCKET_DIR"
        )
        return (
            f"socket-dir mismatch: it talks to {describe_address(self.theirs)} but gpulens serves "
            f"{describe_address(self.serving)}: {fix}"
        )


def descendants_poll(pid: int, descendants: list[int], shown: int = DESCENDANTS_SHOWN) -> Untraceable:
    """``pid`` polls nothing but these descendants do: the first ``shown`` named, the rest counted."""
    return Untraceable(UntraceableKind.DESCENDANTS_POLL, pid, pids=tuple(descendants[:shown]),
                       more=max(0, len(descendants) - shown))


def rendered(reason: Untraceable | None) -> str | None:
    """The reason's sentence (None stays None): what the wire and the screens carry."""
    return None if reason is None else reason.render()
