"""Aligned columns: a window cut into columns fixed in absolute time, and the store's sizes.

A plot, sparkline or heatmap row that resamples "the last 300 s" into its
width shifts every column every second, so every line is redrawn each tick.
Here column ``c`` of a window of ``W`` buckets drawn in ``n`` columns holds the
buckets ``u`` with ``u * n // W == c``: its span is fixed in absolute time,
the newest column (the one holding the newest bucket) is still filling, and
the older ones change only when a new column starts (or a late sample lands
in one, which :meth:`gpulens.store.store.Store.series_stamp` reports). So
between two column boundaries only the newest column changes, and a widget
reads only that one (``tail=1``).

With fewer buckets than columns (``W < n``: 60 one-second buckets over 69
cells) each column shows the bucket its span starts in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from gpulens.store.ring import COARSE_FACTOR, NAN, Ring
from gpulens.store.views import GPU_METRICS, HOST_METRICS, JOB_METRICS


class SeriesRing(Protocol):
    """What a grid reads: a :class:`~gpulens.store.ring.Ring` or a GPU's columns of one."""

    def fine_series(self, m: int, now_fb: int, n: int) -> list[float]: ...

    def coarse_series(self, m: int, now_cb: int, n: int) -> list[float]: ...


@dataclass(frozen=True, slots=True)
class Grid:
    """The aligned columns of one window: ``points`` columns over ``width`` buckets ending at ``now``."""

    coarse: bool
    """Buckets are coarse (``COARSE_FACTOR`` fine buckets each): the window is longer than the fine history."""
    width: int
    """W: buckets per window."""
    points: int
    """n: columns."""
    now: int
    """The newest bucket (fine or coarse, as ``coarse`` says)."""

    @staticmethod
    def of(now_fb: int, window_s: float, points: int, resolution_s: float, fine_slots: int) -> Grid:
        """The grid the store reads ``window_s`` in: fine buckets when the fine history holds the window.

        The same few grids are asked for many times a tick (every row of every widget): kept.
        """
        key = (now_fb, window_s, points, resolution_s, fine_slots)
        grid = _GRIDS.get(key)
        if grid is None:
            if len(_GRIDS) > 256:
                _GRIDS.clear()
            grid = _GRIDS[key] = Grid._make(now_fb, window_s, points, resolution_s, fine_slots)
        return grid

    @staticmethod
    def _make(now_fb: int, window_s: float, points: int, resolution_s: float, fine_slots: int) -> Grid:
        n_fine = max(1, math.ceil(window_s / resolution_s))
        if n_fine <= fine_slots:
            return Grid(False, n_fine, max(1, points), now_fb)
        k = max(1, math.ceil(window_s / (resolution_s * COARSE_FACTOR)))
        return Grid(True, k, max(1, points), now_fb // COARSE_FACTOR)

    @property
    def current(self) -> int:
        """The absolute index of the newest column (the one holding the newest bucket)."""
        return self.now * self.points // self.width

    @property
    def unit(self) -> int:
        """Fine buckets per bucket of this grid."""
        return COARSE_FACTOR if self.coarse else 1

    def first(self, c: int) -> int:
        """The first bucket of column ``c`` (the bucket its span starts in when columns outnumber buckets)."""
        if self.width >= self.points:
            return -((-c * self.width) // self.points)
        return c * self.width // self.points

    def read(self, ring: SeriesRing, m: int, tail: int | None = None) -> list[float]:
        """Column values of metric ``m``, oldest first: all ``points``, or the newest ``tail``."""
        n = self.points if tail is None else max(1, min(tail, self.points))
        if n == 1:  # the newest column alone: every tick, every row
            return [self.newest(ring, m)]
        cur = self.current
        lo = cur - n + 1
        u0 = self.first(lo)
        count = self.now - u0 + 1
        raw = ring.coarse_series(m, self.now, count) if self.coarse else ring.fine_series(m, self.now, count)
        if self.width < self.points:
            return [raw[self.first(c) - u0] for c in range(lo, cur + 1)]
        out: list[float] = []
        a = 0
        for c in range(lo, cur + 1):
            b = min(self.first(c + 1), self.now + 1) - u0
            part = [v for v in raw[a:b] if v == v]
            out.append(sum(part) / len(part) if part else NAN)
            a = b
        return out

    def newest(self, ring: SeriesRing, m: int) -> float:
        """``read(ring, m, tail=1)[0]``: the newest (still filling) column alone, without the lists."""
        now = self.now
        u0 = self.first(self.current)
        raw = ring.coarse_series(m, now, now - u0 + 1) if self.coarse else ring.fine_series(m, now, now - u0 + 1)
        if self.width < self.points:
            return raw[0]
        part = [v for v in raw if v == v]
        return sum(part) / len(part) if part else NAN

    def stamp(self, late: int, newest_fb: int, gpus: int) -> tuple[int, ...]:
        """What the closed columns of a host depend on (see ``Store.series_stamp``).

        A sample in time order lands in the newest fine bucket; it changes a
        closed column only while the host's newest bucket is older than the
        newest column's first bucket: hence ``min(newest, start - 1)``. An
        out-of-order sample bumps ``late``; a new GPU widens the host's ring.
        """
        start_fb = self.first(self.current) * self.unit
        return self.current, late, min(newest_fb, start_fb - 1), gpus


_GRIDS: dict[tuple[int, float, int, float, int], Grid] = {}
"""Grids by what :meth:`Grid.of` was asked (the same few, many times a tick)."""


def stale(grid: Grid, old: tuple[object, ...] | None, new: tuple[object, ...]) -> int:
    """How many of the newest columns may differ between stamps ``old`` and ``new`` (``points``: all).

    A job's stamp (its hosts, then each host's stamp): the most any host needs, all when the hosts changed.

    The columns from the old newest one (it was still filling) to the new newest; and, for a host
    that lagged behind (its newest bucket before the old newest column), from the column its next
    bucket falls in. Anything else (a late sample, a new GPU, an older stamp) means every column.
    """
    n = grid.points
    if old is None:
        return n
    if old and isinstance(old[0], tuple):
        if len(old) != len(new) or old[0] != new[0]:
            return n
        return max((stale(grid, o, w) for o, w in zip(old[1:], new[1:], strict=True)
                    if isinstance(o, tuple) and isinstance(w, tuple)), default=1)
    if len(old) != 4 or len(new) != 4 or old[1] != new[1] or old[3] != new[3]:
        return n
    c_old, x_old, c_new = old[0], old[2], new[0]
    if not isinstance(c_old, int) or not isinstance(x_old, int) or not isinstance(c_new, int) or c_new < c_old:
        return n
    first = c_old
    if x_old < grid.first(c_old) * grid.unit - 1:
        first = min(first, (x_old + 1) // grid.unit * n // grid.width)
    return max(1, min(n, c_new - first + 1))


def slots(resolution_s: float, fine_history_s: float, history_s: float) -> tuple[int, int]:
    """(fine, coarse) ring slots for the store's resolution and history."""
    fine = max(2, math.ceil(fine_history_s / resolution_s))
    coarse = max(2, math.ceil(history_s / (resolution_s * COARSE_FACTOR)) + 1)
    return fine, coarse


def memory_estimate_bytes(hosts: int, gpus_per_host: int, jobs_per_host: int = 0,
                          resolution_s: float = 1.0, fine_history_s: float = 300,
                          history_s: float = 3600) -> int:
    """Array bytes the store holds for a fleet of this size (bounded, time-independent).

    Memory is bounded: per series ``300 x 4 B`` (fine, 5 min at 1 s) plus
    ``361 x 13 B`` (coarse, 1 h at 10 s: sum, min, max, missing count), about
    5,900 B. A host has one ring of 13 series followed by 13 per GPU, so 1,000
    hosts x 8 GPUs x 1 h costs ``1000 x (13 + 8 x 13) x 5,900 B`` = 690 MB of
    arrays (:func:`memory_estimate_bytes`; 16 hosts: 11 MB). Five of the 13 per
    GPU (SM occupancy, tensor activity, DRAM bandwidth, memory clock, energy
    rate) are drawn only on the GPU screen, which must have their history when
    it opens. The per-bucket min and max (8 of the
    13 B) are the price of exact window extremes: before them a 1 h max was the
    max of 10 s means (benchmarks/store_memory.py measured 183 MB for 5 series
    per GPU without them). It does not grow
    with run time: rings are allocated full-size up front (a host's ring grows,
    by copy, only when a GPU index is first seen). Hosts (4,096), GPUs per host
    (64) and jobs per host (256; idle ones expire after the history) are capped
    too.
    """
    fine, coarse = slots(resolution_s, fine_history_s, history_s)
    per_host = Ring.nbytes(len(HOST_METRICS) + gpus_per_host * len(GPU_METRICS), fine, coarse)
    per_host += jobs_per_host * Ring.nbytes(len(JOB_METRICS), fine, coarse)
    return hosts * per_host
