"""The plots of the host, job, GPU and process screens: which metrics, how to format, how to fill."""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from rich.text import Text
from textual.containers import Grid
from textual.dom import DOMNode

from gpulens.core.config import Config
from gpulens.core.model import HostSample
from gpulens.core.units import num, pct, rate, size, window_name
from gpulens.store.store import Store
from gpulens.store.views import GPU_METRICS, gpu_block_values
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
    """One plot: its title, the metric it draws (the store keeps totals such as rx + tx), format, scale, threshold."""

    id: str
    title: str
    metric: str
    fmt: Callable[[float | None], str]
    lo: float = 0.0
    hi: float | None = 100.0
    floor: float = 0.0
    """The least full scale when ``hi`` is None."""
    per_gpu: bool = False
    """A GPU metric: the host screen can draw one band per GPU."""
    threshold: str | None = None
    """The thresholds key that colours its figures (``util``, ``temp``, ``mem``)."""


def short_title(spec: PlotSpec) -> str:
    """``GPU Power``: the title without how it combines GPUs."""
    return spec.title.replace(" (sum)", "").replace(" (mean)", "").replace(" (hottest)", "")


HOST_PLOTS: tuple[PlotSpec, ...] = (
    PlotSpec("gpu-util", "GPU Utilization", "gpu.utilization_percent", pct, per_gpu=True),
    PlotSpec("gpu-sm", "GPU SM Activity", "gpu.sm_activity_percent", pct, per_gpu=True),
    PlotSpec("gpu-mem", "GPU Memory Used", "gpu.mem_used_percent", pct, per_gpu=True, threshold="mem"),
    PlotSpec("gpu-power", "GPU Power (sum)", "gpu.power_w", watts, hi=None, floor=50.0, per_gpu=True),
    PlotSpec("gpu-temp", "GPU Temperature (hottest)", "gpu.temperature_c", celsius, hi=None, floor=50.0,
             per_gpu=True, threshold="temp"),
    PlotSpec("gpu-clock", "GPU SM Clock (mean)", "gpu.sm_clock_mhz", mhz, hi=None, floor=100.0, per_gpu=True),
    PlotSpec("gpu-pcie", "PCIe rx+tx (sum)", "gpu.pcie_bytes_per_s", rate, hi=None, floor=KB, per_gpu=True),
    PlotSpec("gpu-nvlink", "NVLink rx+tx (sum)", "gpu.nvlink_bytes_per_s", rate, hi=None, floor=KB,
             per_gpu=True),
    PlotSpec("cpu", "CPU Utilization", "cpu.total_percent", pct),
    PlotSpec("mem-bw", "Memory Bandwidth", "cache.mem_bandwidth_bytes_per_s", rate, hi=None, floor=KB),
    PlotSpec("l2", "L2 Cache Hit Ratio", "cache.l2_hit_ratio", ratio, hi=1.0),
    PlotSpec("l3", "L3 Cache Hit Ratio", "cache.l3_hit_ratio", ratio, hi=1.0),
    PlotSpec("net", "Network Bandwidth (rx+tx)", "network.total_bytes_per_s", rate, hi=None, floor=KB),
    PlotSpec("disk", "Storage Bandwidth (read+write)", "storage.total_bytes_per_s", rate, hi=None, floor=KB),
)

JOB_PLOTS: tuple[PlotSpec, ...] = (
    PlotSpec("job-util", "GPU Utilization (job's GPUs)", "job.gpu_utilization_percent", pct),
    PlotSpec("job-sm", "GPU SM Activity (job's GPUs)", "gpu.sm_activity_percent", pct),
    PlotSpec("job-mem", "GPU Memory (job)", "job.gpu_mem_bytes", size, hi=None, floor=float(1 << 20)),
    PlotSpec("job-cpu", "CPU (job's processes)", "job.cpu_percent", pct, hi=None, floor=100.0),
    PlotSpec("job-net", "Network Bandwidth (job's hosts)", "network.total_bytes_per_s", rate, hi=None,
             floor=KB),
    PlotSpec("job-disk", "Storage Bandwidth (job's hosts)", "storage.total_bytes_per_s", rate, hi=None,
             floor=KB),
)

