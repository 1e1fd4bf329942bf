"""Signals to this machine's processes, the process screen's action: only one's own, and only the one shown.

:func:`refusal` says why a signal may not be sent (None: it may), as a
:class:`NoSignal` value (a kind and the facts; ``str()`` is the sentence the
screen shows), checked
again right before :func:`send`, so a process that exited and whose pid was
reused by someone else's is never hit: its start time must still match the
one the screen showed, and psutil checks once more, at the signal, that the
pid still names the process it looked at (its own pid-reuse guard). Another
host's process is checked and signalled there, through the user's own ssh
(:mod:`gpulens.sources.ssh_signal`). The screens send nothing themselves.
"""

from __future__ import annotations

import enum
import errno
import os
import signal
from dataclasses import dataclass
from typing import ClassVar

import psutil

from gpulens.core.model import JobInfo
from gpulens.core.procfs import current_uid
from gpulens.core.reasons import Reason, ReasonText

SIGNALS: dict[str, signal.Signals] = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM,
                                      "SIGKILL": signal.SIGKILL}
MAX_CMDLINE = 8192


def start_time(pid: int) -> float | None:
    """``pid``'s start, in unix seconds (boot time plus its start ticks, as the job collector has it); None when
    gone."""
    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return None


def proc_cmdline(pid: int) -> str | None:
    """``pid``'s command line as the kernel has it now (arguments joined by spaces); None when gone.

    The kernel's ``[comm]`` stands for a process with no command line (a kernel thread, a zombie).
    """
    try:
        p = psutil.Process(pid)
        try:
            args = p.cmdline()
        except psutil.ZombieProcess:
            args = []
        if not args:
            return f"[{p.name()}]"
    except psutil.Error:
        return None
    return " ".join(args)[:MAX_CMDLINE]


NO_REMOTE = "signals to another host's processes go through ssh, which this source does not offer"


class NoSignalKind(enum.Enum):
    """Why no signal goes out; the comment says which fields of :class:`NoSignal` it fills."""

    READONLY = "readonly"  # --readonly: no actions
    REMOTE = "remote"  # detail: why another host's process cannot be signalled (ssh's reason, or NO_REMOTE)
    NOT_REPORTED = "not-reported"  # the samples no longer report the process
    EXITED = "exited"  # pid
    UNREADABLE = "unreadable"  # pid, detail: psutil's words
    OTHER_USER = "other-user"  # pid, uid (its owner), me (the uid asking)
    REUSED = "reused"  # pid: its start time changed, so it names another process now


@dataclass(frozen=True, slots=True)
class NoSignal(Reason):
    """Why no signal may be sent to a process: ``kind`` and the facts its sentence names; ``str()`` is the one
    line the process screen shows (after ``signals:`` or ``not sent:``)."""

    kind: NoSignalKind
    pid: int = 0
    uid: int = 0
    me: int = 0
    detail: str = ""

    TEXT: ClassVar[ReasonText] = {
        NoSignalKind.READONLY: "read-only (--readonly): no actions",
        NoSignalKind.REMOTE: "{0.detail}",  # the words as they came
        NoSignalKind.NOT_REPORTED: "the process is no longer reported",
        NoSignalKind.EXITED: "pid {0.pid} has exited",
        NoSignalKind.UNREADABLE: "pid {0.pid}: {0.detail}",
        NoSignalKind.OTHER_USER: ("pid {0.pid} belongs to uid {0.uid}, not to you (uid {0.me}): "
                                  "gpulens signals only your own"),
        NoSignalKind.REUSED: "pid {0.pid} is now another process (its start time changed)",
    }


def refusal(job: JobInfo | None, *, local: bool, readonly: bool, remote_why: str | None = NO_REMOTE,
            uid: int | None = None) -> NoSignal | None:
    """Why no signal may be sent to ``job``'s process (None when it may).

    ``remote_why``: for another host's process, why ssh cannot be used (None:
    it can; the checks then run on that host).
    """
    if readonly:
        return NoSignal(NoSignalKind.READONLY)
    if not local and remote_why is not None:
        return NoSignal(NoSignalKind.REMOTE, detail=remote_why)
    if job is None:
        return NoSignal(NoSignalKind.NOT_REPORTED)
    if not local:
        return None
    return _local_refusal(job, current_uid() if uid is None else uid)[0]


def _local_refusal(job: JobInfo, me: int) -> tuple[NoSignal | None, psutil.Process | None]:
    """Why ``job``'s process on this machine may not get a signal from uid ``me``, or the process to send to."""
    try:
        p = psutil.Process(job.pid)
        owner, started = p.uids().real, p.create_time()
    except psutil.NoSuchProcess:
        return NoSignal(NoSignalKind.EXITED, job.pid), None
    except psutil.Error as err:
        return NoSignal(NoSignalKind.UNREADABLE, job.pid, detail=str(err)), None
    if owner != me:
        return NoSignal(NoSignalKind.OTHER_USER, job.pid, uid=owner, me=me), None
    if abs(started - job.start_time) > 2.0:
        return NoSignal(NoSignalKind.REUSED, job.pid), None
    return None, p


def send(job: JobInfo, name: str) -> str:
    """Send signal ``name`` to ``job``'s process after checking again; what happened, in words."""
    why, p = _local_refusal(job, current_uid())
    if why is not None or p is None:
        return f"not sent: {why}"
    try:
        p.send_signal(SIGNALS[name])  # psutil refuses if the pid now names another process
    except psutil.NoSuchProcess:
        return f"not sent: {NoSignal(NoSignalKind.EXITED, job.pid)}"
    except psutil.AccessDenied:
        return f"not sent: {os.strerror(errno.EPERM)}"
    return f"{name} sent to pid {job.pid}"
