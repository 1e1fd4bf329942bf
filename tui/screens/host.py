"""Host detail: time series, per-GPU table, the host's jobs, the Profile panel."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Footer, Static

from gpulens.core.units import duration, window_name
from gpulens.tui.context import ScreenContext
from gpulens.tui.messages import OpenJob
from gpulens.tui.profiling import Profiling
from gpulens.tui.screens._plots import HOST_PLOTS, add_series
from gpulens.tui.screens.base import DataScreen
from gpulens.tui.widgets.gpu_table import GpuTable
from gpulens.tui.widgets.header import AppHeader
from gpulens.tui.widgets.job_table import JobTable
from gpulens.tui.widgets.panel import CustomPanel
from gpulens.tui.widgets.plot import TimeSeriesPlot
from gpulens.tui.widgets.profile_panel import ProfilePanel


class HostScreen(DataScreen):
    """One host.

    | key | action |
    | --- | --- |
    | enter | open the job under the cursor |
    | f | profile the host's job processes (flame graph) |
    | d | quick look: one py-spy dump of each local process (flame graph) |
    | esc | back |
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("f", "profile", "Profile"),
        Binding("d", "quick_look", "Quick look", tooltip="one py-spy dump of each local process"),
    ]

    def __init__(self, host: str, *, context: ScreenContext | None = None) -> None:
        super().__init__(context=context)
        self.host = host
        self.crumb = host
        self._seen: tuple[object, ...] = ()
        self.profiling = Profiling(self, self.profile_pids, self.remote_profile_pids)

    def compose(self) -> ComposeResult:
        """Header, plots, custom panels, GPU table, jobs, Profile slot."""
        yield AppHeader()
        with VerticalScroll(id="body"):
            yield Static("", id="host-status")
            yield from self.compose_plots(HOST_PLOTS)
            yield Static("GPUs", classes="section")
            yield GpuTable(id="gpus")
            yield Static("Jobs on this host", classes="section")
            yield JobTable(id="host-jobs")
            yield ProfilePanel(self.profiling.count(), id="profile")
        yield Footer()

    def on_mount(self) -> None:
        """First draw; focus the job table so Enter opens a job."""
        self.query_one("#body").focus()
        self.refresh_data(force=True)

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

    def action_profile(self) -> None:
        """Sample the host's job processes with py-spy and open a flame graph."""
        self.profiling.profile()

    def action_quick_look(self) -> None:
        """One py-spy dump of each local job process, as a flame graph."""
        self.profiling.quick_look()

    def commands(self) -> Iterable[SystemCommand]:
        """Profile and quick look."""
        return self.profiling.commands()

    def refresh_data(self, force: bool = False) -> None:
        """Redraw when this host's data (or the window) changed."""
        super().refresh_data(force)
        ctx = self.ctx
        store, w = ctx.store, ctx.window_s
        seen = (store.host_version(self.host), w, int(store.now // store.resolution_s),
                int(ctx.clock()) if ctx.down_since(self.host) is not None else 0)
        if seen == self._seen and not force:
            return
        self._seen = seen
        up, reason = store.host_status(self.host)
        status = self.query_one("#host-status", Static)
        status.display = not up
        since = ctx.down_since(self.host)
        when = "" if since is None else (
            f" since {ctx.clock_text(since)} ({duration(ctx.clock() - since)} ago)")
        status.update(f"host down{when}: {reason} — figures below are the last received" if not up else "")
        for spec in HOST_PLOTS:
            plot = self.query_one(f"#{spec.id}", TimeSeriesPlot)
            values = store.series(self.host, spec.metrics[0], w, plot.points)
            for m in spec.metrics[1:]:
                values = add_series(values, store.series(self.host, m, w, plot.points))
            plot.set_data(values, store.unavailable(self.host, spec.metrics[0]), window_name(w))
        for i, panel in enumerate(ctx.cfg.panels):
            self.query_one(f"#panel-{i}", CustomPanel).show(
                ctx.panel_data(panel, host=self.host, job=None), window_name(w))
        gpus = self.query_one(GpuTable)
        gpus.placeholder = f"no GPUs: {store.unavailable(self.host, 'gpu.utilization_percent') or 'none reported'}"
        gpus.show(store.latest(self.host))
        jobs = self.query_one(JobTable)
        jobs.placeholder = "no process on this host matches the job pattern"
        jobs.show([j for j in store.jobs(w) if self.host in j.hosts])

    def on_incremental_table_row_selected(self, event: JobTable.RowSelected) -> None:
        """Enter on a job opens it."""
        event.stop()
        if isinstance(event.table, JobTable):
            self.post_message(OpenJob(event.key))