GPU_ONLY_PLOTS: tuple[PlotSpec, ...] = (
    PlotSpec("gpu-occ", "SM Occupancy", "gpu.sm_occupancy_percent", pct),
    PlotSpec("gpu-tensor", "Tensor Pipes Active", "gpu.tensor_active_percent", pct),
    PlotSpec("gpu-dram", "DRAM Bandwidth (of peak)", "gpu.dram_bw_util_percent", pct),
    PlotSpec("gpu-memclk", "GPU Memory Clock", "gpu.mem_clock_mhz", mhz, hi=None, floor=100.0),
    PlotSpec("gpu-energy", "Energy Counter Rate (J/s)", "gpu.energy_rate_w", watts, hi=None, floor=50.0),
)
"""The GPU screen's plots of what only it shows (the host screen has the rest, per GPU)."""

GPU_PLOTS: tuple[PlotSpec, ...] = (
    *(PlotSpec(s.id, short_title(s), s.metric, s.fmt, s.lo, s.hi, s.floor, False, s.threshold)
      for s in HOST_PLOTS if s.per_gpu),
    *GPU_ONLY_PLOTS)
"""One GPU's plots (the GPU screen): every metric the store keeps per GPU."""

PROCESS_PLOTS: tuple[PlotSpec, ...] = (
    PlotSpec("proc-cpu", "CPU (% of one core)", "proc.cpu_percent", pct, hi=None, floor=100.0),
    PlotSpec("proc-rss", "Resident memory (RSS)", "proc.rss_bytes", size, hi=None, floor=float(1 << 20)),
    PlotSpec("proc-gpumem", "GPU memory", "proc.gpu_mem_bytes", size, hi=None, floor=float(1 << 20)),
    PlotSpec("proc-gpuutil", "GPU SM utilization (NVML, this process)", "proc.gpu_util_percent", pct),
)


def add_series(a: list[float], b: list[float]) -> list[float]:
    """Element-wise sum; NaN only where both are NaN."""
    return [x if math.isnan(y) else y if math.isnan(x) else x + y for x, y in zip(a, b, strict=True)]


def mean_series(cols: list[list[float]], n: int) -> list[float]:
    """Element-wise mean of the first ``n`` values of ``cols``, ignoring NaN."""
    out = []
    for column in zip(*[c[:n] for c in cols], strict=True) if cols else [()] * n:
        vals = [v for v in column if v == v]  # not NaN
        out.append(sum(vals) / len(vals) if vals else math.nan)
    return out


SeriesKey = tuple[str, str, int | None, str | None, int | None]
"""(host or job key, metric, gpu, job, pid): one series a screen draws."""

Read = tuple[list[float], int, int, int, int]
"""One read of :class:`SeriesFeed`: (values, shift, kept, base, serial). ``values[:kept]`` are the
values of entry ``base`` (the series' previous read) shifted left by ``shift`` columns (``kept`` 0: a
whole read); ``serial`` names the entry this read left."""


def total(cols: Sequence[list[float]]) -> list[float]:
    """:func:`add_series` of ``cols`` in order (the first as it is when it is the only one)."""
    out = cols[0]
    for c in cols[1:]:
        out = add_series(out, c)
    return out


