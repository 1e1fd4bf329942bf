"""The overview: headline statistics, per-host sparklines, per-GPU heatmap, host and job tables."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from textual import events
from textual.actions import SkipAction
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Footer, Input

from gpulens.tui.messages import OpenHost, OpenJob
from gpulens.tui.screens.base import DataScreen
from gpulens.tui.widgets.header import AppHeader
from gpulens.tui.widgets.heatmap import HEAT_METRICS, GpuHeatmap
from gpulens.tui.widgets.host_table import HostTable
from gpulens.tui.widgets.job_table import JobTable
from gpulens.tui.widgets.sparklines import HostSparklines
from gpulens.tui.widgets.stats import StatsBar


class FilterInput(Input):
    """The ``/`` line. Keys that reach it after Enter hid it (typed fast, queued
    behind the Enter) go on to the table that now has focus."""

    async def _on_key(self, event: events.Key) -> None:
        target = self.screen.focused
        if not self.display and target is not None and target is not self:
            event.stop()
            event.prevent_default()
            target._forward_event(events.Key(event.key, event.character))
            return
        if event.key == "enter":
            # Here, not through the binding (which runs only once the key has
            # bubbled up to the app, after the keys queued behind it).
            event.stop()
            event.prevent_default()
            self.display = False
            self.screen.set_focus(self.screen.query_one(HostTable))
            self.post_message(self.Submitted(self, self.value, None))
            return
        await super()._on_key(event)


class OverviewScreen(DataScreen):
    """What ``gpulens`` opens on.

    | key | action |
    | --- | --- |
    | enter | open the host or job under the cursor |
    | tab | switch between the host and job tables |
    | / | filter both tables |
    | s / r | sort by the next column / reverse |
    | u a g w t | heatmap metric: util, SM activity, GPU memory, power, temperature |
    """

    crumb = "Overview"
    BINDINGS: ClassVar[list[BindingType]] = [
        # Priority: '/' runs when the key arrives, so the keys typed right after
        # it go into the filter line, not to the table.
        Binding("enter", "open", "Open", show=True),
        Binding("slash", "filter", "Filter", priority=True),
        Binding("s", "sort", "Sort"),
        Binding("r", "reverse", "Reverse", show=False),
        *[Binding(m.key, f"heat('{m.key}')", f"Heatmap {m.label}", show=False) for m in HEAT_METRICS],
    ]

    def compose(self) -> ComposeResult:
        """Header, stats, charts, tables, filter, footer."""
        store = self.ctx.store
        yield AppHeader()
        yield StatsBar(id="stats")
        with Horizontal(id="charts"):
            yield HostSparklines(store, id="sparklines")
            yield GpuHeatmap(store, id="heatmap")
        with Horizontal(id="tables"):
            with Vertical(id="hosts-box"):
                yield HostTable(id="hosts")
            with Vertical(id="jobs-box"):
                yield JobTable(id="jobs")
        yield FilterInput(placeholder="filter hosts and jobs (Enter keeps, Esc clears)", id="filter")
        yield Footer()

    def on_mount(self) -> None:
        """Titles and the first draw."""
        self.query_one("#sparklines").border_title = "GPU util · SM activity per host"
        self.query_one("#heatmap").border_title = "per-GPU heatmap"
        self.query_one("#hosts-box").border_title = "Hosts"
        self.query_one("#jobs-box").border_title = "Jobs"
        self.query_one("#filter").display = False
        self.query_one(HostTable).focus()
        self.refresh_data(force=True)

    def refresh_data(self, force: bool = False) -> None:
        """Push the store's views into the widgets; each redraws only what changed."""
        super().refresh_data(force)
        ctx = self.ctx
        store, w = ctx.store, ctx.window_s
        hosts = store.hosts()
        now_fb = int(store.now // store.resolution_s)
        versions = {h: (store.host_version(h), now_fb, w) for h in hosts}
        self.query_one(StatsBar).set_stats(store.fleet(w))
        spark = self.query_one(HostSparklines)
        spark.window_s = w
        spark.set_rows(hosts, versions)
        heat = self.query_one(GpuHeatmap)
        heat.window_s = w
        rows = [(h, g) for h in hosts for g in store.gpu_indices(h)]
        heat.set_rows(rows, {r: versions[r[0]] for r in rows})
        if not rows:
            reason = next((r for h in hosts if (r := store.unavailable(h, "gpu.utilization_percent"))),
                          "none reported yet")
            heat.placeholder = f"no GPUs: {reason}"
            heat.refresh()
        host_table = self.query_one(HostTable)
        host_table.down_at = {h: ctx.clock_text(t) for h, t in ctx.down_hosts().items()}
        host_table.placeholder = f"no host matches the filter '{host_table.filter_text}'" if hosts else ""
        host_table.show(hosts, lambda h: store.host_row(h, w))
        jobs = self.query_one(JobTable)
        all_jobs = store.jobs(w)
        if all_jobs:
            jobs.placeholder = f"no job matches the filter '{jobs.filter_text}' (Esc clears it)"
        else:
            jobs.placeholder = "no process matches the job pattern (--pattern)" if hosts else ""
        jobs.show(all_jobs)
        self.query_one("#hosts-box").border_subtitle = self._sort_label(self.query_one(HostTable))
        self.query_one("#jobs-box").border_subtitle = self._sort_label(self.query_one(JobTable))

    @staticmethod
    def _sort_label(table: HostTable | JobTable) -> str:
        arrow = "↓" if table.sort_reverse else "↑"
        f = f" · filter '{table.filter_text}'" if table.filter_text else ""
        return f"sort {table.COLUMNS[table.sort_index][1]} {arrow}{f}"

    def _table(self) -> HostTable | JobTable:
        jobs = self.query_one(JobTable)
        return jobs if jobs.has_focus else self.query_one(HostTable)

    def _filtering(self) -> bool:
        return self.focused is self.query_one("#filter", Input)

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

    def _open(self, table: HostTable | JobTable, key: str) -> None:
        self.post_message(OpenJob(key) if isinstance(table, JobTable) else OpenHost(key))

    def action_filter(self) -> None:
        """Show the filter line."""
        box = self.query_one("#filter", Input)
        if self._filtering():
            raise SkipAction()  # a '/' typed in the filter
        box.display = True
        # At once, not via focus() (call_later): keys typed right after '/'
        # are already queued and would go to the table.
        self.set_focus(box)

    def on_input_changed(self, event: Input.Changed) -> None:
        """Filter as you type."""
        for table in (self.query_one(HostTable), self.query_one(JobTable)):
            table.filter_text = event.value
        self.refresh_data(force=True)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter in the filter line: keep the filter; back to the host table."""
        event.input.display = False
        self.set_focus(self.query_one(HostTable))  # at once: the next keys are for the table

    def go_back(self) -> bool:
        """Esc on the overview clears the filter (there is nothing to go back to)."""
        self.clear_filter()
        return True

    def commands(self) -> Iterable[SystemCommand]:
        """Filter, sort, reverse."""
        yield SystemCommand("Filter", "/: filter hosts and jobs", self.action_filter)
        yield SystemCommand("Sort", "s: sort the focused table by its next column", self.action_sort)
        yield SystemCommand("Reverse sort", "r: reverse the focused table", self.action_reverse)

    def clear_filter(self) -> bool:
        """Esc on the overview: drop the filter; True if there was one."""
        box = self.query_one("#filter", Input)
        had = bool(box.value) or box.display
        box.value = ""
        box.display = False
        self.set_focus(self.query_one(HostTable))
        return had

    def action_sort(self) -> None:
        """Sort the focused table by its next column."""
        label = self._table().cycle_sort()
        self.notify(f"sorted by {label}", timeout=1.5)
        self.refresh_data(force=True)

    def action_reverse(self) -> None:
        """Reverse the focused table's order."""
        self._table().reverse_sort()
        self.refresh_data(force=True)

    def action_heat(self, key: str) -> None:
        """Switch the heatmap's metric."""
        heat = self.query_one(GpuHeatmap)
        heat.set_metric(key)
        self.query_one("#heatmap").border_title = f"per-GPU heatmap: {heat.metric.label}"
