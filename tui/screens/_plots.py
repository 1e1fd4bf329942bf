"""The plots of the host, job, GPU and process screens: which metrics, how to format, how to fill."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from textual.containers import Grid
from textual.dom import DOMNode

from gpulens.core.config import Config
from gpulens.core.units import duration, num, pct, rate, size, window_name
from gpulens.store.store import Store
from gpulens.store.views import WindowStats
from gpulens.tui.widgets.plot import PlotData, TimeSeriesPlot, plot_data
from gpulens.tui.widgets.thresholds import value_style


def ratio(v: float | None) -> str:
    """A 0-1 ratio shown as %."""
    return pct(None if v is None else v * 100)


def watts(v: float | None) -> str:
    """``312W``."""
    return num(v, "W")


def celsius(v: float | None) -> str:
    """``71C``."""
    return num(v, "C")


def mhz(v: float | None) -> str:
    """``1980MHz``."""
    return num(v, "MHz")


KB = 1000.0
"""The least full scale of a throughput plot: a flat zero reads ``idle`` on 1kB/s."""


@dataclass(frozen=True, slots=True)
class PlotSpec:
    """One plot: its title, the metrics summed into it, format, scale and threshold."""

    id: str
    title: str
    metrics: tuple[str, ...]
    fmt: Callable[[float | None], str]
    lo: float = 0.0
    hi: float | None = 100.0
    floor: float = 0.0
    """The least full scale when ``hi`` is None."""
    per_gpu: bool = False
    """A GPU metric: the host screen can draw one band per GPU."""
    threshold: str | None = None
    """The thresholds key that colours its figures (``util``, ``temp``, ``mem``)."""


HOST_PLOTS: tuple[PlotSpec, ...] = (
    PlotSpec("gpu-util", "GPU Utilization", ("gpu.utilization_percent",), pct, per_gpu=True),
    PlotSpec("gpu-sm", "GPU SM Activity", ("gpu.sm_activity_percent",), pct, per_gpu=True),
    PlotSpec("gpu-mem", "GPU Memory Used", ("gpu.mem_used_percent",), pct, per_gpu=True, threshold="mem"),
    PlotSpec("gpu-power", "GPU Power (sum)", ("gpu.power_w",), watts, hi=None, floor=50.0, per_gpu=True),
    PlotSpec("gpu-temp", "GPU Temperature (mean)", ("gpu.temperature_c",), celsius, hi=None, floor=50.0,
             per_gpu=True, threshold="temp"),
    PlotSpec("gpu-clock", "GPU SM Clock (mean)", ("gpu.sm_clock_mhz",), mhz, hi=None, floor=100.0, per_gpu=True),
    PlotSpec("gpu-pcie", "PCIe rx+tx (sum)", ("gpu.pcie_bytes_per_s",), rate, hi=None, floor=KB, per_gpu=True),
    PlotSpec("gpu-nvlink", "NVLink rx+tx (sum)", ("gpu.nvlink_bytes_per_s",), rate, hi=None, floor=KB,
             per_gpu=True),
    PlotSpec("cpu", "CPU Utilization", ("cpu.total_percent",), pct),
    PlotSpec("mem-bw", "Memory Bandwidth", ("cache.mem_bandwidth_bytes_per_s",), rate, hi=None, floor=KB),
    PlotSpec("l2", "L2 Cache Hit Ratio", ("cache.l2_hit_ratio",), ratio, hi=1.0),
    PlotSpec("l3", "L3 Cache Hit Ratio", ("cache.l3_hit_ratio",), ratio, hi=1.0),
    PlotSpec("net", "Network Bandwidth (rx+tx)",
             ("network.rx_bytes_per_s", "network.tx_bytes_per_s"), rate, hi=None, floor=KB),
    PlotSpec("disk", "Storage Bandwidth (read+write)",
             ("storage.read_bytes_per_s", "storage.write_bytes_per_s"), rate, hi=None, floor=KB),
)

JOB_PLOTS: tuple[PlotSpec, ...] = (
    PlotSpec("job-util", "GPU Utilization (job's GPUs)", ("job.gpu_utilization_percent",), pct),
    PlotSpec("job-sm", "GPU SM Activity (job's GPUs)", ("gpu.sm_activity_percent",), pct),
    PlotSpec("job-mem", "GPU Memory (job)", ("job.gpu_mem_bytes",), size, hi=None, floor=float(1 << 20)),
    PlotSpec("job-cpu", "CPU (job's processes)", ("job.cpu_percent",), pct, hi=None, floor=100.0),
    PlotSpec("job-net", "Network Bandwidth (job's hosts)",
             ("network.rx_bytes_per_s", "network.tx_bytes_per_s"), rate, hi=None, floor=KB),
    PlotSpec("job-disk", "Storage Bandwidth (job's hosts)",
             ("storage.read_bytes_per_s", "storage.write_bytes_per_s"), rate, hi=None, floor=KB),
)

GPU_PLOTS: tuple[PlotSpec, ...] = tuple(
    PlotSpec(s.id, s.title.replace(" (sum)", "").replace(" (mean)", ""), s.metrics, s.fmt, s.lo, s.hi,
             s.floor, False, s.threshold)
    for s in HOST_PLOTS if s.per_gpu)
"""One GPU's plots (the GPU screen)."""