class SeriesFeed:
    """A screen's aligned series: the closed columns kept, only the stale newest ones read again.

    A plot asks for exactly the columns it draws (``aligned=True``). Between
    column boundaries only the newest column can change (``tail=1``); when new
    columns start, the kept ones shift left and only the new ones (and the one
    that was filling) are read: :meth:`Store.stale_columns` says how many, from
    the old and new :meth:`Store.series_stamp`. One entry per series (a window
    or width change replaces it), so the feed stays as small as the screen.

    A plot of several series (a job's GPUs averaged, rx + tx summed) keeps its
    combined columns too (:meth:`combined`): only those its parts read again
    are combined again.
    """

    def __init__(self) -> None:
        self._cols: dict[SeriesKey, tuple[tuple[object, ...], list[float], int]] = {}
        self._combined: dict[Hashable, tuple[tuple[int, ...], list[float]]] = {}
        self._serial = 0
        self._memo_for: tuple[Store | None, int, float] = (None, -1, 0.0)
        self._stamps: dict[tuple[str, str, float, int], tuple[object, ...]] = {}
        """(kind, host or job, window, points) -> its stamp, while the store holds (one per host, not per series)."""
        self._stale: dict[tuple[tuple[object, ...], tuple[object, ...], float, int], int] = {}
        """(old stamp, new stamp, window, points) -> columns to read again, while the store holds."""
        self.full_reads = 0
        """Whole-window reads (a late sample, a new GPU, a new window or width)."""
        self.tail_reads = 0
        """Reads of the newest columns only."""
        self.combined_columns = 0
        """Columns worked out by :meth:`combined` (all of them only when a part was read whole)."""

    def _read(self, store: Store, key: SeriesKey, window_s: float, points: int, stamp: tuple[object, ...],
              read: Callable[[int | None], list[float]]) -> Read:
        hit = self._cols.get(key)
        old = hit[0] if hit is not None and hit[0][:2] == (window_s, points) else None
        if old is None:
            n = points
        else:
            memo = (old[2:], stamp, window_s, points)
            n = self._stale.get(memo, -1)
            if n < 0:
                n = self._stale[memo] = store.stale_columns(window_s, points, old[2:], stamp)
        if hit is None or old is None or n >= points:
            vals = read(None)
            shift = kept = 0
            base = -1
            self.full_reads += 1
        else:
            new_c, old_c = stamp[0], old[2]
            shift = new_c - old_c if isinstance(new_c, int) and isinstance(old_c, int) else 0
            if isinstance(new_c, tuple):  # a job's stamp: (hosts, *host stamps); every host shifts alike
                shift = max((int(sn[0]) - int(so[0]) for sn, so in zip(stamp[1:], old[3:], strict=True)  # type: ignore[index]
                             ), default=0)
            kept = points - n
            vals = hit[1][shift : kept + shift] + read(n)
            base = hit[2]
            self.tail_reads += 1
        self._serial += 1
        self._cols[key] = ((window_s, points, *stamp), vals, self._serial)
        return vals, shift, kept, base, self._serial

    def _stamp(self, store: Store, kind: str, name: str, window_s: float, points: int) -> tuple[object, ...]:
        """``store.series_stamp`` (or ``job_series_stamp``), asked once per host (job) while the store holds.

        Every series of a host shares its stamp: a plot of a job's 32 GPUs asks for 4, not 32.
        """
        held = (store, store.version, store.now)
        if held[0] is not self._memo_for[0] or held[1:] != self._memo_for[1:]:
            self._memo_for = held
            self._stamps.clear()
            self._stale.clear()
        key = (kind, name, window_s, points)
        stamp = self._stamps.get(key)
        if stamp is None:
            stamp = self._stamps[key] = (store.series_stamp(name, window_s, points) if kind == "host"
                                         else store.job_series_stamp(name, window_s, points))
        return stamp

    def read(self, store: Store, host: str, metric: str, window_s: float, points: int,
             gpu: int | None = None, job: str | None = None, pid: int | None = None) -> Read:
        """:meth:`series` as a :data:`Read` for :meth:`combined` (its values are the feed's: not to be changed)."""
        return self._read(store, (host, metric, gpu, job, pid), window_s, points,
                          self._stamp(store, "host", host, window_s, points),
                          lambda tail: store.series(host, metric, window_s, points, gpu=gpu, job=job, pid=pid,
                                                    aligned=True, tail=tail))

    def series(self, store: Store, host: str, metric: str, window_s: float, points: int,
               gpu: int | None = None, job: str | None = None, pid: int | None = None) -> list[float]:
        """``store.series(..., aligned=True)``, reading only the columns that may have changed."""
        return list(self.read(store, host, metric, window_s, points, gpu, job, pid)[0])

    def job_series(self, store: Store, key: str, metric: str, window_s: float, points: int) -> list[float]:
        """:meth:`series` of a job over its hosts (``store.job_series``, ``job_series_stamp``)."""
        return list(self._read(store, (key, metric, None, key, None), window_s, points,
                               self._stamp(store, "job", key, window_s, points),
                               lambda tail: store.job_series(key, metric, window_s, points, aligned=True,
                                                             tail=tail))[0])

    def combined(self, key: Hashable, parts: Sequence[Read],
                 combine: Callable[[list[list[float]]], list[float]]) -> list[float]:
        """``combine`` of the parts' values, element-wise (a mean, a sum): worked out again only for the
        columns a part read again, while every part shifted alike since the last call with ``key``.

        ``combine`` gets the parts' values (or their newest columns) in order and
        must treat each column alone, so that a column comes out the same either way.
        """
        hit = self._combined.get(key)
        first = parts[0]
        shift, kept = first[1], first[2]
        if (hit is not None and kept > 0 and hit[0] == tuple([p[3] for p in parts])
                and all(p[1] == shift and p[2] == kept for p in parts)):
            out = hit[1][shift : shift + kept] + combine([p[0][kept:] for p in parts])
            self.combined_columns += len(out) - kept
        else:
            out = combine([p[0] for p in parts])
            self.combined_columns += len(out)
        if key not in self._combined and len(self._combined) >= 256:  # keys of parts gone (a job's GPUs)
            self._combined.clear()
        self._combined[key] = (tuple([p[4] for p in parts]), out)
        return list(out)


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

    values = series(spec.metric, gpu)
    part = store.window_stats(host, spec.metric, window_s, gpu=gpu)
    stats = None if part.empty else part
    note = "per GPU" if gpus else ""
    if spec.per_gpu and gpu is None and not gpus:
        note = reading_note(*gpus_reading(store, host, spec.metric), "GPUs")  # a lost GPU's draw is not in the sum
    lines = [(f"GPU{i}", series(spec.metric, i)) for i in gpus]
    return plot_data(values, store.unavailable(host, spec.metric), window_name(window_s), window_s,
                     stats, lines, note, store.newest_column(window_s, points) if feed is not None else None)


