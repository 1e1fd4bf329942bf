"""Time-bucketed ring buffers: the storage under :mod:`gpulens.store.store`; their writes and window reads.

A :class:`Ring` holds several metrics (columns) of one entity (a host, the
GPUs of a host, a job on a host) in two tiers, both indexed by *time bucket*
rather than by arrival (one GPU's columns of its host's ring are read through
:class:`~gpulens.store.ring_columns.Columns`):

- **fine**: one float32 per column per ``resolution_s`` bucket (default 1 s)
  for the last ``fine_slots`` buckets (default 300 = 5 min): sparklines,
  heatmap and plots of short windows;
- **coarse**: a float32 sum, min and max and a uint8 count per column per
  bucket of ``COARSE_FACTOR`` fine buckets (10 s), for ``coarse_slots``
  buckets (default 360 = 1 h): window statistics (one ``sum()``, ``min()``
  or ``max()`` over a slice) and plots of long windows. Keeping each
  bucket's extremes is what makes the max (and min) over any window equal
  the raw samples': a mean of buckets would hide the spikes max is for.

Indexing by bucket makes an out-of-order (backfilled) insert O(1) and lets a
16-bit mask per coarse bucket tell whether a fine bucket was already filled,
which is how duplicates are dropped. Slots a ring moves past are cleared, so
any slot inside the valid range holds either its own bucket or nothing.
Missing values are NaN in the fine tier and absent (count 0, min +inf, max
-inf) in the coarse.

Why the layout: each tier is one flat array, bucket-major (the ``n`` values
of a bucket are adjacent), so storing a sample is a few slice operations done
in C over three short runs of memory; one column's history is a strided
slice (``arr[m::n]``), also done in C (:mod:`gpulens.store.buckets`). A coarse count is the bucket's
samples (``cfull``) less the column's missing values (``cmiss``), so a
sample bumps one counter plus one per missing value, not ``n``.

The extremes of the newest coarse bucket are not updated per sample (two
``max``/``min`` calls per column were most of a sample's cost): its samples
stay in the fine tier, and their extremes are folded into ``cmax``/``cmin`` in
one pass when the bucket closes (and read with them until then). A sample for
an older bucket (backfill) or a duplicate updates them at once, as before.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from itertools import compress, repeat
from operator import add, ne, sub, truediv

from gpulens.store.buckets import column, column_sum, fill

NAN = float("nan")
COARSE_FACTOR = 10
"""Fine buckets per coarse bucket (at most 16: the duplicate mask is 16 bits)."""
_FRESH = -(2**62)


class Ring:
    """Two-tier, bucket-indexed ring buffer of ``n_metrics`` float series."""

    __slots__ = (
        "_cols",
        "_lazy",
        "_means",
        "_mkey",
        "_nan_row",
        "_past",
        "_pcache",
        "_pending",
        "_stamp",
        "_wcache",
        "cbuf",
        "cfull",
        "cmax",
        "cmin",
        "cmiss",
        "cnewest",
        "coarse_slots",
        "fbuf",
        "fine_slots",
        "fnewest",
        "mask",
        "n",
    )

    def __init__(self, n_metrics: int, fine_slots: int, coarse_slots: int) -> None:
        self.n = n_metrics
        self.fine_slots = fine_slots
        self.coarse_slots = coarse_slots
        self.fbuf = array("f", [NAN]) * (fine_slots * n_metrics)
        self.cbuf = array("f", [0.0]) * (coarse_slots * n_metrics)
        self.cmiss = array("B", [0]) * (coarse_slots * n_metrics)
        self.cmax = array("f", [-math.inf]) * (coarse_slots * n_metrics)
        self.cmin = array("f", [math.inf]) * (coarse_slots * n_metrics)
        self.cfull = array("B", [0]) * coarse_slots
        self.mask = array("H", [0]) * coarse_slots
        self.fnewest = _FRESH
        self.cnewest = _FRESH
        self._nan_row = array("f", [NAN]) * n_metrics
        self._cols = range(n_metrics)
        # Sums of complete (past) coarse buckets per (metric, lo, hi, _past): a
        # window mean then costs one lookup plus the current bucket.
        self._wcache: dict[tuple[int, int, int, int], tuple[float, float]] = {}
        self._past = 0
        # The same for every column at once (:meth:`window_means`), and the
        # answers of window_means, valid while ``_mkey`` (with ``_stamp``, bumped
        # per put) holds.
        self._pcache: dict[tuple[int, ...], tuple[array[float], array[float]]] = {}
        self._mkey: tuple[int, int, int] | None = None
        self._means: dict[tuple[int, int, int], list[float]] = {}
        self._stamp = 0
        # Fine-row offsets (arrival order) of the newest coarse bucket whose extremes are not yet
        # in cmax/cmin: folded in one pass when the bucket closes (:meth:`_fold`), read with them
        # until then. Needs the bucket's fine rows to stay in the fine tier.
        self._lazy = fine_slots >= COARSE_FACTOR
        self._pending: list[int] = []

    @staticmethod
    def nbytes(n_metrics: int, fine_slots: int, coarse_slots: int) -> int:
        """Bytes of array storage for one ring (object overheads excluded)."""
        return n_metrics * (fine_slots * 4 + coarse_slots * 13) + coarse_slots * 3

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
        n = self.n
        if len(values) != n:
            values = (list(values) + [NAN] * n)[:n]
        self._stamp += 1
        cb = fb // COARSE_FACTOR
        if cb > self.cnewest:
            self._advance_coarse(cb)
        elif cb <= self.cnewest - self.coarse_slots:
            return
        elif cb < self.cnewest:
            self._past += 1  # a backfilled bucket: cached past sums are stale
        self._put_fine(fb, values, self._put_coarse(cb, fb, values))

    def _put_coarse(self, cb: int, fb: int, values: Sequence[float]) -> bool:
        """Add ``values`` to coarse bucket ``cb``'s sums, counts and extremes, and mark fine bucket ``fb`` seen.

        True when the extremes are left for :meth:`_fold` (the fine row goes on the pending list).
        """
        n = self.n
        ci = cb % self.coarse_slots
        bit = 1 << (fb % COARSE_FACTOR)
        lo = ci * n
        hi = lo + n
        csum = self.cbuf
        total = sum(values)  # finite: no NaN (nor inf) among them, the common case
        missing = [] if total - total == 0.0 else list(compress(self._cols, map(ne, values, values)))
        dup = self.mask[ci] & bit
        lazy = self._lazy and cb == self.cnewest
        if dup and lazy:
            self._fold()  # the fine row is about to be overwritten
        if not lazy or dup:
            # max(old, NaN) is old (NaN > old is False): a missing value leaves the extremes alone.
            self.cmax[lo:hi] = array("f", list(map(max, self.cmax[lo:hi], values)))
            self.cmin[lo:hi] = array("f", list(map(min, self.cmin[lo:hi], values)))
        if dup:
            self._add_checked(ci, values, missing)  # the same bucket twice: counts may saturate
        elif not missing:
            csum[lo:hi] = array("f", list(map(add, csum[lo:hi], values)))
            self.cfull[ci] += 1
        else:
            # Add every column, then put back the sums of the missing ones (NaN + x = NaN).
            old = [csum[lo + i] for i in missing]
            csum[lo:hi] = array("f", list(map(add, csum[lo:hi], values)))
            miss = self.cmiss
            for i, v in zip(missing, old, strict=True):
                csum[lo + i] = v
                miss[lo + i] += 1
            self.cfull[ci] += 1
        self.mask[ci] |= bit
        return lazy and not dup

    def _put_fine(self, fb: int, values: Sequence[float], pending: bool) -> None:
        """Write ``values`` as fine bucket ``fb``'s row (unless too old for the fine tier)."""
        n = self.n
        if fb > self.fnewest:
            # Clear the buckets skipped over (none in the steady state); bucket fb is written below.
            if fb > self.fnewest + 1 and self.fnewest != _FRESH:
                fill(self.fbuf, n, self.fine_slots, max(self.fnewest + 1, fb - self.fine_slots + 1), fb - 1,
                      self._nan_row)
            self.fnewest = fb
        elif fb <= self.fnewest - self.fine_slots:
            return
        fi = (fb % self.fine_slots) * n
        self.fbuf[fi : fi + n] = array("f", values)
        if pending:
            self._pending.append(fi)

    def _fold(self) -> None:
        """Add the extremes of the newest coarse bucket's pending fine rows to ``cmax``/``cmin``.

        Row after row in arrival order, as an eager ``max(old, v)`` per put would (NaN is never
        greater nor smaller, and the stored extreme is never NaN, so missing values drop out); the
        float32 fine values give the float32 extremes of the values put (rounding is monotonic).
        """
        rows = self._pending
        if not rows:
            return
        n = self.n
        lo = (self.cnewest % self.coarse_slots) * n
        hi = lo + n
        fbuf = self.fbuf
        cols = [fbuf[o : o + n] for o in rows]
        self.cmax[lo:hi] = array("f", map(max, self.cmax[lo:hi], *cols))
        self.cmin[lo:hi] = array("f", map(min, self.cmin[lo:hi], *cols))
        self._pending = []

    def _add_checked(self, ci: int, values: Sequence[float], missing: list[int]) -> None:
        if self.cfull[ci] >= 255:
            return
        lo = ci * self.n
        for i in missing:
            self.cmiss[lo + i] += 1
        csum = self.cbuf
        for i, v in enumerate(values, lo):
            if v == v:
                csum[i] += v
        self.cfull[ci] += 1

    def _advance_coarse(self, cb: int) -> None:
        self._fold()
        if self.cnewest != _FRESH:  # a fresh ring is already clear
            start = max(self.cnewest + 1, cb - self.coarse_slots + 1)
            n, slots = self.n, self.coarse_slots
            fill(self.mask, 1, slots, start, cb, array("H", [0]))
            fill(self.cfull, 1, slots, start, cb, array("B", [0]))
            fill(self.cbuf, n, slots, start, cb, array("f", [0.0]) * n)
            fill(self.cmiss, n, slots, start, cb, array("B", [0]) * n)
            fill(self.cmax, n, slots, start, cb, array("f", [-math.inf]) * n)
            fill(self.cmin, n, slots, start, cb, array("f", [math.inf]) * n)
        self.cnewest = cb

    def widened(self, n_metrics: int) -> Ring:
        """A copy of this ring with ``n_metrics`` (>= n) columns; the new ones are empty."""
        self._fold()
        new = Ring(n_metrics, self.fine_slots, self.coarse_slots)
        n, m2 = self.n, n_metrics
        for m in range(n):
            new.fbuf[m::m2] = self.fbuf[m::n]
            new.cbuf[m::m2] = self.cbuf[m::n]
            new.cmiss[m::m2] = self.cmiss[m::n]
            new.cmax[m::m2] = self.cmax[m::n]
            new.cmin[m::m2] = self.cmin[m::n]
        for m in range(n, m2):
            new.cmiss[m::m2] = self.cfull  # the new columns missed every sample so far
        new.cfull = array("B", self.cfull)
        new.mask = array("H", self.mask)
        new.fnewest, new.cnewest, new._past = self.fnewest, self.cnewest, self._past
        return new

    def _range(self, newest: int, slots: int, now: int, n: int) -> tuple[int, int]:
        return max(now - n + 1, newest - slots + 1), min(now, newest)

    def window_mean(self, m: int, now_cb: int, n: int) -> float:
        """Mean of metric ``m`` over the ``n`` coarse buckets ending at ``now_cb``."""
        lo, hi = self._range(self.cnewest, self.coarse_slots, now_cb, n)
        if lo > hi:
            return NAN
        slot = hi % self.coarse_slots
        i = slot * self.n + m
        if lo == hi:
            cnt = self.cfull[slot] - self.cmiss[i]
            return self.cbuf[i] / cnt if cnt else NAN
        key = (m, lo, hi - 1, self._past)
        past = self._wcache.get(key)
        if past is None:
            if len(self._wcache) > 64:
                self._wcache.clear()
            past = self._wcache[key] = (
                column_sum(self.cbuf, self.n, m, lo, hi - 1),
                column_sum(self.cfull, 1, 0, lo, hi - 1) - column_sum(self.cmiss, self.n, m, lo, hi - 1))
        s, c = past[0] + self.cbuf[i], past[1] + self.cfull[slot] - self.cmiss[i]
        return s / c if c else NAN

    def window_means(self, now_cb: int, n: int, start: int = 0, stop: int | None = None,
                     step: int = 1) -> list[float]:
        """:meth:`window_mean` of columns ``start:stop:step`` at once (the same values, in order)."""
        valid = (now_cb, n, self._stamp)
        if valid != self._mkey:
            self._mkey = valid
            self._means.clear()
        cols = self.n
        stop = cols if stop is None else min(stop, cols)
        key = (start, stop, step)
        hit = self._means.get(key)
        if hit is not None:
            return hit
        cnewest, slots = self.cnewest, self.coarse_slots
        lo, hi = max(now_cb - n + 1, cnewest - slots + 1), min(now_cb, cnewest)  # _range, inlined
        if lo > hi:
            means = [NAN] * len(range(start, stop, step))
        else:
            slot = hi % slots
            a = slot * cols
            sums = self.cbuf[a + start : a + stop : step]
            counts = map(sub, repeat(self.cfull[slot]), self.cmiss[a + start : a + stop : step])
            if lo < hi:
                pkey = (lo, hi - 1, self._past, start, stop, step)
                past = self._pcache.get(pkey)
                if past is None:
                    if len(self._pcache) > 8:
                        self._pcache.clear()
                    past = self._pcache[pkey] = self._past_sums(lo, hi - 1, range(start, stop, step))
                totals, known = list(map(add, past[0], sums)), list(map(add, past[1], counts))
                try:  # every column has data: the common case, without a Python-level loop
                    means = list(map(truediv, totals, known))
                except ZeroDivisionError:
                    means = [s / c if c else NAN for s, c in zip(totals, known, strict=True)]
            else:
                means = [s / c if c else NAN for s, c in zip(sums, counts, strict=True)]
        self._means[key] = means
        return means

    def _past_sums(self, lo: int, hi: int, cols: range) -> tuple[array[float], array[float]]:
        """Per column of ``cols``: sum and count over buckets lo..hi, added as window_mean adds."""
        full = column_sum(self.cfull, 1, 0, lo, hi)
        n, slots = self.n, self.coarse_slots
        i0, i1 = lo % slots, hi % slots
        if i0 <= i1 and hi - lo < slots:  # one run of slots: cut it once, then each column of it
            sums, miss = self.cbuf[i0 * n : (i1 + 1) * n], self.cmiss[i0 * n : (i1 + 1) * n]
            return (array("d", [float(sum(sums[m::n])) for m in cols]),
                    array("d", [full - float(sum(miss[m::n])) for m in cols]))
        return (array("d", [column_sum(self.cbuf, n, m, lo, hi) for m in cols]),
                array("d", [full - column_sum(self.cmiss, n, m, lo, hi) for m in cols]))

    def window_extremes(self, m: int, now_cb: int, n: int) -> tuple[float, float]:
        """(min, max) of metric ``m``'s raw samples in the ``n`` coarse buckets ending at ``now_cb``.

        NaN, NaN when the window holds no value of ``m``.
        """
        lo, hi = self._range(self.cnewest, self.coarse_slots, now_cb, n)
        if lo > hi:
            return NAN, NAN
        tops = column(self.cmax, self.n, m, lo, hi)
        bottoms = column(self.cmin, self.n, m, lo, hi)
        if self._pending and hi == self.cnewest:  # as :meth:`_fold` would add them
            fbuf = self.fbuf
            rows = [fbuf[o + m] for o in self._pending]
            tops[-1] = max(tops[-1], *rows)
            bottoms[-1] = min(bottoms[-1], *rows)
        top = max(tops)
        if top == -math.inf:
            return NAN, NAN
        return min(bottoms), top

    def window_count(self, m: int, now_cb: int, n: int) -> int:
        """How many samples hold a value of metric ``m`` in the ``n`` coarse buckets ending at ``now_cb``."""
        lo, hi = self._range(self.cnewest, self.coarse_slots, now_cb, n)
        if lo > hi:
            return 0
        return int(column_sum(self.cfull, 1, 0, lo, hi) - column_sum(self.cmiss, self.n, m, lo, hi))

    def last(self, m: int, max_age: int = 5) -> tuple[int, float]:
        """(fine bucket, value) of metric ``m``'s newest known value, at most ``max_age`` buckets old.

        (-1, NaN) when the newest ``max_age`` samples have no value of ``m``.
        """
        if self.fnewest == _FRESH:
            return -1, NAN
        for fb in range(self.fnewest, max(self.fnewest - max_age, self.fnewest - self.fine_slots), -1):
            v = self.fbuf[(fb % self.fine_slots) * self.n + m]
            if v == v:
                return fb, v
        return -1, NAN

    def fine_series(self, m: int, now_fb: int, n: int) -> list[float]:
        """The last ``n`` fine values of metric ``m`` up to ``now_fb``, oldest first."""
        lo, hi = self._range(self.fnewest, self.fine_slots, now_fb, n)
        if lo > hi:
            return [NAN] * n
        body = column(self.fbuf, self.n, m, lo, hi)
        return [NAN] * (lo - (now_fb - n + 1)) + body + [NAN] * (now_fb - hi)

    def coarse_series(self, m: int, now_cb: int, n: int) -> list[float]:
        """Means per coarse bucket of metric ``m``, the last ``n`` up to ``now_cb``."""
        lo, hi = self._range(self.cnewest, self.coarse_slots, now_cb, n)
        if lo > hi:
            return [NAN] * n
        sums = column(self.cbuf, self.n, m, lo, hi)
        counts = map(sub, column(self.cfull, 1, 0, lo, hi), column(self.cmiss, self.n, m, lo, hi))
        body = [s / c if c else NAN for s, c in zip(sums, counts, strict=True)]
        return [NAN] * (lo - (now_cb - n + 1)) + body + [NAN] * (now_cb - hi)
