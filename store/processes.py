"""History of the processes a viewer looks at (the process screen): CPU, RSS, GPU memory and util.

The store cannot keep every process's history (a fleet runs thousands), so a
screen asks to *track* one; from then on every sample of its host adds a
point, and the screen says since when. At most :data:`MAX_TRACKED` are
tracked; asking for another forgets the one tracked longest ago.
"""

from __future__ import annotations

from gpulens.core.model import HostSample, JobInfo
from gpulens.store.ring import NAN, Ring

PROC_METRICS: tuple[str, ...] = (
    "proc.cpu_percent",
    "proc.rss_bytes",
    "proc.gpu_mem_bytes",
    "proc.gpu_util_percent",
)
"""Per tracked process: CPU % (of one core), RSS, GPU memory over its GPUs, its SM utilization (NVML)."""
MAX_TRACKED = 32


def process_values(s: HostSample, pid: int) -> list[float] | None:
    """The process's values in :data:`PROC_METRICS` order; None when it is not in the sample."""
    job = next((j for j in s.jobs if j.pid == pid), None)
    utils, mems = _gpu_figures(s, pid)
    if job is None and not mems:
        return None
    cpu, rss = (NAN, NAN) if job is None else (_value(job.cpu_percent), _value(job.rss_bytes))
    return [cpu, rss, _gpu_mem(job, mems, bool(s.gpus)), sum(utils) / len(utils) if utils else NAN]


def _gpu_figures(s: HostSample, pid: int) -> tuple[list[float], list[int]]:
    """The process's SM utilizations and memory used on the GPUs NVML lists it on (those it reports)."""
    utils = [p.sm_util_percent for g in s.gpus for p in g.processes
             if p.pid == pid and p.sm_util_percent is not None]
    mems = [p.used_memory_bytes for g in s.gpus for p in g.processes
            if p.pid == pid and p.used_memory_bytes is not None]
    return utils, mems


def _value(x: float | None) -> float:
    return NAN if x is None else float(x)


def _gpu_mem(job: JobInfo | None, mems: list[int], gpus_read: bool) -> float:
    """GPU memory over the process's GPUs: the job's figures, else NVML's process list's, else 0 B (n/a when
    its host reads no GPU)."""
    if job is not None and job.gpu_mem_bytes:
        return float(sum(job.gpu_mem_bytes.values()))
    if mems:
        return float(sum(mems))
    return 0.0 if gpus_read else NAN


class ProcessHistory:
    """Rings of the tracked processes, by (host, pid)."""

    __slots__ = ("_by_host", "_coarse", "_fine", "_rings", "_since")

    def __init__(self, fine_slots: int, coarse_slots: int) -> None:
        self._fine, self._coarse = fine_slots, coarse_slots
        self._rings: dict[tuple[str, int], Ring] = {}
        self._since: dict[tuple[str, int], float] = {}
        self._by_host: dict[str, set[int]] = {}

    def track(self, host: str, pid: int, now: float) -> None:
        """Start recording ``pid`` on ``host`` (no-op when already tracked)."""
        key = (host, pid)
        if key in self._rings:
            return
        if len(self._rings) >= MAX_TRACKED:
            self.untrack(*min(self._since, key=self._since.__getitem__))
        self._rings[key] = Ring(len(PROC_METRICS), self._fine, self._coarse)
        self._since[key] = now
        self._by_host.setdefault(host, set()).add(pid)

    def untrack(self, host: str, pid: int) -> None:
        """Stop recording ``pid`` on ``host`` and drop its history."""
        key = (host, pid)
        self._rings.pop(key, None)
        self._since.pop(key, None)
        pids = self._by_host.get(host)
        if pids is not None:
            pids.discard(pid)
            if not pids:
                del self._by_host[host]

    def watching(self, host: str) -> bool:
        """True when a process of ``host`` is tracked."""
        return host in self._by_host

    def add(self, s: HostSample, fb: int) -> None:
        """Record the tracked processes of ``s``'s host (fine bucket ``fb``)."""
        for pid in self._by_host.get(s.host, ()):
            ring = self._rings[(s.host, pid)]
            if ring.seen(fb):
                continue
            values = process_values(s, pid)
            if values is not None:
                ring.put(fb, values)

    def add_row(self, host: str, row: JobInfo, fb: int, *, gpus_read: bool) -> bool:
        """Record a tracked process its host's samples do not carry (not a job's), from a polled process
        table row, at fine bucket ``fb`` (``gpus_read``: its host reads its GPUs, so no GPU memory is 0 B,
        not n/a); False when not tracked or the bucket has a point already."""
        ring = self._rings.get((host, row.pid))
        if ring is None or ring.seen(fb):
            return False
        ring.put(fb, [
            NAN if row.cpu_percent is None else float(row.cpu_percent),
            NAN if row.rss_bytes is None else float(row.rss_bytes),
            float(sum(row.gpu_mem_bytes.values())) if row.gpu_mem_bytes else (0.0 if gpus_read else NAN),
            NAN,  # per-process SM utilization comes from NVML's samples only
        ])
        return True

    def ring(self, host: str, pid: int) -> Ring | None:
        """The ring of a tracked process (None when not tracked)."""
        return self._rings.get((host, pid))

    def since(self, host: str, pid: int) -> float | None:
        """When tracking ``pid`` on ``host`` began (None when not tracked)."""
        return self._since.get((host, pid))

    def __len__(self) -> int:
        return len(self._rings)
