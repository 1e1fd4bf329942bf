"""The store's per-series reads: one host's, GPU's, job's or process's metric over a window.

:class:`StoreReads` answers the questions a widget asks each tick (window statistics, series,
aligned columns and their stamps) straight from the rings; the aggregate views built from them,
cached per version, are :class:`~gpulens.store.store.Store`'s.
"""

from __future__ import annotations

import math

from gpulens.core.model import HostSample
from gpulens.store.aligned import Grid, stale
from gpulens.store.gpu_events import GpuEvent
from gpulens.store.ingest import StoreIngest
from gpulens.store.panels import combine_columns
from gpulens.store.processes import PROC_METRICS
from gpulens.store.resample import resample
from gpulens.store.ring import COARSE_FACTOR, NAN, Ring
from gpulens.store.ring_columns import Columns
from gpulens.store.views import (
    GPU_METRICS,
    HOST_METRICS,
    JOB_METRICS,
    SUMMED,
    WindowStats,
    unavailable_reason,
)
from gpulens.store.window import stats_of

_HOST_INDEX = {m: i for i, m in enumerate(HOST_METRICS)}
_GPU_INDEX = {m: i for i, m in enumerate(GPU_METRICS)}


class StoreReads(StoreIngest):
    """Reads of one series at a time (host, GPU, job or tracked process), uncached: the rings cache."""

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

    def recent_xids(self, host: str, window_s: float) -> dict[int, int]:
        """The last XID of each GPU of ``host`` that reported one in the window (as its alert counts them)."""
        h = self._hosts.get(host)
        return {g: x for g, (t, x) in h.xid_last.items() if self.now - t <= window_s} if h else {}

    def gpu_events(self, host: str, gpu: int) -> tuple[GpuEvent, ...]:
        """Throttling and XID events of one GPU, oldest first (the last 64)."""
        h = self._hosts.get(host)
        return h.events.events(gpu) if h else ()

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

    def stale_columns(self, window_s: float, points: int, old: tuple[object, ...] | None,
                      new: tuple[object, ...]) -> int:
        """How many newest aligned columns to read again when a stamp (:meth:`series_stamp` or
        :meth:`job_series_stamp`) went from ``old`` to ``new``; ``points`` (all) for no ``old``."""
        return stale(self._grid(window_s, points), old, new)