def reading_note(reading: int, of: int, what: str) -> str:
    """``"7 of 8 GPUs read"`` when a figure joins only some of its parts now ("" for all, or none: n/a)."""
    return f"{reading} of {of} {what} read" if 0 < reading < of else ""


_READING: dict[str, tuple[HostSample, list[int]]] = {}
"""Host -> its newest sample and how many of its GPUs read each of :data:`GPU_METRICS` in it."""


def gpus_reading(store: Store, host: str, metric: str) -> tuple[int, int]:
    """(how many of ``host``'s GPUs read ``metric`` in its newest sample, how many GPUs it has): a host
    aggregate (a sum, the hottest, a mean) covers only the GPUs that read."""
    sample = store.latest(host)
    if sample is None or not sample.gpus or metric not in GPU_METRICS:
        return 0, 0
    hit = _READING.get(host)
    if hit is None or hit[0] is not sample:  # once a sample, not once a plot
        w, values = len(GPU_METRICS), gpu_block_values(sample.gpus)
        hit = _READING[host] = (sample, [sum(1 for v in values[i::w] if v == v) for i in range(w)])
    return hit[1][GPU_METRICS.index(metric)], len(sample.gpus)


def plot_rows(grid: Grid, count: int, height: int, reserved: int, width: int, least: int = 0) -> int:
    """Lay out ``count`` plots in ``grid``: 1-3 columns by width, rows as tall as ``height`` allows.

    ``reserved``: the lines the screen needs besides the plots (tables,
    headings); the plots take the rest, 8 lines each at least (6 when narrow, ``least`` when
    more), 24 at most (a taller plot only spreads the same figures). Returns the lines they take.
    """
    cols = 1 if width < 100 else 3 if width >= 180 and count >= 6 else 2
    rows = max(1, math.ceil(count / cols))
    each = max(least, 6 if width < 100 else 8, min(24, (height - reserved) // rows))
    if (grid.styles.grid_size_columns, [r.value for r in grid.styles.grid_rows or ()]) != (cols, [each]):
        grid.styles.grid_size_columns = cols
        grid.styles.grid_rows = str(each)
    return rows * each


def configure_plots(screen: DOMNode, specs: Sequence[PlotSpec], cfg: Config) -> None:
    """Give each plot of ``specs`` its floor and threshold colours (the base screen composes them plain)."""
    for spec in specs:
        plot = screen.query_one(f"#{spec.id}", TimeSeriesPlot)
        plot.floor = spec.floor
        if spec.threshold is not None:
            plot.style_of = value_style(spec.threshold, cfg.thresholds)


def absent_reason(store: Store, host: str, spec: PlotSpec, window_s: float) -> str | None:
    """Why ``spec`` has nothing to draw on ``host``: its metric is n/a and has no value in the window.

    None while any metric reads or the window holds a value (the plot shows the values it has).
    """
    reason = store.unavailable(host, spec.metric)
    if reason is None or store.has_data(host, spec.metric, window_s):
        return None
    return reason


def absent_text(absent: Sequence[tuple[PlotSpec, str]]) -> Text:
    """The plots left out, one line per reason: ``n/a here  GPU Utilization, GPU Power — NVML init failed ...``."""
    by_reason: dict[str, list[str]] = {}
    for spec, reason in absent:
        by_reason.setdefault(reason, []).append(short_title(spec))
    text = Text(no_wrap=False)
    for i, (reason, titles) in enumerate(by_reason.items()):
        text.append("\n" if i else "")
        text.append("n/a here  " if i == 0 else "          ", "bold")
        text.append(", ".join(titles))
        text.append(f" — {reason}", "dim")
    return text
