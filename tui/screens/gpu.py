"""GPU detail (Enter on a GPU row of the host screen): every metric over time, processes, events."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import ClassVar

from rich.cells import cell_len
from rich.style import Style
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Grid, VerticalScroll
from textual.widgets import Footer, Static

from gpulens.core.model import GpuSample, HostSample, Workload
from gpulens.core.units import NA, num, pct, rate
from gpulens.core.workload import describe
from gpulens.store.gpu_events import GpuEvent
from gpulens.store.views import job_key
from gpulens.tui.context import ScreenContext
from gpulens.tui.screens._plots import (
    GPU_PLOTS,
    SeriesFeed,
    configure_plots,
    host_plot,
    mhz,
    plot_rows,
    watts,
)
from gpulens.tui.screens.base import DataScreen
from gpulens.tui.screens.process import ProcessScreen
from gpulens.tui.widgets.gpu_table import THROTTLE_SHORT, mem_pair, pair
from gpulens.tui.widgets.header import AppHeader
from gpulens.tui.widgets.plot import TimeSeriesPlot
from gpulens.tui.widgets.process_table import GpuProcessTable
from gpulens.tui.widgets.thresholds import (
    CRIT,
    MARKS,
    STYLES,
    WARN,
    gpu_levels,
    throttle_level,
    throttle_text,
    xid_meaning,
)

MAX_EVENT_LINES = 12
NOT_REPORTED = "not reported by this source"
"""The reason shown for a field the sample leaves out without saying why."""


def joules(v: float) -> str:
    """``1.23MJ``: decimal SI, as energy counters are read."""
    for unit in ("", "k", "M", "G", "T"):
        if abs(v) < 1000 or unit == "T":
            return f"{v:.0f}J" if unit == "" else f"{v:.2f}{unit}J"
        v /= 1000
    return f"{v:.0f}J"  # pragma: no cover


def why(g: GpuSample, field: str) -> str:
    """The reason ``field`` of ``g`` is n/a: the sample's own, else that the source does not report it."""
    return g.unavailable.get(field) or g.unavailable.get("gpu") or NOT_REPORTED


def _same(w: Workload, given: Workload) -> bool:
    """Whether process workload ``w`` is in the pod or Slurm job ``given`` names."""
    if w.pod is not None and (w.namespace, w.pod) == (given.namespace, given.pod):
        return True
    if w.pod_uid is not None and w.pod_uid == given.pod_uid:
        return True
    return w.slurm_job is not None and w.slurm_job == given.slurm_job


def held_by(sample: HostSample | None, g: GpuSample | None) -> str:
    """Who has ``g`` (``""``: none known): first the pod and container it was given (``allocated``: the
    kubelet's allocation, as dcgm-exporter labels it), then other pods, Slurm jobs or containers whose
    processes hold memory on it."""
    if sample is None or g is None:
        return ""
    index = str(g.index)
    given = g.allocated
    found = dict.fromkeys([describe(replace(given, ns_pid=None, slurm_task=None))] if given is not None else [])
    found.update(dict.fromkeys(describe(replace(j.workload, ns_pid=None, slurm_task=None)) for j in sample.jobs
                               if j.workload is not None and index in j.gpu_mem_bytes
                               and (given is None or not _same(j.workload, given))))
    return ", ".join(found)


def procs_title(g: GpuSample | None) -> str:
    """The process table's title, with why its SM util reads n/a where NVML said (a cell has no room for it)."""
    title = "Processes on this GPU (enter: process detail)"
    if g is None or not any(p.sm_util_percent is None for p in g.processes):
        return title
    why = g.unavailable.get("processes.sm_util_percent") or (
        "NVML reported no utilization sample for the process since the last read")
    return f"{title} · SM util n/a: {why}"


def link_name(g: GpuSample) -> str:
    """The GPU-to-GPU link the ``nvlink_*`` fields count: NVLink, or XGMI on AMD GPUs (docs/amd.md)."""
    return "XGMI" if g.vendor == "amd" else "NVLink"


def extra_fields(g: GpuSample, energy_rate: float | None, rate_why: str) -> list[tuple[str, str]]:
    """Tensor activity, NVLink total (rx/tx n/a with reason where only the sum is known), energy.

    ``energy_rate``: J/s between the last two samples (or None, ``rate_why`` saying why).
    """
    out = [("tensor", pct(g.tensor_active_percent) if g.tensor_active_percent is not None
            else f"{NA} ({why(g, 'tensor_active_percent')})")]
    rx, tx, total = g.nvlink_rx_bytes_per_s, g.nvlink_tx_bytes_per_s, g.nvlink_total_bytes_per_s
    if total is None and rx is not None and tx is not None:
        total = rx + tx
    link = f"{link_name(g)} total"
    if total is None:
        field = "nvlink_rx_bytes_per_s" if g.vendor == "amd" else "nvlink_total_bytes_per_s"  # XGMI: rx/tx only
        out.append((link, f"{NA} ({why(g, field)})"))
    elif rx is None or tx is None:
        out.append((link, f"{rate(total)} (rx/tx {NA}: {why(g, 'nvlink_rx_bytes_per_s')})"))
    else:
        out.append((link, rate(total)))
    if g.energy_joules is None:
        out.append(("energy", f"{NA} ({why(g, 'energy_joules')})"))
    else:
        per_s = f"{energy_rate:.0f}J/s" if energy_rate is not None else f"{NA} J/s ({rate_why})"
        out.append(("energy", f"{joules(g.energy_joules)} total, {per_s}"))
    return out


