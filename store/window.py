"""Window statistics of one metric: exact min/max from the rings' per-bucket extremes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from gpulens.store.ring import NAN
from gpulens.store.views import NO_STATS, WindowStats


class _Series(Protocol):
    """What a ring (or a ring's columns) answers about one metric."""

    def window_mean(self, m: int, now_cb: int, n: int) -> float: ...

    def window_extremes(self, m: int, now_cb: int, n: int) -> tuple[float, float]: ...

    def window_count(self, m: int, now_cb: int, n: int) -> int: ...

    def last(self, m: int, max_age: int = 5) -> tuple[int, float]: ...


def stats_of(rings: Sequence[_Series], idx: int, now_cb: int, k: int, window_s: float,
             resolution_s: float, summed: bool) -> WindowStats:
    """Statistics of column ``idx`` over the ``k`` coarse buckets ending at ``now_cb``.

    One ring: exact (mean, min and max of the raw samples, "now" the newest).
    Several (a host's GPUs, a job's hosts): means and "now" are averaged, or
    added when ``summed``; min/max are those of any one ring (added when
    ``summed``: an upper bound, flagged by ``combined``).
    """
    parts = []
    for r in rings:
        count = r.window_count(idx, now_cb, k)
        if count:
            parts.append((r.window_mean(idx, now_cb, k), *r.window_extremes(idx, now_cb, k), count,
                          r.last(idx)[1]))
    if not parts:
        return WindowStats(window_s, NAN, NAN, NAN, NAN, 0, 0.0)
    if len(parts) == 1:
        mean, lo, hi, count, now = parts[0]
        return WindowStats(window_s, now, mean, lo, hi, count, min(window_s, count * resolution_s))
    means = [p[0] for p in parts]
    nows = [p[4] for p in parts if p[4] == p[4]]
    count = max(p[3] for p in parts)
    if summed:
        mean, lo, hi = sum(means), sum(p[1] for p in parts), sum(p[2] for p in parts)
        now = sum(nows) if nows else NAN
    else:
        mean, lo, hi = sum(means) / len(means), min(p[1] for p in parts), max(p[2] for p in parts)
        now = sum(nows) / len(nows) if nows else NAN
    return WindowStats(window_s, now, mean, lo, hi, count, min(window_s, count * resolution_s), combined=True)


def merge(stats: Sequence[WindowStats], summed: bool) -> WindowStats:
    """Join per-host statistics of one series (a job over its hosts) as :func:`stats_of` joins rings."""
    known = [s for s in stats if not s.empty]
    if not known:
        return NO_STATS if not stats else WindowStats(stats[0].window_s, NAN, NAN, NAN, NAN, 0, 0.0)
    if len(known) == 1:
        return known[0]
    nows = [s.now for s in known if s.now == s.now]
    if summed:
        mean, lo, hi, now = (sum(s.mean for s in known), sum(s.min for s in known),
                             sum(s.max for s in known), sum(nows) if nows else NAN)
    else:
        mean, lo, hi = (sum(s.mean for s in known) / len(known), min(s.min for s in known),
                        max(s.max for s in known))
        now = sum(nows) / len(nows) if nows else NAN
    best = max(known, key=lambda s: s.samples)
    return WindowStats(best.window_s, now, mean, lo, hi, best.samples, best.covered_s, combined=True)
