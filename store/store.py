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

import math
from collections.abc import Sequence

from gpulens.core.events import (
    HostStatusEvent,
    PanelData,
    SampleEvent,
    SourceEvent,
    SourceStatusEvent,
)
from gpulens.core.model import HostSample, JobInfo
from gpulens.store.alerts import host_alerts
from gpulens.store.aligned import Grid, memory_estimate_bytes, stale
from gpulens.store.aligned import slots as _slots
from gpulens.store.fleet import fleet_means
from gpulens.store.gpu_events import BENIGN_THROTTLE, GpuEvent
from gpulens.store.host import HostState
from gpulens.store.host_columns import HOST_WIDTH, INDEX, MAX_GPUS_PER_HOST, gpu_columns
from gpulens.store.jobs import MAX_JOBS_PER_HOST, JobViews, add_jobs, evict_jobs
from gpulens.store.panels import combine, combine_columns, panel_series
from gpulens.store.processes import PROC_METRICS, ProcessHistory
from gpulens.store.ring import COARSE_FACTOR, NAN, Columns, Ring, resample
from gpulens.store.views import (
    GPU_METRICS,
    HOST_METRICS,
    JOB_METRICS,
    SUMMED,
    FleetStats,
    HostRow,
    JobView,
    WindowStats,
    fill_energy_rates,
    gpu_block_values,
    host_values_flat,
    unavailable_reason,
)
from gpulens.store.window import merge, stats_of

_HOST_INDEX = {m: i for i, m in enumerate(HOST_METRICS)}
_GPU_INDEX = {m: i for i, m in enumerate(GPU_METRICS)}
MAX_HOSTS = 4096
__all__ = ["BENIGN_THROTTLE", "MAX_JOBS_PER_HOST", "GpuEvent", "Store", "memory_estimate_bytes"]



