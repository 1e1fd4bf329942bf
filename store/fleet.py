"""The overview's headline figures, from every host's ring at once."""

from __future__ import annotations

from collections.abc import Iterable

from gpulens.store.ring import NAN, Ring
from gpulens.store.views import BUSY_UTIL_PERCENT, GPU_METRICS, HOST_METRICS

_HOST_WIDTH = len(HOST_METRICS)
_GPU_WIDTH = len(GPU_METRICS)
_INDEX = tuple(HOST_METRICS.index(m) for m in
               ("gpu.utilization_percent", "gpu.sm_activity_percent", "gpu.mem_used_percent"))


def fleet_means(hosts: Iterable[tuple[bool, int, Ring]], now_cb: int, k: int) -> tuple[list[float], int, int, int]:
    """(util, SM, memory means; busy GPUs; GPUs; hosts up) over ``(up, gpus, ring)`` of every host.

    Means come from the per-host GPU means weighted by GPU count (equal to the
    per-GPU mean when every GPU reports); busy GPUs need each GPU.
    """
    sums = [0.0, 0.0, 0.0]
    weights = [0, 0, 0]
    busy = total = up = 0
    for is_up, n, ring in hosts:
        up += is_up
        total += n
        hm = ring.window_means(now_cb, k, 0, _HOST_WIDTH)
        for j, idx in enumerate(_INDEX):
            v = hm[idx]
            if v == v and n:
                sums[j] += v * n
                weights[j] += n
        if n:
            gutil = ring.window_means(now_cb, k, _HOST_WIDTH, None, _GPU_WIDTH)
            busy += sum(v >= BUSY_UTIL_PERCENT for v in gutil)
    return [s / w if w else NAN for s, w in zip(sums, weights, strict=True)], busy, total, up
