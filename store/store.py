"""The store: bounded history of every host, GPU and job, and window statistics.

Sources hand it events (:meth:`Store.apply`); the TUI reads views from it. Samples are kept in
:class:`~gpulens.store.ring.Ring` buffers indexed by time bucket (``resolution_s``, default 1 s), so
live and backfilled samples may arrive in any order; at most one sample per host per bucket is kept
and later ones for a filled bucket (duplicates) are ignored. ``now`` is the newest sample time seen,
so replayed data reads the same as live data.

Every accepted sample bumps the host's ``version`` and the store's ``version``; the UI redraws only
what changed. Views are cached per version; :meth:`Store.jobs` also keeps each job's view while its
hosts' versions and ``now`` hold (:class:`~gpulens.store.jobs.JobViews`).

Memory is bounded and does not grow with run time: see
:func:`gpulens.store.aligned.memory_estimate_bytes`.

Ingest cost is what the 1,000-host target is about, so a sample is stored with one ring write (host
and GPU series) of a few C-level slice operations; window statistics are computed when read, for all
columns of a ring at once, and cached until the ring next changes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from gpulens.core.events import PanelData
from gpulens.store.alerts import host_alerts
from gpulens.store.aligned import memory_estimate_bytes
from gpulens.store.fleet import fleet_means
from gpulens.store.gpu_events import BENIGN_THROTTLE, GpuEvent
from gpulens.store.host import HostState
from gpulens.store.host_columns import HOST_WIDTH
from gpulens.store.ingest import MAX_HOSTS
from gpulens.store.jobs import MAX_JOBS_PER_HOST, JobViews
from gpulens.store.panels import combine, panel_series
from gpulens.store.reads import StoreReads
from gpulens.store.ring import NAN
from gpulens.store.views import HOST_METRICS, SUMMED, FleetStats, HostRow, JobView, WindowStats
from gpulens.store.window import merge

_HOST_INDEX = {m: i for i, m in enumerate(HOST_METRICS)}
__all__ = ["BENIGN_THROTTLE", "MAX_HOSTS", "MAX_JOBS_PER_HOST", "GpuEvent", "Store", "memory_estimate_bytes"]
_V = TypeVar("_V")


class ViewCache:
    """Views as computed while their stamp holds: one entry per key, a stale one replaced.

    (Keyed by version, stale views piled up to 4,096, each holding a refresh's JobViews.)
    """

    def __init__(self) -> None:
        self._entries: dict[tuple[object, ...], tuple[tuple[object, ...], object]] = {}

    def get(self, key: tuple[object, ...], stamp: tuple[object, ...], make: Callable[[], _V]) -> _V:
        """The view ``key`` for ``stamp``, made by ``make()`` when it is missing or stale."""
        hit = self._entries.get(key)
        if hit is not None and hit[0] == stamp:
            return hit[1]  # type: ignore[return-value]  # stored by this key's own make()
        if hit is None and len(self._entries) > 4096:
            self._entries.clear()
        value = make()
        self._entries[key] = (stamp, value)
        return value


class Store(StoreReads):
    """Bounded per-host/GPU/job history fed by source events; also a PanelProvider.

    Ingestion and retention are :class:`~gpulens.store.ingest.StoreIngest`'s, one series' reads
    :class:`~gpulens.store.reads.StoreReads`'; here are the aggregate views (host rows, fleet,
    jobs), cached per version.
    """

    def __init__(self, resolution_s: float = 1.0, fine_history_s: float = 300,
                 history_s: float = 3600) -> None:
        super().__init__(resolution_s, fine_history_s, history_s)
        self._cache = ViewCache()
        self._job_views = JobViews()

    def host_row(self, host: str, window_s: float) -> HostRow:
        """The host-table line of ``host`` (cached until the host changes)."""
        stamp = (self.host_version(host), self.now // self.resolution_s)
        return self._cache.get(("row", host, window_s), stamp,
                               lambda: self._host_row(host, window_s))

    def _host_row(self, host: str, window_s: float) -> HostRow:
        h = self._hosts[host]
        _, now_cb, k = self._buckets(window_s)

        means = h.ring.window_means(now_cb, k, 0, HOST_WIDTH)  # fleet() asks the same

        def w(metric: str) -> float:
            return means[_HOST_INDEX[metric]]

        return HostRow(
            host=host, up=h.up, gpus=len(h.gpus),
            util_percent=w("gpu.utilization_percent"), sm_percent=w("gpu.sm_activity_percent"),
            gpu_mem_percent=w("gpu.mem_used_percent"), power_w=w("gpu.power_w"),
            cpu_percent=w("cpu.total_percent"),
            net_bytes_per_s=w("network.total_bytes_per_s"),  # as the host plot: each sample's rx + tx
            alerts=self._alerts(h, window_s, now_cb, k),
        )

    def _alerts(self, h: HostState, window_s: float, now_cb: int, k: int) -> tuple[str, ...]:
        return host_alerts(h.up, h.latest, h.xid_last, h.gpus, h.ring, self.now, window_s, now_cb, k)

    def fleet(self, window_s: float, hosts: Sequence[str] | None = None) -> FleetStats:
        """Headline statistics of every host over the window (of ``hosts`` only, when a filter names them:
        then ``of_hosts`` counts every host and ``jobs`` those running on the named ones)."""
        chosen = None if hosts is None else tuple(hosts)
        return self._cache.get(("fleet", window_s, chosen), (self.version, self.now),
                               lambda: self._fleet(window_s, chosen))

    def _fleet(self, window_s: float, hosts: tuple[str, ...] | None) -> FleetStats:
        _, now_cb, k = self._buckets(window_s)
        states = list(self._hosts.values()) if hosts is None else [self._hosts[h] for h in hosts if h in self._hosts]
        means, busy, total, up = fleet_means(((h.up, len(h.gpus), h.ring) for h in states), now_cb, k)
        jobs = self.jobs(window_s)
        if hosts is not None:
            named = set(hosts)
            jobs = [j for j in jobs if named.intersection(j.hosts)]
        return FleetStats(
            window_s=window_s, gpu_util_percent=means[0], sm_activity_percent=means[1],
            gpu_mem_used_percent=means[2], busy_gpus=busy, total_gpus=total,
            hosts=len(states), hosts_up=up, jobs=len(jobs), of_hosts=0 if hosts is None else len(self._hosts),
        )

    def jobs(self, window_s: float) -> list[JobView]:
        """Jobs in the hosts' newest samples, joined by job key, sorted by key."""
        return self._cache.get(("jobs", window_s), (self.version, self.now),
                               lambda: self._jobs(window_s))

    def _jobs(self, window_s: float) -> list[JobView]:
        _, now_cb, k = self._buckets(window_s)
        return self._job_views.jobs(self._hosts, self.now, window_s, now_cb, k)

    def job(self, key: str, window_s: float) -> JobView | None:
        """One job by key (None when it is not running)."""
        return next((j for j in self.jobs(window_s) if j.key == key), None)

    def find_job(self, text: str, window_s: float) -> JobView | None:
        """A job by key or by the pid of any of its processes."""
        for j in self.jobs(window_s):
            if j.key == text or (text.isdigit() and int(text) in j.pids):
                return j
        return None

    def job_series(self, key: str, metric: str, window_s: float, points: int, *,
                   aligned: bool = False, tail: int | None = None) -> list[float]:
        """A job's series combined over its hosts (memory and CPU summed, util averaged)."""
        job = self.job(key, window_s)
        n = points if tail is None else max(1, min(tail, points))
        if job is None:
            return [NAN] * n
        cols = [self.series(h, metric, window_s, points, job=key, aligned=aligned, tail=tail) for h in job.hosts]
        return [combine([c[i] for c in cols], metric in SUMMED) for i in range(n)]

    def job_series_stamp(self, key: str, window_s: float, points: int) -> tuple[object, ...]:
        """:meth:`series_stamp` of a job: its hosts and each one's stamp."""
        job = self.job(key, window_s)
        hosts = job.hosts if job is not None else ()
        return (hosts, *(self.series_stamp(h, window_s, points) for h in hosts))

    def job_stats(self, key: str, metric: str, window_s: float) -> WindowStats:
        """:meth:`window_stats` of a job's series, joined over its hosts."""
        job = self.job(key, window_s)
        hosts = job.hosts if job is not None else ()
        return merge([self.window_stats(h, metric, window_s, job=key) for h in hosts], metric in SUMMED)

    # ---- PanelProvider -----------------------------------------------------
    def panel_series(self, expr: str, host: str | None, job: str | None,
                     window_s: float) -> PanelData:
        """A custom panel naming a gpulens metric (``gpu.power_w``, ``cpu.total_percent``)."""
        return panel_series(self, expr, host, job, window_s)
