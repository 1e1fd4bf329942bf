"""Job detection: process-tree IDs matched against the job pattern.

A process's tree ID is the ``comm`` of every ancestor and itself, oldest
first, joined with ``/`` (``init/sshd/bash/python3``); past
:data:`~gpulens.core.jobs_pattern.MAX_TREE_DEPTH` names only the oldest and
the nearest are kept (``systemd/…/sh/python3``). Reading every
process every tick would cost tens of milliseconds with a thousand
processes, so :class:`JobScanner` keeps one entry per (pid, start time)
and per tick only

* reads the processes new since the last tick once: those in the range of
  pids handed out since (the last pid in ``/proc/loadavg`` moved), found by
  reading the listing of ``/proc`` from the first of them on, and ``/proc``
  is listed whole every :data:`~gpulens.collectors.newpids.FULL_EVERY` ticks
  to drop dead pids (:class:`~gpulens.collectors.newpids.NewPids`),
* re-reads the known processes that exec'd or renamed themselves since the
  last tick (``sh -c 'python train.py'`` becomes ``python`` with the same pid;
  a batch script may ``exec`` its program after minutes of set-up) and the
  young ones and shells whose parent exited, as the kernel's process connector
  tells root (:mod:`~gpulens.collectors.procevents`); without it (not root, a
  container's namespaces, events dropped on a busy node) it re-reads every
  process younger than :data:`YOUNG_S` seconds and every shell of any age,
  the processes such a change can come to,
* reads ``stat`` of matched jobs for CPU % and RSS.

The ``stat`` files read tick after tick stay open (:class:`~gpulens.collectors.procstat.KeptStats`),
so each such read is one ``pread``.

The pattern is matched again only when a tree ID changed, with RE2 (linear
time). Any user can fork thousands of shells; re-reading them is capped at
:data:`REREAD_PER_UID` a tick per user (real uid), the rest read in turns,
oldest read first, and counted in :attr:`JobScanner.notes`. The command line,
user, job key and workload of a job are read once per process
(:mod:`gpulens.collectors.job_details`). Every text is cleaned where it is
read (:func:`~gpulens.core.sanitize.clean_text`): a comm or an environment
variable is its owner's choice, and an escape sequence in it must not reach
root's terminal. Processes that vanish or deny access mid-scan are skipped.
"""

from __future__ import annotations

import heapq
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpulens.collectors.job_details import Details, JobDetails, read_bounded
from gpulens.collectors.newpids import NewPids
from gpulens.collectors.procevents import ProcEvents, open_events
from gpulens.collectors.procstat import KeptStats, OncePerTick, ProcFile
from gpulens.collectors.proctree import (
    CLK_TCK,
    PAGE_SIZE,
    ProcStat,
    boot_time,
    parse_stat,
    under,
)
from gpulens.collectors.slurm_pidinfo import SlurmPidinfo
from gpulens.collectors.workloads import PodNames
from gpulens.core.jobs_pattern import (
    DEFAULT_JOB_KEY_ENV,
    DEFAULT_JOB_PATTERN,
    compile_job_pattern,
    join_tree_id,
)
from gpulens.core.makers import fast_builder
from gpulens.core.model import JobInfo
from gpulens.core.workload import with_pod_names

_job_info = fast_builder(JobInfo, ("pid", "tree_id", "cmdline", "user", "start_time", "cpu_percent", "rss_bytes",
                                   "gpu_mem_bytes", "job_key", "ancestors", "kineto_polling", "workload"))
"""``JobInfo(*values)`` without its ``__init__`` (a tick makes one per job; core.makers)."""

YOUNG_S = 10.0
"""Processes younger than this are re-read every tick (exec renames them)."""
_SHELL = re.compile(r"[a-z]*sh$")
"""Shells are re-read every tick whatever their age: a batch script may set up
for minutes and then ``exec python train.py``, keeping its pid."""
MAX_DEPTH = 512
"""Unknown ancestors loaded for one process at most; a deeper one is placed as a root."""
REREAD_PER_UID = 1024
"""Young processes and shells of one user re-read per tick at most (about 10 ms of reads)."""
MAX_OWED = 65536
"""Exec'd processes left for a later tick at most; past it the next tick re-reads as without exec events."""


@dataclass(slots=True)
class _Entry:
    """Cache entry for one (pid, start time); mutable, never leaves this module."""

    stat: ProcStat
    uid: int = -1  # real uid, read once per (pid, start time): the re-read budget's owner
    read_tick: int = 0  # the scan that last read it: over budget, the oldest read go first
    names: tuple[str, ...] = ()  # the nearest MAX_TREE_DEPTH names, its own last
    top: str | None = None  # the oldest ancestor's name when the names were cut
    tree_id: str = ""
    ancestors: tuple[int, ...] = ()  # the nearest MAX_TREE_DEPTH - 1, oldest first
    up_names: tuple[str, ...] | None = None  # the parent's names it was last placed under (None: as a root)
    hit_for: str | None = None  # the tree ID the pattern was last matched against
    hit: bool = False
    matched: bool = False
    details: Details | None = None  # cmdline, user, job key, workload (job_details.py)
    last_cpu: tuple[int, float] | None = None  # cpu ticks, monotonic time
    raw: bytes = b""  # the stat line last read again (an idle shell's stays the same); only while re-read


