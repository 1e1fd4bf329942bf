"""The overview: headline statistics, per-host sparklines, per-GPU heatmap, host and job tables."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import ClassVar

from textual import events
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.widgets import Footer

from gpulens.tui.context import ScreenContext
from gpulens.tui.messages import OpenHost, OpenJob
from gpulens.tui.screens._finding import HOSTS_TITLE, JOBS_TITLE, FindingScreen, sort_bindings
from gpulens.tui.screens.gpu import GpuScreen
from gpulens.tui.widgets.header import AppHeader
from gpulens.tui.widgets.heatmap import HEAT_METRICS, GpuHeatmap
from gpulens.tui.widgets.host_table import HostTable
from gpulens.tui.widgets.job_table import JobTable
from gpulens.tui.widgets.sparklines import HostSparklines, TimeAxisLine
from gpulens.tui.widgets.stats import StatsBar


class OverviewScreen(FindingScreen):
    """What ``gpulens`` opens on.

    | key | action |
    | --- | --- |
    | enter | open the host or job under the cursor (on the heatmap: its GPU) |
    | tab | next panel: host table, job table, heatmap |
    | / | regex filter of every panel (``!re`` inverts) |
    | H G U S M P C N A / J T U H G L M R | sort the focused table by that column; again: reverse |
    | u a m w t | heatmap metric: util, SM activity, GPU memory, power, temperature |
    """

    SHOWS_ALERTS = True
    """Its tables show alert codes: ``?`` explains each (help.alert_rows)."""
    SHOWS_LEVELS = True
    """Its values are marked past the thresholds: ``?`` says where (help.level_rows)."""

    crumb = "Overview"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open", "Open", show=True),
        *sort_bindings(HostTable, JobTable),
        *[Binding(m.key, f"heat('{m.key}')", f"Heatmap {m.label}", show=False) for m in HEAT_METRICS],
    ]

    def __init__(self, *, context: ScreenContext | None = None) -> None:
        super().__init__(context=context)
        self._subtitles: dict[str, str] = {}
        """Box subtitles as last set (set again only when they change)."""
        self._axes: tuple[TimeAxisLine, ...] = ()
        """The time axes under the sparklines and the heatmap (each tick asks whether theirs changed)."""

    def compose(self) -> ComposeResult:
        """Header, stats, charts, tables, filter, footer."""
        store = self.ctx.store
        yield AppHeader()
        yield StatsBar(id="stats")
        spark, heat = HostSparklines(store, id="sparklines"), GpuHeatmap(store, id="heatmap")
        self._axes = (TimeAxisLine(spark.axis_text, id="sparklines-axis", classes="time-axis"),
                      TimeAxisLine(heat.axis_text, id="heatmap-axis", classes="time-axis"))
        with Horizontal(id="charts"):
            # The borders are the boxes': a line repainted inside a borderless widget costs less.
            with Vertical(id="sparklines-box"):
                yield spark
                yield self._axes[0]
            with Vertical(id="heatmap-box"):
                yield heat
                yield self._axes[1]
        with Horizontal(id="tables"):
            with Vertical(id="hosts-box"):
                yield HostTable(id="hosts")
            with Vertical(id="jobs-box"):
                yield JobTable(id="jobs")
        yield from self.filter_widgets()
        yield Footer()

    def on_resize(self, event: events.Resize) -> None:
        """Narrow layout; once it is laid out, the axes follow their charts' new widths (no tick needed)."""
        super().on_resize(event)
        self.call_after_refresh(self._repaint_axes)

    def _repaint_axes(self) -> None:
        for axis in self._axes:
            axis.refresh()

    def on_mount(self) -> None:
        """Titles and the first draw."""
        self.query_one("#sparklines-box").border_title = "GPU util · SM activity per host"
        self.query_one("#heatmap-box").border_title = "per-GPU heatmap"
        self.query_one("#hosts-box").border_title = HOSTS_TITLE
        self.query_one("#jobs-box").border_title = JOBS_TITLE
        super().on_mount()
        self.query_one(HostTable).focus()
        self.refresh_data(force=True)

    def refresh_data(self, force: bool = False) -> None:
        """Push the store's views, narrowed by the filter, into the widgets; each redraws only what changed."""
        try:
            self._refresh_widgets(force)
        except NoMatches:
            if not self.torn_down():
                raise

    def _refresh_widgets(self, force: bool) -> None:
        super().refresh_data(force)
        ctx = self.ctx
        store, w = ctx.store, ctx.window_s
        all_hosts = store.hosts()
        all_jobs = store.jobs(w)
        all_gpus = [(h, g) for h in all_hosts for g in store.gpu_indices(h)]
        sel = self.selection(all_hosts, all_jobs, all_gpus)
        hosts = list(sel.hosts)
        # The widgets add their own time stamp (Store.series_stamp): a row changes when its host
        # does or when a new column starts, not every second.
        versions = {h: (store.host_version(h), w) for h in hosts}
        stats = store.fleet(w, hosts) if self.finder.active else store.fleet(w)
        if self.finder.active:  # the jobs the table below shows
            stats = replace(stats, jobs=len(sel.jobs))
        self.query_one(StatsBar).set_stats(stats)
        spark = self.query_one(HostSparklines)
        spark.window_s = w
        spark.store = store  # a replay seek hands the app a new store
        spark.set_rows(hosts, versions)
        heat = self.query_one(GpuHeatmap)
        heat.window_s = w
        heat.store = store
        rows = list(sel.gpus)
        heat.set_rows(rows, {r: versions[r[0]] for r in rows})
        if not rows:
            reason = next((r for h in hosts if (r := store.unavailable(h, "gpu.utilization_percent"))),
                          "none reported yet")
            heat.placeholder = (f"no GPU matches the filter '{self.finder.text}'" if all_gpus
                                else f"no GPUs: {reason}")  # repaints only when it changed
        for axis in self._axes:
            axis.refresh_text()  # only a new window or width changes the labels
        f = self.finder.text
        host_table = self.query_one(HostTable)
        host_table.down_at = {h: ctx.clock_text(t) for h, t in ctx.down_hosts().items()}
        host_table.placeholder = f"no host matches the filter '{f}'" if all_hosts else ""
        host_table.show(hosts, lambda h: store.host_row(h, w))
        jobs = self.query_one(JobTable)
        if all_jobs:
            jobs.placeholder = f"no job matches the filter '{f}' (Esc clears it)"
        else:
            jobs.placeholder = "no process matches the job pattern (--pattern)" if all_hosts else ""
        jobs.show([j for j in all_jobs if j.key in sel.jobs])
        note = self.filter_note()
        self.subtitle("#hosts-box", host_table.sort_label() + note + host_table.sort_hint())
        self.subtitle("#jobs-box", jobs.sort_label() + note + jobs.sort_hint())
        self.subtitle("#sparklines-box", f"{len(hosts)} of {len(all_hosts)} hosts{note}" if self.finder.active else "")

    def subtitle(self, selector: str, text: str) -> None:
        """Set a border subtitle only when it changes (each assignment repaints the whole box)."""
        if self._subtitles.get(selector) != text:
            self._subtitles[selector] = text
            self.query_one(selector).border_subtitle = text

    def _table(self) -> HostTable | JobTable:
        jobs = self.query_one(JobTable)
        return jobs if jobs.has_focus else self.query_one(HostTable)

    def action_open(self) -> None:
        """Open the row under the cursor of the focused table."""
        table = self._table()
        key = table.selected_key()
        if key is not None:
            self._open(table, key)

    def on_incremental_table_row_selected(self, event: HostTable.RowSelected) -> None:
        """Enter (or a click) on a row opens its detail screen."""
        event.stop()
        if isinstance(event.table, (HostTable, JobTable)):
            self._open(event.table, event.key)

    def on_lazy_lines_row_clicked(self, event: GpuHeatmap.RowClicked) -> None:
        """A click on a sparkline or heatmap row opens its host."""
        key = event.key
        self.post_message(OpenHost(str(key[0] if isinstance(key, tuple) else key)))

    def on_lazy_lines_row_chosen(self, event: GpuHeatmap.RowChosen) -> None:
        """Enter on the heatmap's cursor row opens that GPU's screen, over its host's (the route from the host
        table: the same breadcrumbs, and Esc goes to the host, as from there)."""
        event.stop()
        key = event.key
        if isinstance(key, tuple):
            from gpulens.tui.screens.host import HostScreen

            host, gpu = key
            self.app.push_screen(HostScreen(str(host), context=self.ctx))
            self.app.push_screen(GpuScreen(str(host), int(gpu), context=self.ctx))

    def _open(self, table: HostTable | JobTable, key: str) -> None:
        self.post_message(OpenJob(key) if isinstance(table, JobTable) else OpenHost(key))

    def commands(self) -> Iterable[SystemCommand]:
        """Filter, reverse; heatmap metrics come from the app."""
        yield from super().commands()

    def action_heat(self, key: str) -> None:
        """Switch the heatmap's metric."""
        heat = self.query_one(GpuHeatmap)
        heat.set_metric(key)
        self.query_one("#heatmap-box").border_title = f"per-GPU heatmap: {heat.metric.label}"
