"""Time-bucketed ring buffers: the storage under :mod:`gpulens.collectors.store`.

A :class:`Ring` holds several metrics of one entity (a host, a GPU, a job on
a host) in two tiers, both indexed by *time bucket* rather than by arrival:

- **fine**: one float32 per metric per ``resolution_s`` bucket (default 1 s)
  for the last ``fine_slots`` buckets (default 300 = 5 min): sparklines,
  heatmap and plots of short windows;
- **coarse**: a float32 sum and a uint8 count per metric per bucket of
  ``COARSE_FACTOR`` fine buckets (10 s), for ``coarse_slots`` buckets
  (default 360 = 1 h): window statistics (one ``sum()`` over a slice) and
  plots of long windows.

Indexing by bucket makes an out-of-order (backfilled) insert O(1) and lets a
16-bit mask per coarse bucket tell whether a fine bucket was already filled,
which is how duplicates are dropped. Slots a ring moves past are cleared, so
any slot inside the valid range holds either its own bucket or nothing.
Missing values are NaN in the fine tier and absent (count 0) in the coarse.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence

NAN = float("nan")
COARSE_FACTOR = 10
"""Fine buckets per coarse bucket (at most 16: the duplicate mask is 16 bits)."""


class Ring:
    """Two-tier, bucket-indexed ring buffer of ``n_metrics`` float series."""

    __slots__ = ("_past", "_wcache", "ccnt", "cnewest", "coarse_slots", "csum", "fine", "fine_slots",
                 "fnewest", "mask")

    def __init__(self, n_metrics: int, fine_slots: int, coarse_slots: int) -> None:
        self.fine_slots = fine_slots
        self.coarse_slots = coarse_slots
        self.fine = [array("f", [NAN]) * fine_slots for _ in range(n_metrics)]
        self.csum = [array("f", [0.0]) * coarse_slots for _ in range(n_metrics)]
        self.ccnt = [array("B", [0]) * coarse_slots for _ in range(n_metrics)]
        self.mask = array("H", [0]) * coarse_slots
        self.fnewest = -(2**62)
        self.cnewest = -(2**62)
        # Sums of complete (past) coarse buckets per (metric, lo, hi, _past): a
        # window mean then costs one lookup plus the current bucket.
        self._wcache: dict[tuple[int, int, int, int], tuple[float, float]] = {}
        self._past = 0

    @staticmethod
    def nbytes(n_metrics: int, fine_slots: int, coarse_slots: int) -> int:
        """Bytes of array storage for one ring (object overheads excluded)."""
        return n_metrics * (fine_slots * 4 + coarse_slots * 5) + coarse_slots * 2

    def seen(self, fb: int) -> bool:
        """True if fine bucket ``fb`` already holds a sample (or is too old to keep)."""
        cb = fb // COARSE_FACTOR
        if cb <= self.cnewest - self.coarse_slots:
            return True
        if cb > self.cnewest:
            return False
        return bool(self.mask[cb % self.coarse_slots] & (1 << (fb % COARSE_FACTOR)))

    def put(self, fb: int, values: Sequence[float]) -> None:
        """Store ``values`` (one per metric, NaN = missing) at fine bucket ``fb``."""
        cb = fb // COARSE_FACTOR
        if cb > self.cnewest:
            self._advance_coarse(cb)
        elif cb <= self.cnewest - self.coarse_slots:
            return
        elif cb < self.cnewest:
            self._past += 1  # a backfilled bucket: cached past sums are stale
        ci = cb % self.coarse_slots
        self.mask[ci] |= 1 << (fb % COARSE_FACTOR)
        for col_sum, col_cnt, v in zip(self.csum, self.ccnt, values, strict=False):
            if v == v and col_cnt[ci] < 255:  # v == v: not NaN
                col_sum[ci] += v
                col_cnt[ci] += 1
        if fb > self.fnewest:
            # Clear the buckets skipped over; bucket fb itself is written below.
            for b in range(max(self.fnewest + 1, fb - self.fine_slots + 1), fb):
                i = b % self.fine_slots
                for col in self.fine:
                    col[i] = NAN
            self.fnewest = fb
        elif fb <= self.fnewest - self.fine_slots:
            return
        fi = fb % self.fine_slots
        for col, v in zip(self.fine, values, strict=False):
            col[fi] = v

    def _advance_coarse(self, cb: int) -> None:
        start = max(self.cnewest + 1, cb - self.coarse_slots + 1)
        for b in range(start, cb + 1):
            i = b % self.coarse_slots
            self.mask[i] = 0
            for s in self.csum:
                s[i] = 0.0
            for c in self.ccnt:
                c[i] = 0
        self.cnewest = cb

    def _range(self, newest: int, slots: int, now: int, n: int) -> tuple[int, int]:
        return max(now - n + 1, newest - slots + 1), min(now, newest)

    def window_mean(self, m: int, now_cb: int, n: int) -> float:
        """Mean of metric ``m`` over the ``n`` coarse buckets ending at ``now_cb``."""
        lo, hi = self._range(self.cnewest, self.coarse_slots, now_cb, n)
        if lo > hi:
            return NAN
        if lo == hi:
            i = hi % self.coarse_slots
            cnt = self.ccnt[m][i]
            return self.csum[m][i] / cnt if cnt else NAN
        key = (m, lo, hi - 1, self._past)
        past = self._wcache.get(key)
        if past is None:
            if len(self._wcache) > 64:
                self._wcache.clear()
            past = self._wcache[key] = (_slice_sum(self.csum[m], lo, hi - 1),
                                        _slice_sum(self.ccnt[m], lo, hi - 1))
        i = hi % self.coarse_slots
        s, c = past[0] + self.csum[m][i], past[1] + self.ccnt[m][i]
        return s / c if c else NAN

    def fine_series(self, m: int, now_fb: int, n: int) -> list[float]:
        """The last ``n`` fine values of metric ``m`` up to ``now_fb``, oldest first."""
        lo, hi = self._range(self.fnewest, self.fine_slots, now_fb, n)
        if lo > hi:
            return [NAN] * n
        body = _slice(self.fine[m], lo, hi)
        return [NAN] * (lo - (now_fb - n + 1)) + body + [NAN] * (now_fb - hi)

    def coarse_series(self, m: int, now_cb: int, n: int) -> list[float]:
        """Means per coarse bucket of metric ``m``, the last ``n`` up to ``now_cb``."""
        lo, hi = self._range(self.cnewest, self.coarse_slots, now_cb, n)
        if lo > hi:
            return [NAN] * n
        sums, counts = _slice(self.csum[m], lo, hi), _slice(self.ccnt[m], lo, hi)
        body = [s / c if c else NAN for s, c in zip(sums, counts, strict=True)]
        return [NAN] * (lo - (now_cb - n + 1)) + body + [NAN] * (now_cb - hi)


def _slice(arr: array[float] | array[int], lo: int, hi: int) -> list[float]:
    size = len(arr)
    i0, i1 = lo % size, hi % size
    if i0 <= i1 and hi - lo < size:
        return list(arr[i0 : i1 + 1])
    return list(arr[i0:]) + list(arr[: i1 + 1])


def _slice_sum(arr: array[float] | array[int], lo: int, hi: int) -> float:
    size = len(arr)
    i0, i1 = lo % size, hi % size
    if i0 <= i1 and hi - lo < size:
        return float(sum(arr[i0 : i1 + 1]))
    return float(sum(arr[i0:]) + sum(arr[: i1 + 1]))


def resample(values: Sequence[float], n: int) -> list[float]:
    """Average ``values`` into ``n`` columns, ignoring NaN (NaN where a column is empty)."""
    size = len(values)
    if n <= 0:
        return []
    if size == n:
        return list(values)
    out: list[float] = []
    for c in range(n):
        a, b = c * size // n, max((c + 1) * size // n, c * size // n + 1)
        part = [v for v in values[a:b] if not math.isnan(v)]
        out.append(sum(part) / len(part) if part else NAN)
    return out