def group_events(evs: Sequence[GpuEvent]) -> list[tuple[GpuEvent, float, int]]:
    """Runs of the same event in a row (an XID reported sample after sample) as (first, last time, count)."""
    out: list[tuple[GpuEvent, float, int]] = []
    for e in evs:
        if out and (out[-1][0].kind, out[-1][0].detail) == (e.kind, e.detail):
            out[-1] = (out[-1][0], e.time, out[-1][2] + 1)
        else:
            out.append((e, e.time, 1))
    return out


def event_line(e: GpuEvent, clock: str, times: int = 1, last: str = "") -> Text:
    """``12:00:03  ! XID 79 ×15, last 12:04:10  the GPU has fallen off the bus`` / ``12:01:10  ! throttle
    SW-therm,HW-therm`` / ``... throttle ended``."""
    text = Text(f"{clock}  ", style="dim")
    short = ",".join(THROTTLE_SHORT.get(r, r) for r in e.detail.split(","))
    if e.kind == "xid":
        text.append(f"{MARKS[CRIT]} XID {e.detail}", STYLES[CRIT])
        if times > 1:
            text.append(f" ×{times}, last {last}", STYLES[CRIT])
        text.append(f"  {xid_meaning(e.detail)}", "dim")
    elif e.kind == "throttle":
        lvl = throttle_level(tuple(e.detail.split(",")))
        text.append(f"{MARKS[lvl]} throttle {short}", STYLES[lvl])
    else:
        text.append(f"throttle ended ({short})")
    return text


