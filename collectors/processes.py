"""Every process of this host, as ``top`` lists them: the process table behind ``:ps`` and ``:proc PID``.

The job scanner reads only processes whose tree ID matches the job pattern;
a user also needs the others (a node without systemd, a container, a stray
GPU process). :class:`ProcessLister` reads ``/proc/PID/stat``, ``status``
(the real uid) and ``cmdline`` (bounded) of every process, and gives them
as :class:`~gpulens.core.model.JobInfo` rows (``tree_id`` the nearest
ancestors' names, ``job_key`` None). CPU % is over the time since the last
listing (the average since the process started on first sight), as ``top``
gives it. One listing serves every viewer that asks within
:data:`FRESH_S` (no peer can make the agent list ``/proc`` faster), and a
listing reads at most :data:`MAX_PROCESSES` processes. The environment is
never read: a process table is what ``ps`` shows anyone.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace

from gpulens.collectors.job_details import MAX_CMDLINE
from gpulens.collectors.proctree import (
    CLK_TCK,
    PAGE_SIZE,
    ProcStat,
    UserNames,
    boot_time,
    parse_stat,
)
from gpulens.core.model import JobInfo
from gpulens.core.sanitize import clean_text

FRESH_S = 1.0
"""A listing younger than this is given again instead of reading /proc anew."""
MAX_PROCESSES = 20_000
"""Processes read per listing at most (pid_max is 4 M; a node runs a few thousand)."""
CMDLINE_BYTES = min(MAX_CMDLINE, 4096)
"""Of each command line, this much is read (a table shows its start)."""
TREE_NAMES = 4
"""Ancestors' names in a row's tree ID (``bash/torchrun/python``)."""


def _read(path: str, limit: int) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        return os.read(fd, limit)
    finally:
        os.close(fd)


def _real_uid(status: bytes) -> int | None:
    for line in status.splitlines():
        if line.startswith(b"Uid:"):
            fields = line.split()
            return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None
    return None


class ProcessLister:
    """Lists this host's processes; thread-safe (one listing at a time, shared while fresh)."""

    def __init__(self, proc: str = "/proc", clock: Callable[[], float] = time.monotonic) -> None:
        self._proc = proc
        self._clock = clock
        self._lock = threading.Lock()
        self._last: tuple[float, tuple[JobInfo, ...], int] | None = None
        self._owners: dict[int, int] = {}
        self._cpu: dict[tuple[int, int], tuple[int, float]] = {}
        self._user = UserNames()
        self._boot = boot_time(proc)

    def listing(self, gpu_mem: Mapping[int, Mapping[str, int]] | None = None) -> tuple[tuple[JobInfo, ...], int]:
        """(every process, oldest pid first; how many there were, beyond :data:`MAX_PROCESSES` too)."""
        with self._lock:
            now = self._clock()
            if self._last is not None and now - self._last[0] < FRESH_S:
                rows, total = self._last[1], self._last[2]
            else:
                rows, total = self._read(now)
                self._last = (now, rows, total)
        if not gpu_mem:
            return rows, total
        return tuple(replace(r, gpu_mem_bytes=dict(gpu_mem[r.pid])) if r.pid in gpu_mem else r for r in rows), total

    def owners(self) -> dict[int, int]:
        """pid -> real uid, as the newest listing read them (a pid it did not list is absent)."""
        with self._lock:
            return self._owners

    def _read(self, now: float) -> tuple[tuple[JobInfo, ...], int]:
        try:
            names = [n for n in os.listdir(self._proc) if n.isdigit()]
        except OSError:
            return (), 0
        names.sort(key=int)
        stats: dict[int, tuple[ProcStat, int | None, str]] = {}
        for name in names[:MAX_PROCESSES]:
            base = f"{self._proc}/{name}"
            try:
                stat = parse_stat(_read(f"{base}/stat", 4096))
                uid = _real_uid(_read(f"{base}/status", 8192))
                raw = _read(f"{base}/cmdline", CMDLINE_BYTES)
            except (OSError, ValueError, IndexError):
                continue  # exited while read, or not a process we may read
            cmd = clean_text(raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")) or f"[{stat.comm}]"
            stats[int(name)] = (stat, uid, cmd)
        cpu: dict[tuple[int, int], tuple[int, float]] = {}
        boot_now = time.clock_gettime(time.CLOCK_BOOTTIME)
        rows: list[JobInfo] = []
        for pid, (stat, uid, cmd) in stats.items():
            key = (pid, stat.start_ticks)
            seen = self._cpu.get(key)
            if seen is None:
                age = boot_now - stat.start_ticks / CLK_TCK
                pct = 100.0 * stat.cpu_ticks / CLK_TCK / age if age > 0 else None
            else:
                pct = 100.0 * (stat.cpu_ticks - seen[0]) / CLK_TCK / (now - seen[1]) if now > seen[1] else None
            cpu[key] = (stat.cpu_ticks, now)
            chain: list[int] = []
            names_up: list[str] = [stat.comm]
            up = stat.ppid
            while up > 0 and up in stats and len(chain) < TREE_NAMES:
                chain.append(up)
                names_up.append(stats[up][0].comm)
                up = stats[up][0].ppid
            rows.append(JobInfo(
                pid=pid, tree_id="/".join(reversed(names_up)), cmdline=cmd,
                user=self._user(uid) if uid is not None else "?",
                start_time=self._boot + stat.start_ticks / CLK_TCK,
                cpu_percent=None if pct is None else max(pct, 0.0),
                rss_bytes=stat.rss_pages * PAGE_SIZE, ancestors=tuple(reversed(chain)),
            ))
        self._cpu = cpu  # exited processes are forgotten
        self._owners = {pid: uid for pid, (_, uid, _) in stats.items() if uid is not None}
        return tuple(rows), len(names)


def proc_hides_pids(mountinfo: str = "/proc/self/mountinfo") -> bool:
    """Whether ``/proc`` is mounted with ``hidepid`` (users see only their own processes).

    Unknown (unreadable mountinfo) counts as hidden: the agent then shows less, never more.
    """
    try:
        text = _read(mountinfo, 1 << 20).decode("utf-8", "replace")
    except OSError:
        return True
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if not sep or len(fields) < 5 or fields[4] != "/proc":
            continue
        fstype, *rest = right.split()
        if fstype != "proc":
            continue
        for option in (rest[1] if len(rest) > 1 else "").split(","):
            key, _, value = option.partition("=")
            if key == "hidepid" and value not in ("0", "off"):
                return True
        return False
    return False
