"""The plots of the host and job screens: which metrics, how to format, how to fill."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from gpulens.core.units import pct, rate, size


def ratio(v: float | None) -> str:
    """A 0-1 ratio shown as %."""
    return pct(None if v is None else v * 100)


@dataclass(frozen=True, slots=True)
class PlotSpec:
    """One plot: its title, the metrics summed into it, format and scale."""

    id: str
    title: str
    metrics: tuple[str, ...]
    fmt: Callable[[float | None], str]
    lo: float = 0.0
    hi: float | None = 100.0


HOST_PLOTS: tuple[PlotSpec, ...] = (
    PlotSpec("gpu-util", "GPU Utilization", ("gpu.utilization_percent",), pct),
    PlotSpec("gpu-sm", "GPU SM Activity", ("gpu.sm_activity_percent",), pct),
    PlotSpec("cpu", "CPU Utilization", ("cpu.total_percent",), pct),
    PlotSpec("mem-bw", "Memory Bandwidth", ("cache.mem_bandwidth_bytes_per_s",), rate, hi=None),
    PlotSpec("l2", "L2 Cache Hit Ratio", ("cache.l2_hit_ratio",), ratio, hi=1.0),
    PlotSpec("l3", "L3 Cache Hit Ratio", ("cache.l3_hit_ratio",), ratio, hi=1.0),
    PlotSpec("net", "Network Bandwidth (rx+tx)",
             ("network.rx_bytes_per_s", "network.tx_bytes_per_s"), rate, hi=None),
    PlotSpec("disk", "Storage Bandwidth (read+write)",
             ("storage.read_bytes_per_s", "storage.write_bytes_per_s"), rate, hi=None),
)

JOB_PLOTS: tuple[PlotSpec, ...] = (
    PlotSpec("job-util", "GPU Utilization (job's GPUs)", ("job.gpu_utilization_percent",), pct),
    PlotSpec("job-sm", "GPU SM Activity (job's GPUs)", ("gpu.sm_activity_percent",), pct),
    PlotSpec("job-mem", "GPU Memory (job)", ("job.gpu_mem_bytes",),
             size, hi=None),
    PlotSpec("job-cpu", "CPU (job's processes)", ("job.cpu_percent",), pct, hi=None),
    PlotSpec("job-net", "Network Bandwidth (job's hosts)",
             ("network.rx_bytes_per_s", "network.tx_bytes_per_s"), rate, hi=None),
    PlotSpec("job-disk", "Storage Bandwidth (job's hosts)",
             ("storage.read_bytes_per_s", "storage.write_bytes_per_s"), rate, hi=None),
)


def add_series(a: list[float], b: list[float]) -> list[float]:
    """Element-wise sum; NaN only where both are NaN."""
    return [x if math.isnan(y) else y if math.isnan(x) else x + y for x, y in zip(a, b, strict=True)]


def mean_series(cols: list[list[float]], n: int) -> list[float]:
    """Element-wise mean ignoring NaN."""
    out = []
    for i in range(n):
        vals = [c[i] for c in cols if not math.isnan(c[i])]
        out.append(sum(vals) / len(vals) if vals else math.nan)
    return out
