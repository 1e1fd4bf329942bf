"""Custom panels (``[[panels]]`` naming a gpulens metric) answered from the store."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from gpulens.core.events import PanelData
from gpulens.store.views import GPU_METRICS, HOST_METRICS, JOB_METRICS, SUMMED

if TYPE_CHECKING:
    from gpulens.store.store import Store


def combine(vals: list[float], summed: bool) -> float:
    """Sum (``summed``) or mean of the known values; NaN when none is known."""
    known = [v for v in vals if v == v]
    if not known:
        return math.nan
    return sum(known) if summed else sum(known) / len(known)


def combine_columns(cols: list[list[float]], summed: bool) -> list[float]:
    """:func:`combine` of each position of equally long series (a host's GPUs, point by point)."""
    out = []
    n = len(cols)
    for vals in zip(*cols, strict=True):
        s = sum(vals)
        if s == s:  # no NaN among them: the common case, without building a list
            out.append(s if summed else s / n)
        else:
            out.append(combine(list(vals), summed))
    return out


def panel_series(store: Store, expr: str, host: str | None, job: str | None,
                 window_s: float) -> PanelData:
    """The points of metric ``expr`` on ``host`` (or of ``job``) over the window, or the error."""
    known = set(HOST_METRICS) | set(GPU_METRICS) | set(JOB_METRICS)
    if expr not in known:
        return PanelData(error=f"unknown metric '{expr}' (known: {', '.join(sorted(known))})")
    points = min(120, max(2, math.ceil(window_s / store.resolution_s)))
    if job is not None:
        view = store.job(job, window_s)
        if view is None:
            return PanelData(error=f"job {job} is not running")
        if expr in JOB_METRICS:
            values = store.job_series(job, expr, window_s, points)
        else:
            cols = [store.series(h, expr, window_s, points) for h in view.hosts]
            values = [combine([c[i] for c in cols], expr in SUMMED) for i in range(points)]
    elif host is not None:
        if expr in JOB_METRICS:
            return PanelData(error=f"'{expr}' needs a job")
        values = store.series(host, expr, window_s, points)
    else:
        return PanelData(error="a panel needs a host or a job")
    step = window_s / points
    start = store.now - window_s + step
    pts = tuple((start + i * step, v) for i, v in enumerate(values) if v == v)
    return PanelData(points=pts)