PROCESS_PLOTS: tuple[PlotSpec, ...] = (
    PlotSpec("proc-cpu", "CPU (% of one core)", ("proc.cpu_percent",), pct, hi=None, floor=100.0),
    PlotSpec("proc-rss", "Resident memory (RSS)", ("proc.rss_bytes",), size, hi=None, floor=float(1 << 20)),
    PlotSpec("proc-gpumem", "GPU memory", ("proc.gpu_mem_bytes",), size, hi=None, floor=float(1 << 20)),
    PlotSpec("proc-gpuutil", "GPU SM utilization (NVML, this process)", ("proc.gpu_util_percent",), pct),
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


def summed_stats(parts: Sequence[WindowStats]) -> WindowStats | None:
    """Statistics of a plot that adds metrics (rx + tx): exact for one part, else None (from the series)."""
    known = [p for p in parts if not p.empty]
    return known[0] if len(known) == 1 and len(parts) == 1 else None


SeriesKey = tuple[str, str, int | None, str | None, int | None]
"""(host or job key, metric, gpu, job, pid): one series a screen draws."""


class SeriesFeed:
    """A screen's aligned series: the closed columns kept, only the stale newest ones read again.

    A plot asks for exactly the columns it draws (``aligned=True``). Between
    column boundaries only the newest column can change (``tail=1``); when new
    columns start, the kept ones shift left and only the new ones (and the one
    that was filling) are read: :meth:`Store.stale_columns` says how many, from
    the old and new :meth:`Store.series_stamp`. One entry per series (a window
    or width change replaces it), so the feed stays as small as the screen.
    """

    def __init__(self) -> None:
        self._cols: dict[SeriesKey, tuple[tuple[object, ...], list[float]]] = {}
        self.full_reads = 0
        """Whole-window reads (a late sample, a new GPU, a new window or width)."""
        self.tail_reads = 0
        """Reads of the newest columns only."""

    def _read(self, store: Store, key: SeriesKey, window_s: float, points: int, stamp: tuple[object, ...],
              read: Callable[[int | None], list[float]]) -> list[float]:
        hit = self._cols.get(key)
        old = hit[0] if hit is not None and hit[0][:2] == (window_s, points) else None
        n = store.stale_columns(window_s, points, old[2:] if old is not None else None, stamp)
        if hit is None or old is None or n >= points:
            vals = read(None)
            self.full_reads += 1
        else:
            new_c, old_c = stamp[0], old[2]
            shift = new_c - old_c if isinstance(new_c, int) and isinstance(old_c, int) else 0
            if isinstance(new_c, tuple):  # a job's stamp: (hosts, *host stamps); every host shifts alike
                shift = max((int(sn[0]) - int(so[0]) for sn, so in zip(stamp[1:], old[3:], strict=True)  # type: ignore[index]
                             ), default=0)
            vals = hit[1][shift : points - n + shift] + read(n)
            self.tail_reads += 1
        self._cols[key] = ((window_s, points, *stamp), vals)
        return list(vals)

    def series(self, store: Store, host: str, metric: str, window_s: float, points: int,
               gpu: int | None = None, job: str | None = None, pid: int | None = None) -> list[float]:
        """``store.series(..., aligned=True)``, reading only the columns that may have changed."""
        return self._read(store, (host, metric, gpu, job, pid), window_s, points,
                          store.series_stamp(host, window_s, points),
                          lambda tail: store.series(host, metric, window_s, points, gpu=gpu, job=job, pid=pid,
                                                    aligned=True, tail=tail))

    def job_series(self, store: Store, key: str, metric: str, window_s: float, points: int) -> list[float]:
        """:meth:`series` of a job over its hosts (``store.job_series``, ``job_series_stamp``)."""
        return self._read(store, (key, metric, None, key, None), window_s, points,
                          store.job_series_stamp(key, window_s, points),
                          lambda tail: store.job_series(key, metric, window_s, points, aligned=True, tail=tail))


def host_plot(store: Store, host: str, spec: PlotSpec, window_s: float, points: int,
              gpus: Sequence[int] = (), gpu: int | None = None, feed: SeriesFeed | None = None) -> PlotData:
    """What a host (or, with ``gpu``, a GPU) plot shows; ``gpus``: one band per GPU.

    With a ``feed``, the series are aligned columns (``points`` of them: the
    plot's :attr:`~TimeSeriesPlot.points`), of which only the newest is read per tick.
    """
    def series(metric: str, g: int | None) -> list[float]:
        if feed is None:
            return store.series(host, metric, window_s, points, gpu=g)
        return feed.series(store, host, metric, window_s, points, gpu=g)

    values = series(spec.metrics[0], gpu)
    for m in spec.metrics[1:]:
        values = add_series(values, series(m, gpu))
    parts = [store.window_stats(host, m, window_s, gpu=gpu) for m in spec.metrics]
    stats = summed_stats(parts)
    note = "per GPU" if gpus else ""
    if stats is None and parts and not parts[0].empty:  # a sum (rx + tx): figures from the series
        note = f"{note} over {duration(parts[0].covered_s)} of data".strip()
    lines = [(f"GPU{i}", series(spec.metrics[0], i)) for i in gpus]
    return plot_data(values, store.unavailable(host, spec.metrics[0]), window_name(window_s), window_s,
                     stats, lines, note)


def plot_rows(grid: Grid, count: int, height: int, reserved: int, width: int, least: int = 0) -> None:
    """Lay out ``count`` plots in ``grid``: 1-3 columns by width, rows as tall as ``height`` allows.

    ``reserved``: the lines the screen needs besides the plots (tables,
    headings); the plots take the rest, 8 lines each at least (6 when narrow, ``least`` when
    more), 16 at most.
    """
    cols = 1 if width < 100 else 3 if width >= 180 and count >= 6 else 2
    rows = max(1, math.ceil(count / cols))
    each = max(least, 6 if width < 100 else 8, min(16, (height - reserved) // rows))
    if (grid.styles.grid_size_columns, [r.value for r in grid.styles.grid_rows or ()]) != (cols, [each]):
        grid.styles.grid_size_columns = cols
        grid.styles.grid_rows = str(each)


def configure_plots(screen: DOMNode, specs: Sequence[PlotSpec], cfg: Config) -> None:
    """Give each plot of ``specs`` its floor and threshold colours (the base screen composes them plain)."""
    for spec in specs:
        plot = screen.query_one(f"#{spec.id}", TimeSeriesPlot)
        plot.floor = spec.floor
        if spec.threshold is not None:
            plot.style_of = value_style(spec.threshold, cfg.thresholds)
