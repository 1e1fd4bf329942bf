"""Is a traced process still the one we asked? Read from ``/proc/PID/stat``.

A pid can be reused, so a process is remembered by its start time (field 22
of ``/proc/PID/stat``, clock ticks since boot) when a request is accepted; a
missing entry, a zombie, or another start time means the process exited.

How it ended is known to its parent (``waitpid``), which gpulens is not. What
gpulens can see: a zombie's ``exit_code`` (field 52, the status ``waitpid``
will report; shown to its owner and root) until its parent reaps it, and, for
root, the kernel's exit event (:mod:`gpulens.ipc.kineto.exits`).
:func:`how_it_ended` words either; an exit nobody saw is said as unknown.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path

from gpulens.core.procfs import PROC


@dataclass(frozen=True, slots=True)
class ProcIdentity:
    """A process as first seen: its pid and start time (clock ticks since boot)."""

    pid: int
    start_ticks: int


def _stat_fields(pid: int, proc: Path) -> list[str] | None:
    try:
        raw = (proc / str(pid) / "stat").read_bytes()
    except OSError:
        return None
    # comm (field 2) is in parentheses and may hold spaces or ')': split after the last ')'.
    close = raw.rfind(b")")
    if close < 0:
        return None
    return raw[close + 2 :].decode(errors="replace").split()


def identity(pid: int, proc: Path = PROC) -> ProcIdentity | None:
    """The process's identity now, or None when it does not exist."""
    fields = _stat_fields(pid, proc)
    if fields is None or len(fields) < 20 or not fields[19].isdigit():
        return None
    return ProcIdentity(pid, int(fields[19]))


def parent_pid(pid: int, proc: Path = PROC) -> int | None:
    """The process's parent pid (field 4), or None when it does not exist."""
    fields = _stat_fields(pid, proc)
    if fields is None or len(fields) < 2 or not fields[1].isdigit():
        return None
    return int(fields[1])


def exited(pid: int, ident: ProcIdentity | None, proc: Path = PROC) -> bool:
    """True when ``pid`` is gone, a zombie, or no longer the process ``ident`` (pid reused)."""
    fields = _stat_fields(pid, proc)
    if fields is None or not fields:
        return True
    if fields[0] in ("Z", "X", "x"):
        return True
    return ident is not None and (len(fields) < 20 or fields[19] != str(ident.start_ticks))


CRASH_SIGNALS = frozenset({signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT, signal.SIGILL, signal.SIGFPE, signal.SIGTRAP,
                           signal.SIGSYS})
"""Signals a process raises against itself on a fault: "crashed", not "was killed"."""


def zombie_status(pid: int, ident: ProcIdentity | None, proc: Path = PROC) -> int | None:
    """The ``waitpid`` status of ``pid`` while it is a zombie its parent has not reaped yet, else None.

    Field 52 of ``/proc/PID/stat`` (Linux 3.5+). The kernel shows it only to
    readers allowed to ptrace-read the process (its owner, root: whoever may
    trace it); others read 0.
    """
    fields = _stat_fields(pid, proc)
    if fields is None or len(fields) < 50 or fields[0] != "Z" or not fields[49].isdigit():
        return None
    if ident is not None and fields[19] != str(ident.start_ticks):
        return None  # another process under the same pid
    return int(fields[49])


def how_it_ended(status: int | None) -> str:
    """``crashed (SIGSEGV, core dumped)``, ``was killed (SIGKILL)``, ``exited (status 0)``, or ``exited``.

    ``status``: a ``waitpid`` status word (None: nobody saw it).
    """
    if status is None:
        return "exited"
    sig = status & 0x7F
    if not sig:
        return f"exited (status {(status >> 8) & 0xFF})"
    try:
        name = signal.Signals(sig).name
    except ValueError:
        name = f"signal {sig}"
    core = ", core dumped" if status & 0x80 else ""
    return f"crashed ({name}{core})" if sig in CRASH_SIGNALS else f"was killed ({name}{core})"
