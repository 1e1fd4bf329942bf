"""A group of adjacent columns of a :class:`~gpulens.store.ring.Ring`, read like a ring of its own.

The store keeps all GPUs of a host in one ring (one store per sample, not one
per GPU; :mod:`gpulens.store.host_columns` lays them out); each GPU's series
are read through a :class:`Columns` at its group's first column.
"""

from __future__ import annotations

from gpulens.store.ring import Ring


class Columns:
    """``width`` adjacent columns of a ring starting at ``base``, read like a ring of their own.

    The store keeps all GPUs of a host in one ring (one store per sample, not
    one per GPU); each GPU's series are read through one of these.
    """

    __slots__ = ("base", "ring")

    def __init__(self, ring: Ring, base: int) -> None:
        self.ring = ring
        self.base = base

    def window_mean(self, m: int, now_cb: int, n: int) -> float:
        """:meth:`Ring.window_mean` of column ``m`` of this group."""
        return self.ring.window_mean(self.base + m, now_cb, n)

    def fine_series(self, m: int, now_fb: int, n: int) -> list[float]:
        """:meth:`Ring.fine_series` of column ``m`` of this group."""
        return self.ring.fine_series(self.base + m, now_fb, n)

    def coarse_series(self, m: int, now_cb: int, n: int) -> list[float]:
        """:meth:`Ring.coarse_series` of column ``m`` of this group."""
        return self.ring.coarse_series(self.base + m, now_cb, n)

    def window_extremes(self, m: int, now_cb: int, n: int) -> tuple[float, float]:
        """:meth:`Ring.window_extremes` of column ``m`` of this group."""
        return self.ring.window_extremes(self.base + m, now_cb, n)

    def window_count(self, m: int, now_cb: int, n: int) -> int:
        """:meth:`Ring.window_count` of column ``m`` of this group."""
        return self.ring.window_count(self.base + m, now_cb, n)

    def last(self, m: int, max_age: int = 5) -> tuple[int, float]:
        """:meth:`Ring.last` of column ``m`` of this group."""
        return self.ring.last(self.base + m, max_age)
