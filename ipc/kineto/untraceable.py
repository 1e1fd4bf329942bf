"""Why a process cannot be traced, as a value: :class:`Untraceable` (a kind and the facts), rendered to text at the edge.

Every ``TraceService.diagnose`` answers one (None: the process can be traced
now). Code decides on ``kind`` (a launcher's reason ranks below its Python's,
a process that has not polled yet may still be traced); people read
``str(reason)``, the one line with the fix, and so does the wire: an agent's
``trace_diagnose`` answer carries :func:`core.reasons.rendered` text, as it always has.

Usage::

    why = service.diagnose(pid)
    if why is not None and why.kind is UntraceableKind.NO_TORCH:
        ...
    print(rendered(why))  # None, or the sentence
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import ClassVar

from gpulens.core.reasons import Reason, ReasonText
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
class Untraceable(Reason):
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

    TEXT: ClassVar[ReasonText] = {
        UntraceableKind.GONE: "process {0.pid} is gone",
        UntraceableKind.OTHER_USER: "process {0.pid} belongs to uid {0.uid}: only its owner or root can trace it",
        UntraceableKind.DESCENDANTS_POLL: lambda v: _descendants(v),
        UntraceableKind.FORKED_AFTER_INIT: (
            "process {0.pid} was forked from process {0.parent} after PyTorch initialised: it never polls; "
            "use the parent (--pid {0.parent}), or the spawn start method"
        ),
        UntraceableKind.ENVIRON_UNREADABLE: "cannot read /proc/{0.pid}/environ: run gpulens as the process's owner",
        UntraceableKind.NO_DAEMON_ENV: (
            "KINETO_USE_DAEMON is not set in its environment: restart it with "
            "KINETO_USE_DAEMON=1 (on-demand tracing is off without it)"
        ),
        UntraceableKind.SOCKET_DIR_MISMATCH: lambda v: _mismatch(v),
        UntraceableKind.NO_TORCH: "no PyTorch loaded in it (libtorch is not mapped): only PyTorch programs can be traced",
        UntraceableKind.SOCKET_DIR_CLOSED: (
            "the socket dir {0.serving} has mode {0.mode:04o}: programs of uid {0.uid} "
            "cannot create their client sockets there, so they never poll: chmod 1733 {0.serving}"
        ),
        UntraceableKind.NOT_POLLED_YET: (
            "it has not polled yet: PyTorch polls every ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS "
            "(5 s by default) once torch is imported; wait a few seconds (a program started "
            "before its KINETO_IPC_SOCKET_DIR existed never polls: restart it)"
        ),
        UntraceableKind.NOT_POLLING_AGENT: ("it does not poll the Kineto endpoint of the agent on {0.host} (start it "
                                            "with KINETO_USE_DAEMON=1 and the agent's KINETO_IPC_SOCKET_DIR)"),
        UntraceableKind.AGENT_FAILED: "the agent on {0.host} says: {0.detail}",
        UntraceableKind.TRACING_OFF: "{0.detail}",  # the service's own words
        UntraceableKind.NO_SERVICE: "no trace service for this host",
        UntraceableKind.CHECK_FAILED: "cannot check: {0.detail}",
    }


def _descendants(u: Untraceable) -> str:
    shown = ",".join(map(str, u.pids))
    more = f" (and {u.more} more)" if u.more > 0 else ""
    return (
        f"process {u.pid} polls nothing itself, but its descendants do: {shown}{more}; trace those "
        f"(gpulens trace --pid {shown}, or --pid {u.pid} --children)"
    )


def _mismatch(u: Untraceable) -> str:
    fix = (
        f"start gpulens with --ipc-socket-dir {u.theirs}"
        if u.theirs
        else "start gpulens without --ipc-socket-dir / KINETO_IPC_SOCKET_DIR"
    )
    return (
        f"socket-dir mismatch: it talks to {describe_address(u.theirs)} but gpulens serves "
        f"{describe_address(u.serving)}: {fix}"
    )


def descendants_poll(pid: int, descendants: list[int], shown: int = DESCENDANTS_SHOWN) -> Untraceable:
    """``pid`` polls nothing but these descendants do: the first ``shown`` named, the rest counted."""
    return Untraceable(UntraceableKind.DESCENDANTS_POLL, pid, pids=tuple(descendants[:shown]),
                       more=max(0, len(descendants) - shown))
