"""One process as /proc shows it: its ``stat`` fields, where it sits in the tree, its user.

The primitives the job scanner (:mod:`gpulens.collectors.jobs`) and the process
table (:mod:`gpulens.collectors.processes`) read processes with.
"""

from __future__ import annotations

import os
import pwd
import time
from dataclasses import dataclass
from typing import TypeAlias

from gpulens.core.jobs_pattern import MAX_TREE_DEPTH
from gpulens.core.makers import fast_builder
from gpulens.core.sanitize import clean_text

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True, slots=True)
class ProcStat:
    """The fields of ``/proc/PID/stat`` the scanner uses."""

    comm: str
    state: str
    ppid: int
    cpu_ticks: int
    start_ticks: int
    rss_pages: int


_proc_stat = fast_builder(ProcStat, ("comm", "state", "ppid", "cpu_ticks", "start_ticks", "rss_pages"))
"""``ProcStat(*values)`` without its frozen ``__init__`` (every process read is one; core.makers)."""


def parse_stat(data: bytes) -> ProcStat:
    """Parse ``/proc/PID/stat``; ``comm`` may hold spaces and ``)``.

    Raises:
        ValueError: the text is not a stat line.
    """
    open_at, close_at = data.find(b"("), data.rfind(b")")
    if open_at < 0 or close_at < open_at:
        raise ValueError("no (comm) in stat line")
    # Cleaned where read: a comm is any 15 bytes its owner chose (escape sequences for root's terminal).
    comm = clean_text(data[open_at + 1 : close_at].decode("utf-8", "replace"))
    f = data[close_at + 2 :].split()
    # f[0] is field 3 (state); utime=14, stime=15, starttime=22, rss=24 (1-based).
    return _proc_stat(comm, f[0].decode(), int(f[1]), int(f[11]) + int(f[12]), int(f[19]), int(f[21]))


Tree: TypeAlias = tuple[tuple[str, ...], str | None, tuple[int, ...]]
"""(names, top, ancestors): the nearest names, its own last; the oldest name when cut; the pids above."""


def under(parent: Tree, ppid: int, comm: str) -> Tree:
    """The tree of a process named ``comm`` whose parent ``ppid`` has ``parent``.

    Costs :data:`~gpulens.core.jobs_pattern.MAX_TREE_DEPTH` steps whatever the
    tree's depth: past it the oldest name is kept as ``top`` and those between go.
    A root's tree is ``((comm,), None, ())``.
    """
    up_names, top, up_ancestors = parent
    names, ancestors = (*up_names, comm), (*up_ancestors, ppid)
    if len(names) > MAX_TREE_DEPTH:
        top = names[0] if top is None else top
        names, ancestors = names[-MAX_TREE_DEPTH:], ancestors[-(MAX_TREE_DEPTH - 1) :]
    return names, top, ancestors


def boot_time(proc: str = "/proc") -> float:
    """When the machine booted (``btime`` of ``<proc>/stat``; from the boot clock when unreadable)."""
    try:
        with open(f"{proc}/stat", "rb") as f:
            for line in f:
                if line.startswith(b"btime"):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)


class UserNames:
    """uid -> login name, cleaned (the uid as text when it has none), looked up once per uid."""

    def __init__(self) -> None:
        self._names: dict[int, str] = {}

    def __call__(self, uid: int) -> str:
        name = self._names.get(uid)
        if name is None:
            try:
                name = clean_text(pwd.getpwuid(uid).pw_name)
            except KeyError:
                name = str(uid)
            self._names[uid] = name
        return name
