"""Interval arithmetic on ``(start_us, end_us)`` pairs: merge, covered length, overlap.

Merging follows HTA's ``merge_kernel_intervals`` (an interval that starts
after the running maximum end opens a new group), so lengths computed here
equal HTA's for the same inputs.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

Interval = tuple[float, float]


def merge(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, non-overlapping intervals covering exactly what the inputs cover."""
    out: list[Interval] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def length(merged: Iterable[Interval]) -> float:
    """Total length of already merged intervals."""
    return sum(e - s for s, e in merged)  # not sum(ends) - sum(starts): epoch-microsecond sums lose precision


def overlap(a: list[Interval], b: list[Interval]) -> float:
    """Length of the time covered by both of two merged interval lists (a two-pointer sweep)."""
    total = 0.0
    if not a or not b:
        return total
    ia, ib = iter(a), iter(b)
    a0, a1 = next(ia)
    b0, b1 = next(ib)
    try:
        while True:
            s = a0 if a0 > b0 else b0
            e = a1 if a1 < b1 else b1
            if e > s:
                total += e - s
            if a1 < b1:
                a0, a1 = next(ia)
            else:
                b0, b1 = next(ib)
    except StopIteration:
        return total


def clip(merged: list[Interval], start: float, end: float) -> list[Interval]:
    """The parts of merged intervals that lie within ``[start, end]`` (binary search, then trim the ends)."""
    if not merged or end <= start:
        return []
    lo = bisect.bisect_right(merged, (start, float("inf"))) - 1  # last interval starting at or before start
    lo = max(lo, 0)
    hi = bisect.bisect_left(merged, (end, float("-inf")))  # first interval starting at or after end
    out = merged[lo:hi]
    if out and out[0][1] <= start:
        out = out[1:]
    if out:
        s0, e0 = out[0]
        if s0 < start:
            out[0] = (start, e0)
        s1, e1 = out[-1]
        if e1 > end:
            out[-1] = (s1, end)
    return [iv for iv in out if iv[1] > iv[0]]