class JobScanner:
    """Finds jobs; construct once and call :meth:`scan` every tick."""

    def __init__(
        self,
        pattern: str = DEFAULT_JOB_PATTERN,
        job_key_env: Sequence[str] = DEFAULT_JOB_KEY_ENV,
        proc: str = "/proc",
        *,
        attribute: bool = True,
        pods: PodNames | None = None,
        slurm: SlurmPidinfo | None = None,
        exec_events: bool = True,
        loadavg: OncePerTick | None = None,
    ) -> None:
        """Raises re.error for a bad pattern (callers turn it into ConfigError).

        ``attribute``: read each job's container, pod and Slurm job (once per process);
        ``pods``: names pods by UID (``/var/log/pods``);
        ``slurm``: asks slurmd the job of a job process that neither its cgroup nor its environment names;
        ``exec_events``: learn exec from the kernel (root, ``proc`` the real /proc) instead of re-reading
        shells and young processes every tick;
        ``loadavg``: ``<proc>/loadavg`` as the sampler reads it once a tick (None: read here).
        """
        # Shells and jobs are read every tick: their stat files stay open.
        self._stats = KeptStats(proc, lambda path, size: read_bounded(path, size))  # looked up per call
        self._loadavg: ProcFile | None = None
        """``<proc>/loadavg`` when read here (not shared by a sampler)."""
        if loadavg is None:
            self._loadavg = ProcFile(f"{proc}/loadavg", 256)
            self._pids = NewPids(proc, self._loadavg.read)
        else:
            self._pids = NewPids(proc, loadavg.read)
        self._pattern = compile_job_pattern(pattern)
        self._pods = pods
        self._slurm = slurm if attribute else None
        self._job_details = JobDetails(proc, job_key_env, attribute=attribute, slurm=self._slurm)
        self._proc = proc
        self._boot = boot_time()
        # Keyed by the /proc entry name: set arithmetic on the listing stays in C.
        self._cache: dict[str, _Entry] = {}
        self._young: dict[str, int] = {}  # name -> start ticks, re-read every tick
        self._matched: set[str] = set()
        self._shells: set[str] = set()  # re-read every tick: scripts end in `exec python`
        self._again: set[str] = set()  # pids whose process was replaced or became a zombie: read next tick
        self._owed: set[str] = set()  # named by exec events, over the budget last tick: read next tick
        self._events: ProcEvents | None = None
        self.events_why = "off" if not exec_events else "not the real /proc" if proc != "/proc" else ""
        """Why exec is not learnt from the kernel ("": it is; shells and young processes are re-read instead)."""
        if not self.events_why:
            self._events, self.events_why = open_events()
        self._young_ticks = 0.0
        self._tick = 0
        self.unnamed_pods = False
        """Whether the last scan's jobs include a pod known by UID only (no name found)."""
        self.deferred: dict[int, int] = {}
        """uid -> processes not re-read in the last scan (over :data:`REREAD_PER_UID`)."""
        self.scan()  # prime: CPU % of jobs alive now is a real rate on the next scan

    def close(self) -> None:
        """Close the kept /proc files (a later scan opens them again)."""
        self._stats.close()
        if self._loadavg is not None:  # a shared one is the sampler's to close
            self._loadavg.close()
        self._pids.close()
        if self._events is not None:
            self._events.close()

    def _drop(self, name: str) -> None:
        self._stats.forget(name)
        self._cache.pop(name, None)
        self._young.pop(name, None)
        self._matched.discard(name)
        self._shells.discard(name)

    @property
    def notes(self) -> dict[str, str]:
        """Reasons the last scan's jobs may be late or slow to find, for ``HostSample.unavailable``."""
        out: dict[str, str] = {}
        if self._pattern.why_not_re2 is not None:
            out["jobs.pattern"] = (f"job pattern matched with Python's re, not in linear time: "
                                   f"{self._pattern.why_not_re2}")
        if self.unnamed_pods and self._pods is not None and self._pods.why is not None:
            out["jobs.pod_names"] = self._pods.why
        if self._slurm is not None and self._slurm.why is not None:
            out["jobs.slurm"] = f"Slurm job of processes not in a Slurm cgroup unknown: {self._slurm.why}"
        if self.deferred:
            users = ", ".join(f"uid {uid}: {n}" for uid, n in sorted(self.deferred.items()))
            out["jobs.budget"] = (f"processes left for a later scan ({users}): more than "
                                  f"{REREAD_PER_UID} young processes or shells of one user a tick")
        return out

    def _uid(self, name: str) -> int:
        """The real uid from ``status`` (``/proc/PID`` is root's when a process is not dumpable)."""
        try:
            data = read_bounded(f"{self._proc}/{name}/status")
            at = data.index(b"\nUid:")
            return int(data[at + 5 :].split(None, 1)[0])
        except (OSError, ValueError, IndexError):
            return -1

    def _load(self, name: str, old: _Entry | None = None) -> _Entry | None:
        """Read ``stat``; what is known of the same (pid, start time) in ``old`` is kept."""
        try:
            raw = self._stats.read(name, keep=old is not None)  # read again: kept open for the next tick
            if old is not None and raw == old.raw:  # the same bytes: the same process, nothing changed
                old.read_tick = self._tick
                return old
            stat = parse_stat(raw)
        except (OSError, ValueError, IndexError):
            return None  # vanished, or not a process we may read
        entry = _Entry(stat, read_tick=self._tick, raw=raw if old is not None else b"")
        if old is not None and old.stat.start_ticks == stat.start_ticks:
            entry.uid, entry.last_cpu = old.uid, old.last_cpu
            entry.hit_for, entry.hit = old.hit_for, old.hit
            # Until placed again, a child placed first (same start tick) sees last tick's tree.
            entry.names, entry.top, entry.ancestors, entry.tree_id = old.names, old.top, old.ancestors, old.tree_id
            if old.stat.comm == stat.comm:
                entry.details = old.details
        else:
            entry.uid = self._uid(name)
        self._cache[name] = entry
        if stat.start_ticks >= self._young_ticks:
            self._young[name] = stat.start_ticks
        if _SHELL.match(stat.comm):
            self._shells.add(name)
        else:
            self._shells.discard(name)
        return entry

    def _placed(self, entry: _Entry) -> bool:
        """Whether placing ``entry`` (its stat line unchanged) again would give the tree it has:
        it is a root, or its parent is cached with the names it was placed under."""
        ppid = entry.stat.ppid
        if ppid <= 0:
            return True
        parent = self._cache.get(str(ppid))
        return parent is not None and parent.names is entry.up_names

    def _place(self, name: str, entry: _Entry, depth: int = 0) -> None:
        """Compute the tree ID from the parent's (loading the parent if unknown)."""
        ppid = entry.stat.ppid
        parent_name = str(ppid)
        parent = self._cache.get(parent_name) if ppid > 0 else None
        if parent is None and ppid > 0 and depth < MAX_DEPTH:
            parent = self._load(parent_name)
            if parent is not None:
                self._place(parent_name, parent, depth + 1)
        comm = entry.stat.comm
        if parent is None or depth >= MAX_DEPTH:
            entry.names, entry.top, entry.ancestors = (comm,), None, ()
            entry.up_names = None
        else:
            entry.names, entry.top, entry.ancestors = under((parent.names, parent.top, parent.ancestors), ppid, comm)
            entry.up_names = parent.names
        entry.tree_id = join_tree_id(entry.names, entry.top)
        if entry.hit_for != entry.tree_id:  # a steady tree is not matched again every tick
            entry.hit_for, entry.hit = entry.tree_id, self._pattern.search(entry.tree_id)
        entry.matched = entry.stat.state != "Z" and entry.hit
        if entry.matched:
            self._matched.add(name)
        else:
            self._matched.discard(name)

    def scan(self, gpu_mem: Mapping[int, Mapping[str, int]] | None = None) -> tuple[JobInfo, ...]:
        """Jobs now, with CPU % since the previous scan; gpu_mem maps pid -> GPU -> bytes."""
        cache = self._cache
        try:
            found = self._pids.tick(cache.keys())
        except OSError:
            return ()
        if found.listed is not None:
            for name in cache.keys() - found.listed:
                self._drop(name)
        new = set(found.new)
        if self._again:
            new |= self._again
            self._again = set()
        self._tick += 1
        self._young_ticks = (time.clock_gettime(time.CLOCK_BOOTTIME) - YOUNG_S) * CLK_TCK
        for name, start in list(self._young.items()):
            if start < self._young_ticks:
                del self._young[name]
                entry = cache.get(name)
                if entry is not None and name not in self._shells:
                    entry.raw = b""  # no longer read every tick: its last stat line is not needed
        dirty: list[tuple[int, str, bool]] = []
        for name in new | self._rereads(new):
            old = cache.get(name)
            entry = self._load(name, old)
            if entry is None:
                self._drop(name)
                continue
            dirty.append((entry.stat.start_ticks, name, entry is old))  # the same object: the same stat line
        # Parents start before their children: placing in start order reuses fresh parents.
        renamed = False
        for _start, name, same in sorted(dirty):
            entry = cache.get(name)
            if entry is not None and not (same and self._placed(entry)):  # an idle shell stays where it was
                names = entry.names
                self._place(name, entry)
                renamed |= entry.names != names
        if renamed and self._events is not None:  # not re-read every tick: the children of one that exec'd
            self._replace_children({name for _s, name, _same in dirty})
        jobs = self._jobs({name for _s, name, _same in dirty}, gpu_mem or {})
        self._stats.sweep()  # a process no longer read every tick gives its kept file back
        return jobs

    def _watched(self) -> set[str]:
        """The processes re-read every tick without exec events: young ones and shells."""
        return {n for n in self._young.keys() | self._shells if n in self._cache}

    def _rereads(self, new: set[str]) -> set[str]:
        """The known processes to read again this tick: every shell and young one, or with exec events
        those the kernel named (exec'd, renamed) and the watched children of those that exited."""
        drained = self._events.drain() if self._events is not None else None
        if drained is None or not drained.complete or len(self._owed) > MAX_OWED:
            self._owed = set()  # events missed (or too many owed): every one that could have exec'd
            return self._within_budget(self._watched() - new)
        cache = self._cache
        names = self._owed | ({str(pid) for pid in drained.changed} & cache.keys())
        if drained.exited:
            names |= {n for n in self._watched() if cache[n].stat.ppid in drained.exited}
        names -= new
        read = self._within_budget(names)
        self._owed = names - read
        return read

    def _replace_children(self, placed: set[str]) -> None:
        """Place again, parents first, the watched processes whose parent's names changed."""
        cache = self._cache
        for name in sorted(self._watched() - placed, key=lambda n: cache[n].stat.start_ticks):
            entry = cache[name]
            if not self._placed(entry):
                self._place(name, entry)

    def _within_budget(self, names: set[str]) -> set[str]:
        """``names`` less, per uid, those past :data:`REREAD_PER_UID` (the most recently read)."""
        self.deferred = {}
        if len(names) <= REREAD_PER_UID:
            return names
        by_uid: dict[int, list[str]] = {}
        for name in names:
            by_uid.setdefault(self._cache[name].uid, []).append(name)
        for uid, group in by_uid.items():
            if len(group) > REREAD_PER_UID:
                cache = self._cache
                read = heapq.nsmallest(REREAD_PER_UID, group, key=lambda n: cache[n].read_tick)
                names -= set(group) - set(read)
                self.deferred[uid] = len(group) - REREAD_PER_UID
        return names

    def _jobs(self, fresh: set[str], gpu_mem: Mapping[int, Mapping[str, int]]) -> tuple[JobInfo, ...]:
        now = time.monotonic()
        boot_now = time.clock_gettime(time.CLOCK_BOOTTIME)
        jobs: list[JobInfo] = []
        self.unnamed_pods = False
        for name in list(self._matched):
            entry = self._cache[name]
            pid = int(name)
            stat = entry.stat
            if name not in fresh:
                try:
                    stat = parse_stat(self._stats.read(name, keep=True))
                except (OSError, ValueError, IndexError):
                    self._drop(name)
                    continue
                if stat.start_ticks != entry.stat.start_ticks or stat.state == "Z":
                    self._drop(name)  # pid reused or exiting: read as new next tick
                    self._again.add(name)
                    continue
                entry.stat = stat
            if entry.details is None:
                entry.details = self._job_details.read(pid)
                if entry.details is None:
                    self._drop(name)
                    continue
            if entry.last_cpu is None:
                # First sight: the average since the process started is a real rate.
                age = boot_now - stat.start_ticks / CLK_TCK
                cpu = 100.0 * stat.cpu_ticks / CLK_TCK / age if age > 0 else None
            else:
                ticks, then = entry.last_cpu
                cpu = 100.0 * (stat.cpu_ticks - ticks) / CLK_TCK / (now - then) if now > then else None
            entry.last_cpu = (stat.cpu_ticks, now)
            cmdline, user, key, workload = entry.details
            if workload is not None and workload.pod_uid is not None and self._pods is not None:
                workload = with_pod_names(workload, self._pods.names())
                self.unnamed_pods |= workload.pod is None
            if self._slurm is not None and (workload is None or workload.slurm_job is None):
                workload, key = self._job_details.slurm_job(pid, stat.start_ticks, workload, key)
            jobs.append(_job_info(
                pid, entry.tree_id, cmdline, user, self._boot + stat.start_ticks / CLK_TCK,
                None if cpu is None else max(cpu, 0.0), stat.rss_pages * PAGE_SIZE,
                dict(gpu_mem.get(pid, {})), key, entry.ancestors, False, workload))
        jobs.sort(key=lambda j: j.pid)
        return tuple(jobs)
