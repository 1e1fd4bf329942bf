"""Aligned columns per row, the closed ones kept while the store's ``series_stamp`` holds.

A sparkline or heatmap row reads ``Store.series(..., aligned=True)`` once per
closed column: while ``series_stamp`` is unchanged only the newest (still
filling) column is read again (``tail=1``), a few buckets instead of the window.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable
from typing import Generic, TypeVar

from gpulens.store.ring import COARSE_FACTOR
from gpulens.store.store import Store

T = TypeVar("T")

NICE_SPANS_S = (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30, 60, 120, 180, 300, 600, 900, 1200, 1800, 3600)
"""Column spans a reader can count in (``1 col = 5s``), as Grafana's heatmap buckets."""


def span_text(span_s: float) -> str:
    """``5s``, ``1m``, ``1.5m``, ``1h``."""
    if span_s >= 3600 and span_s % 3600 == 0:
        return f"{span_s / 3600:g}h"
    if span_s >= 60:
        return f"{span_s / 60:g}m"
    return f"{span_s:g}s"


def nice_columns(store: Store, window_s: float, room: int) -> tuple[int, float]:
    """(columns, seconds per column): the shortest round span that fits ``window_s`` in ``room`` cells.

    The span is a whole number of the store's buckets (10 s ones past its fine history) and
    divides the window, so every column covers the same time; with none that fits, ``room``
    columns of ``window_s / room`` each.
    """
    room = max(1, room)
    unit = store.resolution_s
    if window_s / store.resolution_s > store.fine_slots:
        unit *= COARSE_FACTOR
    buckets = max(1, math.ceil(window_s / unit))
    for span in NICE_SPANS_S:
        per = span / unit
        if per < 1 or abs(per - round(per)) > 1e-9 or buckets % round(per):
            continue
        points = buckets // round(per)
        if points <= room:
            return points, float(span)
    return room, window_s / room


class ColumnCache(Generic[T]):
    """Per row key: the aligned columns, what ``derive`` made of the closed ones, and the stamp they were read under.

    ``derive`` turns the closed columns (all but the newest) into what the
    widget draws of them (glyphs, runs of levels); it runs once per new column.
    When a new column starts the kept columns shift left and only the stale
    newest ones are read (:meth:`Store.stale_columns`): a whole window is read
    only for a late sample, a new GPU, a new window or width.
    """

    def __init__(self, derive: Callable[[list[float]], T]) -> None:
        self._derive = derive
        self._rows: dict[Hashable, tuple[tuple[object, ...], T, list[float]]] = {}
        self._stamps: dict[str, tuple[int, ...]] = {}
        self._stamped_at: tuple[object, ...] = ()
        self.full_reads = 0
        """Whole-window reads so far (tests count them)."""
        self.shifted_reads = 0
        """Reads of only the stale newest columns when a new column started (tests count them)."""

    def stamp(self, store: Store, host: str, window_s: float, points: int) -> tuple[int, ...]:
        """``store.series_stamp``, once per host while the store is unchanged (a tick reads it per row)."""
        at = (id(store), store.version, window_s, points)
        if at != self._stamped_at:
            self._stamped_at = at
            self._stamps.clear()
        st = self._stamps.get(host)
        if st is None:
            st = self._stamps[host] = store.series_stamp(host, window_s, points)
        return st

    def read(self, store: Store, key: Hashable, host: str, metric: str, window_s: float, points: int,
             gpu: int | None = None) -> tuple[tuple[object, ...], T, float]:
        """(stamp, derived closed columns, newest value); only the newest is read while the stamp holds."""
        host_stamp = self.stamp(store, host, window_s, points)
        hit = self._rows.get(key)
        if hit is not None:
            kept = hit[0]
            if (kept[0] == host_stamp and kept[1] == metric and kept[2] == window_s and kept[3] == points
                    and kept[4] == gpu):  # field by field: no tuple built per row per tick
                return kept, hit[1], store.newest(host, metric, window_s, points, gpu)
        stamp = (host_stamp, metric, window_s, points, gpu)
        values: list[float] | None = None
        if hit is not None and hit[0][1:] == stamp[1:]:
            old = hit[0][0]
            assert isinstance(old, tuple)
            n = store.stale_columns(window_s, points, old, host_stamp)
            shift = host_stamp[0] - old[0]
            if n < points and 0 <= shift < points:
                values = hit[2][shift: points - n + shift]
                values += store.series(host, metric, window_s, points, gpu=gpu, aligned=True, tail=n)
                self.shifted_reads += 1
        if values is None:
            values = store.series(host, metric, window_s, points, gpu=gpu, aligned=True)
            self.full_reads += 1
        derived = self._derive(values[:-1])
        self._rows[key] = (stamp, derived, values)
        return stamp, derived, values[-1]

    def keep(self, keys: Iterable[Hashable]) -> None:
        """Forget rows no longer shown."""
        keep = set(keys)
        for gone in [k for k in self._rows if k not in keep]:
            del self._rows[gone]

    def clear(self) -> None:
        """Forget every row (the metric, window or store changed)."""
        self._rows.clear()
        self._stamps.clear()
        self._stamped_at = ()