class GpuScreen(DataScreen):
    """One GPU of one host.

    | key | action |
    | --- | --- |
    | enter | open the process under the cursor |
    | esc | back |
    """

    SHOWS_LEVELS = True
    BINDINGS: ClassVar[list[BindingType]] = []

    def __init__(self, host: str, index: int, *, context: ScreenContext | None = None) -> None:
        super().__init__(context=context)
        self.host = host
        self.index = index
        self.crumb = f"GPU{index}"
        self._seen: tuple[object, ...] = ()
        self.feed = SeriesFeed()
        """The plots' aligned columns: per tick only the newest is read."""
        self._plots: list[TimeSeriesPlot] = []

    def compose(self) -> ComposeResult:
        """Header, the GPU's figures, its plots, processes and event history."""
        yield AppHeader()
        with VerticalScroll(id="body"):
            yield Static("", id="gpu-info")
            with Grid(id="plots", classes="plots"):
                for spec in GPU_PLOTS:
                    yield TimeSeriesPlot(spec.title, spec.fmt, lo=spec.lo, hi=spec.hi, id=spec.id)
            yield Static("Processes on this GPU (enter: process detail)", classes="section", id="gpu-procs-title")
            yield GpuProcessTable(id="gpu-procs")
            yield Static("Throttle and XID history (newest first)", classes="section")
            yield Static("", id="gpu-events")
        yield Footer()

    def on_mount(self) -> None:
        """First draw; opened from elsewhere than its host's screen (the heatmap), the crumb names the host."""
        stack = self.app.screen_stack
        below = stack[-2] if len(stack) > 1 and stack[-1] is self else None
        if getattr(below, "host", None) != self.host:
            self.crumb = f"{self.host} GPU{self.index}"
        configure_plots(self, GPU_PLOTS, self.ctx.cfg)
        self.query_one("#body").focus()
        self.refresh_data(force=True)

    def on_resize(self, event: events.Resize) -> None:
        """Narrow layout; plots fill the height."""
        super().on_resize(event)
        plot_rows(self.query_one("#plots", Grid), len(GPU_PLOTS), event.size.height, 22, event.size.width)
        self.call_after_refresh(self.refresh_data, True)  # the info line's fields, packed to the new width

    def gpu(self) -> tuple[HostSample | None, GpuSample | None]:
        """The host's newest sample and this GPU in it."""
        s = self.ctx.store.latest(self.host)
        return s, next((g for g in s.gpus if g.index == self.index), None) if s else None

    def refresh_data(self, force: bool = False) -> None:
        """Redraw when the host's data or the window changed."""
        super().refresh_data(force)
        store, w = self.ctx.store, self.ctx.window_s
        seen = (store.host_version(self.host), w)
        if seen == self._seen and not force:
            return
        self._seen = seen
        sample, g = self.gpu()
        self.update_static("#gpu-info", self._info(g, held_by(sample, g)), same_shape_repaints=True)
        if not self._plots:
            self._plots = [self.query_one(f"#{spec.id}", TimeSeriesPlot) for spec in GPU_PLOTS]
        for spec, plot in zip(GPU_PLOTS, self._plots, strict=True):
            plot.set_data(host_plot(store, self.host, spec, w, plot.points, gpu=self.index, feed=self.feed))
        jobs = {j.pid: j for j in sample.jobs} if sample else {}
        table = self.query_one(GpuProcessTable)
        table.placeholder = "no process holds memory on this GPU" if g else "the GPU is not in the newest sample"
        table.show([(p, jobs.get(p.pid), job_key(self.host, jobs[p.pid]) if p.pid in jobs else "")
                    for p in (g.processes if g else ())])
        self.update_static("#gpu-procs-title", Text(procs_title(g)))
        self._events()

    def energy_rate(self) -> tuple[float | None, str]:
        """The energy counter's J/s between the newest sample and the one before (the store's), or None and why."""
        now = self.ctx.store.last_value(self.host, "gpu.energy_rate_w", gpu=self.index)
        if math.isnan(now):
            return None, "needs two samples in a row; a counter that went back starts again"
        return now, ""

    def _info(self, g: GpuSample | None, holders: str = "") -> Text:
        if g is None:
            return Text(f"GPU {self.index} is not in {self.host}'s newest sample", style="bold")
        lv = gpu_levels(g, self.ctx.cfg.thresholds)
        used = NA if g.mem_used_bytes is None else mem_pair(g.mem_used_bytes, g.mem_total_bytes)
        fields: list[tuple[str, str, int]] = [
            ("GPU", f"{g.index} {g.name}", 0),
            *((("vendor", g.vendor.upper(), 0),) if g.vendor != "nvidia" else ()),
            ("uuid", g.uuid or NA, 0),
            ("util", pct(g.utilization_percent), lv["util"]), ("mem", used, lv["mem"]),
            ("power", pair(g.power_w, g.power_limit_w, watts), lv["power"]),
            ("temp", num(g.temperature_c, "C"), lv["temp"]),
            ("clocks", pair(g.sm_clock_mhz, g.mem_clock_mhz, mhz), 0),
            ("PCIe rx/tx", pair(g.pcie_rx_bytes_per_s, g.pcie_tx_bytes_per_s, rate), 0),
            (f"{link_name(g)} rx/tx", pair(g.nvlink_rx_bytes_per_s, g.nvlink_tx_bytes_per_s, rate), 0),
            ("ECC c/u", pair(g.ecc_corrected, g.ecc_uncorrected, num), 0),
            ("throttle", throttle_text(g, lambda r: THROTTLE_SHORT.get(r, r)), lv["throttle"]),
            *((("held by", holders, 0),) if holders else ()),
        ]
        text = Text()
        # Packed to the width: a field is never split between its label and its value.
        width = max(20, self.size.width - 2) if self.is_mounted else 1 << 16
        first = [(label, f"{value}{MARKS[lvl]}", STYLES[lvl] if lvl else Style(bold=True))
                 for label, value, lvl in fields]
        extra = [(label, value, Style(bold=True)) for label, value in extra_fields(g, *self.energy_rate())]
        for n, group in enumerate((first, extra)):
            text.append("\n" if n else "")
            at = 0
            for label, value, style in group:
                cells = cell_len(f"{label} {value}")
                if at and at + 3 + cells > width:
                    text.append("\n")
                    at = 0
                elif at:
                    text.append("   ")
                    at += 3
                text.append(f"{label} ", style="dim")
                text.append(value, style=style)
                at += cells
        reasons = sorted(set(g.unavailable.values()))
        if reasons:
            text.append(f"\nn/a: {'; '.join(reasons)[:300]}", style="dim")
        return text

    def _events(self) -> None:
        evs = self.ctx.store.gpu_events(self.host, self.index)
        if not evs:
            self.update_static("#gpu-events", Text("none seen since the viewer started (throttling starts/ends and "
                                                   "XID errors are listed here)", style="dim"),
                               same_shape_repaints=True)
            return
        lines = Text()
        runs = group_events(evs)
        clock = self.ctx.clock_text
        for i, (e, last, times) in enumerate(reversed(runs[-MAX_EVENT_LINES:])):
            if i:
                lines.append("\n")
            lines.append_text(event_line(e, clock(e.time), times, clock(last)))
        if len(runs) > MAX_EVENT_LINES:
            lines.append(f"\n… {len(runs) - MAX_EVENT_LINES} older", style="dim")
        lines.append(f"\n{MARKS[CRIT]} critical  {MARKS[WARN]} warning", style="dim")
        self.update_static("#gpu-events", lines, same_shape_repaints=True)

    def on_incremental_table_row_selected(self, event: GpuProcessTable.RowSelected) -> None:
        """Enter on a process opens its screen."""
        event.stop()
        if event.key.isdigit():
            self.app.push_screen(ProcessScreen(self.host, int(event.key), context=self.ctx))
