"""Host detail: time series (aggregate or per GPU), per-GPU table, the host's jobs, the Profile panel."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from rich.text import Text
from textual import events
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.containers import Grid, Vertical, VerticalScroll
from textual.errors import NoWidget
from textual.geometry import Region
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer, Static

from gpulens.core.units import duration, window_name
from gpulens.tui.context import ScreenContext
from gpulens.tui.messages import OpenJob
from gpulens.tui.profiling import PROFILE_BINDINGS, Profiling
from gpulens.tui.screens._plots import (
    HOST_PLOTS,
    SeriesFeed,
    absent_reason,
    configure_plots,
    host_plot,
    plot_rows,
)
from gpulens.tui.screens.gpu import GpuScreen
from gpulens.tui.screens.profiled import ProfiledScreen
from gpulens.tui.widgets.gpu_table import GpuTable
from gpulens.tui.widgets.header import AppHeader
from gpulens.tui.widgets.job_table import JobTable
from gpulens.tui.widgets.panel import CustomPanel
from gpulens.tui.widgets.plot import TimeSeriesPlot
from gpulens.tui.widgets.profile_panel import ProfilePanel
from gpulens.tui.widgets.thresholds import (
    CRIT,
    LOW,
    MARKS,
    STYLES,
    WARN,
    alert_level,
    alert_text,
    explain,
)


def legend(alerts: tuple[str, ...]) -> Text:
    """The markers, then each alert of this host in words (``▽ IDLE-HELD 4: 4 GPUs hold ...``)."""
    text = Text()
    for lvl, what in ((CRIT, "critical"), (WARN, "warning"), (LOW, "held but idle")):
        text.append(f"{MARKS[lvl]} ", STYLES[lvl])
        text.append(f"{what}   ", "dim")
    for code in alerts:
        text.append("\n")
        text.append(alert_text(code), STYLES[alert_level(code)])
        text.append(explain(code)[len(code):], "dim")
    return text


class HostScreen(ProfiledScreen):
    """One host.

    | key | action |
    | --- | --- |
    | enter | open the GPU or job under the cursor |
    | g | GPU plots: aggregate / one line per GPU |
    | f | profile the host's job processes (flame graph) |
    | d | quick look: one py-spy dump of each local process (flame graph) |
    | o | says how to open the profiler (it traces a job: open the job first) |
    | P | every process of the host, not only the jobs' (``:ps HOST``) |
    | esc | back |
    """

    SHOWS_ALERTS = True
    """Its tables show alert codes: ``?`` explains each (help.alert_rows)."""
    SHOWS_LEVELS = True
    """Its values are marked past the thresholds: ``?`` says where (help.level_rows)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("g", "per_gpu", "Per GPU", tooltip="GPU plots: aggregate / one line per GPU"),
        Binding("f", "profile", "Profile"),
        Binding("d", "quick_look", "Quick look", tooltip="one py-spy dump of each local process"),
        *PROFILE_BINDINGS,
        Binding("o", "profiler_hint", "Open Profiler", show=False),
        Binding("P", "processes", "Processes", tooltip="every process of the host (:ps), not only jobs'"),
    ]

    def __init__(self, host: str, *, context: ScreenContext | None = None) -> None:
        super().__init__(context=context)
        self.host = host
        self.crumb = host
        self.per_gpu = False
        """GPU plots draw one band per GPU (``g``) instead of the host's aggregate."""
        self._has_gpus = True
        """The host reports GPUs (else ``g`` is not offered)."""
        self._seen: tuple[object, ...] = ()
        self.feed = SeriesFeed()
        """The plots' aligned columns: per tick only the newest is read."""
        self._plots: list[tuple[TimeSeriesPlot, bool]] = []
        self.profiling = Profiling(self, self.profile_pids, self.remote_profile_pids,
                                   lambda: self.host if self.is_local(self.host) else None)

    def compose(self) -> ComposeResult:
        """Header, plots, custom panels, GPU table, jobs, Profile slot."""
        yield AppHeader()
        with VerticalScroll(id="body"):
            yield Static("", id="host-status")
            yield from self.compose_plots(HOST_PLOTS)
            # Their own container, so their own clip: a frame that repaints plot lines only
            # leaves them out (Textual re-renders every widget whose clip meets what changed).
            with Vertical(id="below-plots"):
                yield Static("GPUs · now: the newest sample (enter: GPU detail)", classes="section")
                yield GpuTable(id="gpus")
                yield Static("", id="legend")
                yield Static("Jobs on this host · util: mean over the window; GPU memory: now", classes="section")
                yield JobTable(id="host-jobs")
                yield ProfilePanel(self.profiling.count(), id="profile")
        yield Footer()

    def action_processes(self) -> None:
        """``P``: the host's process table."""
        from gpulens.tui.screens.processes import ProcessesView

        self.app.push_screen(ProcessesView(self.host, context=self.ctx))

    def on_mount(self) -> None:
        """First draw; focus the body so the keys work at once."""
        configure_plots(self, HOST_PLOTS, self.ctx.cfg)
        self.query_one(GpuTable).thresholds = self.ctx.cfg.thresholds
        self.query_one("#legend", Static).styles.padding = (0, 1)
        if self.profiling.readonly:
            panel = self.query_one(ProfilePanel)
            panel.set_state(ProfilePanel.idle_text(0, self.profiling.refusal))
            panel.set_note("")
        body = self.query_one("#body")
        body.focus()
        self.watch(body, "scroll_y", self._scrolled, init=False)
        self.refresh_data(force=True)
        self.profiling.resume()  # a sampling still running, or finished while this host was closed

    def on_resize(self, event: events.Resize) -> None:
        """Narrow layout, and plots as tall as the terminal allows."""
        super().on_resize(event)
        self._layout(event.size.width, event.size.height)
        self.draw_tables(every=True)
        self.call_after_refresh(self.draw_plots)

    def _layout(self, width: int, height: int) -> None:
        sample = self.ctx.store.latest(self.host)
        gpus = len(sample.gpus) if sample else 0
        jobs = len(sample.jobs) if sample else 0
        reserved = 12 + min(20, gpus + 1) + min(20, jobs + 1) + self.left_out_lines(width)
        least = min(gpus, 16) + 4 if self.per_gpu else 0  # a band per GPU, summary, axis, border
        plot_rows(self.query_one("#plots", Grid), self.shown_plots(HOST_PLOTS), height, reserved, width, least)

    def profile_pids(self) -> list[int]:
        """The pids of every job process on this host, when it is this machine."""
        sample = self.ctx.store.latest(self.host)
        if sample is None or not self.is_local(self.host):
            return []
        return sorted(j.pid for j in sample.jobs)

    def remote_profile_pids(self) -> dict[str, list[int]]:
        """This host's job pids, when it is another machine (its agent samples them)."""
        sample = self.ctx.store.latest(self.host)
        if sample is None or self.is_local(self.host) or not sample.jobs:
            return {}
        return {self.host: sorted(j.pid for j in sample.jobs)}

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """``--readonly`` (and a replay) removes profiling and traces; ``g`` needs GPUs to draw one by one."""
        if action == "per_gpu":
            return self._has_gpus
        return self.profiling.allows(action)

    def action_profiler_hint(self) -> None:
        """``o`` traces a job: say to open one first, or that no job on this host polls Kineto."""
        from gpulens.tui.screens.profiler_rows import host_hint

        sample = self.ctx.store.latest(self.host)
        service = self.ctx.trace_service if self.is_local(self.host) else None
        local = service.polling_pids() if service is not None else set()
        jobs = {j.job_key or j.pid for j in (sample.jobs if sample else ()) if j.kineto_polling or j.pid in local}
        self.notify(host_hint(len(jobs)), timeout=8)

    def action_per_gpu(self) -> None:
        """GPU plots: aggregate / one band per GPU."""
        self.per_gpu = not self.per_gpu
        self._layout(self.size.width, self.size.height)
        self.notify("GPU plots: one line per GPU" if self.per_gpu else "GPU plots: the host's aggregate",
                    timeout=2)
        self.refresh_data(force=True)

    def commands(self) -> Iterable[SystemCommand]:
        """Per-GPU plots, profile and quick look."""
        yield SystemCommand("Per GPU / aggregate", "g: one line per GPU in the GPU plots", self.action_per_gpu)
        yield from self.profiling.commands()

    def refresh_data(self, force: bool = False) -> None:
        """Redraw when this host's data (or the window) changed."""
        super().refresh_data(force)
        ctx = self.ctx
        store, w = ctx.store, ctx.window_s
        seen = (store.host_version(self.host), w, int(store.now // store.resolution_s), self.per_gpu,
                int(ctx.clock()) if ctx.down_since(self.host) is not None else 0)
        if seen == self._seen and not force:
            return
        self._seen = seen
        has_gpus = bool(store.gpu_indices(self.host))
        if has_gpus != self._has_gpus:  # g comes or goes with the GPUs
            self._has_gpus = has_gpus
            self.refresh_bindings()
        up, reason = store.host_status(self.host)
        since = ctx.down_since(self.host)
        when = "" if since is None else (
            f" since {ctx.clock_text(since)} ({duration(ctx.clock() - since)} ago)")
        moved = self.update_static("#host-status", f"host down{when}: {reason} — figures below are the last received"
                             if not up else "", display=not up)
        reasons = [absent_reason(store, self.host, spec, w) for spec in HOST_PLOTS]
        if self.leave_out_plots(HOST_PLOTS, reasons):
            self._layout(self.size.width, self.size.height)
            moved = True
        self.draw_plots()
        self.draw_tables(every=force or moved)

    def draw_tables(self, every: bool = False) -> None:
        """The custom panels, GPU and job tables; those scrolled out of view wait until they are scrolled to.

        A widget repainted off screen makes Textual map every widget of the
        screen again (~1 ms, each tick); ``every``: draw them all (after a
        scroll, a resize or a layout change, when what is in view is not known).
        """
        ctx = self.ctx
        store, w = ctx.store, ctx.window_s
        view = self.region
        for i, panel in enumerate(ctx.cfg.panels):
            box = self.query_one(f"#panel-{i}", CustomPanel)
            if every or _in_view(self, box, view):
                box.show(ctx.panel_data(panel, host=self.host, job=None), window_name(w))
        gpus = self.query_one(GpuTable)
        if every or _in_view(self, gpus, view):
            gpus.placeholder = f"no GPUs: {store.unavailable(self.host, 'gpu.utilization_percent') or 'none reported'}"
            rows = gpus.row_count
            gpus.show(store.latest(self.host), store.recent_xids(self.host, w))
            every = every or gpus.row_count != rows  # the widgets below it moved
        alerts = store.host_row(self.host, w).alerts
        if self._shown.get("#legend") != alerts:
            self._shown["#legend"] = alerts
            self.query_one("#legend", Static).update(legend(alerts))
            every = True
        jobs = self.query_one(JobTable)
        if every or _in_view(self, jobs, view):
            jobs.placeholder = "no process on this host matches the job pattern"
            jobs.show([j for j in store.jobs(w) if self.host in j.hosts])

    def draw_plots(self) -> None:
        """Fill the plots on screen; those scrolled out of view wait until they are scrolled to.

        With 14 plots and about 5 in view at 160x45, this is most of the host screen's cost.
        """
        store, w = self.ctx.store, self.ctx.window_s
        indices = store.gpu_indices(self.host) if self.per_gpu else []
        view = self.region
        if not self._plots:
            self._plots = [(self.query_one(f"#{spec.id}", TimeSeriesPlot), spec.per_gpu) for spec in HOST_PLOTS]
        for spec, (plot, per_gpu) in zip(HOST_PLOTS, self._plots, strict=True):
            if not plot.display or not _in_view(self, plot, view):
                continue
            plot.set_data(host_plot(store, self.host, spec, w, plot.points, indices if per_gpu else (),
                                    feed=self.feed))

    def _scrolled(self, _: float) -> None:
        self.draw_tables(every=True)  # before the scrolled frame: rows that come into view are current
        self.call_after_refresh(self.draw_plots)

    def on_incremental_table_row_selected(self, event: JobTable.RowSelected) -> None:
        """Enter on a job opens it; on a GPU, the GPU screen."""
        event.stop()
        if isinstance(event.table, JobTable):
            self.post_message(OpenJob(event.key))
        elif isinstance(event.table, GpuTable) and event.key.isdigit():
            self.app.push_screen(GpuScreen(self.host, int(event.key), context=self.ctx))


def _in_view(screen: Screen[None], widget: Widget, view: Region) -> bool:
    """Whether ``widget`` overlaps the screen's ``view`` (True while either is not laid out yet)."""
    try:  # widget.region without looking its screen up through the DOM (each plot, each tick)
        region = screen.find_widget(widget).region
    except NoWidget:
        return True
    return not region.area or not view.area or region.overlaps(view)
