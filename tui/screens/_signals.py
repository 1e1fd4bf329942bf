"""Sending a signal to a process from the process screen: only one's own.

:func:`refusal` says why a signal may not be sent (None: it may), checked
again right before :func:`send`, so a process that exited and whose pid was
reused by someone else's is never hit: the start time must still match.
On this machine gpulens checks and sends itself; another host's process is
checked and signalled there, through the user's own ssh
(:mod:`gpulens.tui.screens._ssh_signal`).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from gpulens.core.model import JobInfo
from gpulens.core.procfs import PROC, current_uid, proc_uid

SIGNALS: dict[str, signal.Signals] = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM,
                                      "SIGKILL": signal.SIGKILL}
_CLK_TCK = os.sysconf("SC_CLK_TCK")


def start_time(pid: int, proc: Path = PROC) -> float | None:
    """``pid``'s start, in unix seconds (as the job collector computes it); None when gone."""
    try:
        stat = (proc / str(pid) / "stat").read_text(errors="replace")
        btime = next(int(line.split()[1]) for line in (proc / "stat").read_text().splitlines()
                     if line.startswith("btime "))
        ticks = int(stat[stat.rindex(")") + 2:].split()[19])
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return btime + ticks / _CLK_TCK


def proc_cmdline(pid: int, proc: Path = PROC) -> str | None:
    """``pid``'s command line as /proc has it now (arguments joined by spaces); None when gone.

    The kernel's ``[comm]`` stands for a process with no command line (a kernel thread, a zombie).
    """
    try:
        raw = (proc / str(pid) / "cmdline").read_bytes()[:8192]
        if not raw:
            return "[" + (proc / str(pid) / "comm").read_text(errors="replace").strip() + "]"
    except OSError:
        return None
    return raw.rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")


NO_REMOTE = "signals to another host's processes go through ssh, which this source does not offer"


def refusal(job: JobInfo | None, *, local: bool, readonly: bool, remote_why: str | None = NO_REMOTE,
            proc: Path = PROC, uid: int | None = None) -> str | None:
    """Why no signal may be sent to ``job``'s process (None when it may).

    ``remote_why``: for another host's process, why ssh cannot be used (None:
    it can; the checks then run on that host).
    """
    if readonly:
        return "read-only (--readonly): no actions"
    if not local and remote_why is not None:
        return remote_why
    if job is None:
        return "the process is no longer reported"
    if not local:
        return None
    owner = proc_uid(job.pid, proc)
    if owner is None:
        return f"pid {job.pid} has exited"
    me = current_uid() if uid is None else uid
    if owner != me:
        return f"pid {job.pid} belongs to uid {owner}, not to you (uid {me}): gpulens signals only your own"
    started = start_time(job.pid, proc)
    if started is None or abs(started - job.start_time) > 2.0:
        return f"pid {job.pid} is now another process (its start time changed)"
    return None


def send(job: JobInfo, name: str, *, proc: Path = PROC) -> str:
    """Send signal ``name`` to ``job``'s process after checking again; what happened, in words."""
    why = refusal(job, local=True, readonly=False, proc=proc)
    if why is not None:
        return f"not sent: {why}"
    try:
        os.kill(job.pid, SIGNALS[name])
    except ProcessLookupError:
        return f"not sent: pid {job.pid} has exited"
    except PermissionError as err:
        return f"not sent: {err.strerror}"
    return f"{name} sent to pid {job.pid}"
