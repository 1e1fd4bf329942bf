"""Is a traced process still the one we asked? Read from ``/proc/PID/stat``.

A pid can be reused, so a process is remembered by its start time (field 22
of ``/proc/PID/stat``, clock ticks since boot) when a request is accepted; a
missing entry, a zombie, or another start time means the process exited.
"""

from __future__ import annotations

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