class Store:
    """Bounded per-host/GPU/job history fed by source events; also a PanelProvider."""

    def __init__(self, resolution_s: float = 1.0, fine_history_s: float = 300,
                 history_s: float = 3600) -> None:
        self.resolution_s = max(0.05, float(resolution_s))
        self.fine_slots, self.coarse_slots = _slots(self.resolution_s, fine_history_s, history_s)
        self.history_s = history_s
        self.now = self.first = 0.0
        """The newest sample's time; the oldest one's (how much data any window can hold)."""
        self.version = 0
        self.dropped = 0
        self.source_status: SourceStatusEvent | None = None
        self._hosts: dict[str, HostState] = {}
        self._cache: dict[tuple[object, ...], tuple[tuple[object, ...], object]] = {}
        self._job_views = JobViews()
        self.processes = ProcessHistory(self.fine_slots, self.coarse_slots)
        """History of the processes a screen tracks (:meth:`track_process`)."""

    # ---- ingestion -------------------------------------------------------
    def apply(self, event: SourceEvent) -> bool:
        """Take one source event; True if anything visible changed."""
        if isinstance(event, SampleEvent):
            return self._add_sample(event.sample)
        if isinstance(event, HostStatusEvent):
            h = self._host(event.host)
            if h is None or (h.up == event.up and h.reason == event.reason):
                return False
            h.up, h.reason = event.up, event.reason
            self._bump(h)
            return True
        if isinstance(event, SourceStatusEvent):
            self.source_status = event
            self.version += 1
            return True
        return False

    def apply_many(self, events: list[SourceEvent]) -> bool:
        """Take a burst of events; True if any changed something."""
        changed = False
        for e in events:
            changed = self.apply(e) or changed
        return changed

    def _host(self, name: str) -> HostState | None:
        h = self._hosts.get(name)
        if h is None:
            if len(self._hosts) >= MAX_HOSTS:
                self.dropped += 1
                return None
            h = self._hosts[name] = HostState(ring=self._ring(len(HOST_METRICS)))
        return h

    def _ring(self, n: int) -> Ring:
        return Ring(n, self.fine_slots, self.coarse_slots)

    def _bump(self, h: HostState) -> None:
        h.version += 1
        self.version += 1

    def _add_sample(self, s: HostSample) -> bool:
        h = self._host(s.host)
        if h is None or not math.isfinite(s.time):
            return False
        fb = math.floor(s.time / self.resolution_s)
        if h.ring.seen(fb):
            return False
        gpus = s.gpus if len(s.gpus) <= MAX_GPUS_PER_HOST else s.gpus[:MAX_GPUS_PER_HOST]
        block = gpu_block_values(gpus)
        order = tuple(map(INDEX, gpus))
        if gpus:
            h.energy = fill_energy_rates(h.energy, s.time, order, gpus, block)
        values = host_values_flat(s, block)
        h.late += fb < h.ring.fnewest
        columns, util = gpu_columns(h, s, gpus, order, block)
        values += columns
        h.ring.put(fb, values)
        groups: dict[str, list[JobInfo]] = {}
        totals: dict[str, tuple[set[str], int]] = {}
        if s.jobs:
            if util is None:
                util = {str(g.index): NAN if (u := g.utilization_percent) is None else float(u) for g in s.gpus}
            groups, totals = add_jobs(h, s, fb, util, self._job_ring, self.history_s)
        elif h.job_seen:
            evict_jobs(h, s.time, self.history_s, force=False)
        if self.processes.watching(s.host):
            self.processes.add(s, fb)
        if h.latest is None or s.time >= h.latest.time:
            h.events.add(s.time, gpus)
            h.latest = s
            h.latest_jobs, h.latest_sorted, h.latest_totals = groups, False, totals
            h.up, h.reason = True, ""
        self.now, self.first = max(self.now, s.time), min(self.first or s.time, s.time)
        self._bump(h)
        return True

    def _job_ring(self) -> Ring:
        return self._ring(len(JOB_METRICS))

    # ---- simple reads ----------------------------------------------------
    def hosts(self) -> list[str]:
        """Every host seen, sorted by name."""
        return sorted(self._hosts)

    def latest(self, host: str) -> HostSample | None:
        """The newest sample of ``host`` (None if it never sent one)."""
        h = self._hosts.get(host)
        return h.latest if h else None

    def host_status(self, host: str) -> tuple[bool, str]:
        """(up, reason) of ``host``."""
        h = self._hosts.get(host)
        return (h.up, h.reason) if h else (False, "unknown host")

    def host_version(self, host: str) -> int:
        """Counter bumped on every change to ``host``."""
        h = self._hosts.get(host)
        return h.version if h else -1

    def gpu_indices(self, host: str) -> list[int]:
        """GPU indices recorded for ``host``."""
        h = self._hosts.get(host)
        return sorted(h.gpus) if h else []

    def _buckets(self, window_s: float) -> tuple[int, int, int]:
        now_fb = math.floor(self.now / self.resolution_s)
        k = max(1, math.ceil(window_s / (self.resolution_s * COARSE_FACTOR)))
        return now_fb, now_fb // COARSE_FACTOR, k

    def _rings(self, host: str, metric: str, gpu: int | None,
               job: str | None, pid: int | None = None) -> tuple[list[Ring | Columns], int]:
        h = self._hosts.get(host)
        if h is None:
            return [], -1
        if metric in PROC_METRICS:
            pr = self.processes.ring(host, pid) if pid is not None else None
            return ([pr] if pr else []), PROC_METRICS.index(metric)
        if job is not None:
            r = h.jobs.get(job)
            idx = JOB_METRICS.index(metric) if metric in JOB_METRICS else -1
            return ([r] if r else []), idx
        if gpu is not None or (metric in GPU_METRICS and metric not in HOST_METRICS):
            idx = GPU_METRICS.index(metric) if metric in GPU_METRICS else -1
            rings: list[Ring | Columns] = (
                [h.gpus[gpu]] if gpu in h.gpus else [] if gpu is not None else list(h.gpus.values()))
            return rings, idx
        return [h.ring], HOST_METRICS.index(metric) if metric in HOST_METRICS else -1

    def window_mean(self, host: str, metric: str, window_s: float,
                    gpu: int | None = None, job: str | None = None) -> float:
        """Mean of ``metric`` over the window ending now (NaN if no data)."""
        rings, idx = self._rings(host, metric, gpu, job)
        if idx < 0 or not rings:
            return NAN
        _, now_cb, k = self._buckets(window_s)
        vals = [v for r in rings if (v := r.window_mean(idx, now_cb, k)) == v]
        if not vals:
            return NAN
        return sum(vals) if metric in SUMMED else sum(vals) / len(vals)

    def window_stats(self, host: str, metric: str, window_s: float,
                     gpu: int | None = None, job: str | None = None,
                     pid: int | None = None) -> WindowStats:
        """Now, mean, min and max of ``metric`` over the window, and how much data they cover.

        Min and max are the raw samples' (each bucket keeps its extremes), so
        they do not depend on the window's resolution; "now" is the newest
        sample's value. A ``proc.*`` metric needs the ``pid`` of a tracked process.
        """
        rings, idx = self._rings(host, metric, gpu, job, pid)
        if idx < 0:
            rings = []
        _, now_cb, k = self._buckets(window_s)
        return stats_of(rings, idx, now_cb, k, window_s, self.resolution_s, metric in SUMMED)

    def has_data(self, host: str, metric: str, window_s: float) -> bool:
        """Whether ``metric`` of ``host`` (any GPU's, for a GPU metric) has a value in the window.

        ``not window_stats(...).empty``, without working out the figures: asked per plot per tick.
        """
        rings, idx = self._rings(host, metric, None, None)
        if idx < 0:
            return False
        _, now_cb, k = self._buckets(window_s)
        return any(r.window_count(idx, now_cb, k) for r in rings)

    def last_value(self, host: str, metric: str, gpu: int | None = None) -> float:
        """``metric`` of one host or GPU in the host's newest sample; NaN when that sample has none.

        Unlike ``window_stats(...).now``, no older value stands in for a missing newest one.
        """
        h = self._hosts.get(host)
        rings, idx = self._rings(host, metric, gpu, None)
        if h is None or idx < 0 or len(rings) != 1:
            return NAN
        fb, value = rings[0].last(idx, max_age=1)
        return value if fb == h.ring.fnewest else NAN

    def job_stats(self, key: str, metric: str, window_s: float) -> WindowStats:
        """:meth:`window_stats` of a job's series, joined over its hosts."""
        job = self.job(key, window_s)
        hosts = job.hosts if job is not None else ()
        return merge([self.window_stats(h, metric, window_s, job=key) for h in hosts], metric in SUMMED)

    def recent_xids(self, host: str, window_s: float) -> dict[int, int]:
        """The last XID of each GPU of ``host`` that reported one in the window (as its alert counts them)."""
        h = self._hosts.get(host)
        return {g: x for g, (t, x) in h.xid_last.items() if self.now - t <= window_s} if h else {}

    def gpu_events(self, host: str, gpu: int) -> tuple[GpuEvent, ...]:
        """Throttling and XID events of one GPU, oldest first (the last 64)."""
        h = self._hosts.get(host)
        return h.events.events(gpu) if h else ()

    def track_process(self, host: str, pid: int) -> None:
        """Record ``pid``'s history from now on (``proc.*`` metrics, ``pid=``)."""
        self.processes.track(host, pid, self.now)
        s = self.latest(host)
        if s is not None:
            self.processes.add(s, math.floor(s.time / self.resolution_s))

    def series(self, host: str, metric: str, window_s: float, points: int,
               gpu: int | None = None, job: str | None = None, pid: int | None = None, *,
               aligned: bool = False, tail: int | None = None) -> list[float]:
        """``points`` values of ``metric`` spanning the window, oldest first (NaN gaps).

        ``aligned``: columns fixed in absolute time (:mod:`gpulens.store.aligned`); ``tail=N``
        (aligned): only the newest ``N`` of them.
        """
        rings, idx = self._rings(host, metric, gpu, job, pid)
        if idx < 0 or not rings:
            return [NAN] * (points if tail is None else max(1, min(tail, points)))
        if aligned or tail is not None:
            grid = self._grid(window_s, points)
            cols = [grid.read(r, idx, tail) for r in rings]
        else:
            now_fb, now_cb, k = self._buckets(window_s)
            n_fine = max(1, math.ceil(window_s / self.resolution_s))
            cols = [resample(r.fine_series(idx, now_fb, n_fine) if n_fine <= self.fine_slots
                             else r.coarse_series(idx, now_cb, k), points) for r in rings]
        return cols[0] if len(cols) == 1 else combine_columns(cols, metric in SUMMED)

    def newest(self, host: str, metric: str, window_s: float, points: int, gpu: int | None = None) -> float:
        """``series(..., aligned=True, tail=1)[-1]`` of a host or GPU metric: what every row reads every tick."""
        h = self._hosts.get(host)
        if h is not None:
            if gpu is None and (i := _HOST_INDEX.get(metric)) is not None:
                return self._grid(window_s, points).newest(h.ring, i)
            if gpu is not None and (i := _GPU_INDEX.get(metric)) is not None and (cols := h.gpus.get(gpu)):
                return self._grid(window_s, points).newest(cols, i)
        return self.series(host, metric, window_s, points, gpu=gpu, aligned=True, tail=1)[-1]

    def _grid(self, window_s: float, points: int) -> Grid:
        return Grid.of(math.floor(self.now / self.resolution_s), window_s, points, self.resolution_s,
                       self.fine_slots)

    def newest_column(self, window_s: float, points: int) -> int:
        """The absolute index of the newest aligned column of ``points`` over ``window_s`` (its parity
        pairs columns into braille cells the same way in every plot, however long it has been open)."""
        return self._grid(window_s, points).current

    def late_writes(self, host: str) -> int:
        """How many of ``host``'s samples arrived older than its newest (backfill can move its first one)."""
        h = self._hosts.get(host)
        return h.late if h else 0

    def series_stamp(self, host: str, window_s: float, points: int) -> tuple[int, ...]:
        """Changes whenever an aligned column of ``host`` other than the newest may have changed.

        While it holds, ``series(..., aligned=True)[:-1]`` is unchanged (any metric, GPU, job or
        pid of the host): a widget reads only ``tail=1``.
        """
        h = self._hosts.get(host)
        grid = self._grid(window_s, points)
        if h is None:
            return (grid.current, -1)
        return grid.stamp(h.late, h.ring.fnewest, len(h.gorder))

    def unavailable(self, host: str, metric: str) -> str | None:
        """The reason ``metric`` is n/a on ``host`` per its newest sample."""
        s = self.latest(host)
        return unavailable_reason(s, metric) if s else None

    # ---- aggregate views (cached per version) ------------------------------
    def _cached(self, key: tuple[object, ...], stamp: tuple[object, ...], make: object) -> object:
        """View ``key`` as computed while ``stamp`` holds: one entry per key, a stale one replaced.

        (Keyed by version, stale views piled up to 4,096, each holding a refresh's JobViews.)
        """
        hit = self._cache.get(key)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        if hit is None and len(self._cache) > 4096:
            self._cache.clear()
        value = make() if callable(make) else make
        self._cache[key] = (stamp, value)
        return value

    def host_row(self, host: str, window_s: float) -> HostRow:
        """The host-table line of ``host`` (cached until the host changes)."""
        stamp = (self.host_version(host), self.now // self.resolution_s)
        return self._cached(("row", host, window_s), stamp,  # type: ignore[return-value]
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
        return self._cached(("fleet", window_s, chosen), (self.version, self.now),  # type: ignore[return-value]
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
        return self._cached(("jobs", window_s), (self.version, self.now),  # type: ignore[return-value]
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

    def stale_columns(self, window_s: float, points: int, old: tuple[object, ...] | None,
                      new: tuple[object, ...]) -> int:
        """How many newest aligned columns to read again when a stamp (:meth:`series_stamp` or
        :meth:`job_series_stamp`) went from ``old`` to ``new``; ``points`` (all) for no ``old``."""
        return stale(self._grid(window_s, points), old, new)

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

    # ---- PanelProvider -----------------------------------------------------
    def panel_series(self, expr: str, host: str | None, job: str | None,
                     window_s: float) -> PanelData:
        """A custom panel naming a gpulens metric (``gpu.power_w``, ``cpu.total_percent``)."""
        return panel_series(self, expr, host, job, window_s)

