"""Job detail: the job's GPUs and hosts over its lifetime, its processes, actions."""

from __future__ import annotations

import importlib.util
from typing import ClassVar

from gpulens.collectors.store_views import JobView
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid, VerticalScroll
from textual.widgets import Footer, Static

from ..format import duration, pct, size, window_name
from ..widgets.header import AppHeader
from ..widgets.panel import CustomPanel
from ..widgets.plot import TimeSeriesPlot
from ..widgets.process_table import ProcessTable
from ..widgets.profile_panel import ProfilePanel
from ._plots import JOB_PLOTS, add_series, mean_series
from .base import DataScreen


class JobScreen(DataScreen):
    """One job (joined over hosts by its job key).

    | key | action |
    | --- | --- |
    | f | profile the job's processes (flame graph) |
    | o | Open Profiler (only when its processes poll the Kineto endpoint) |
    | esc | back |
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("f", "profile", "Profile"),
        Binding("o", "open_profiler", "Open Profiler"),
    ]

    def __init__(self, key: str) -> None:
        super().__init__()
        self.key = key
        self.crumb = f"job {key}"
        self.view: JobView | None = None
        self._seen: tuple[object, ...] = ()
        self._polling: tuple[int, ...] = ()

    def compose(self) -> ComposeResult:
        """Header, job line, plots, custom panels, processes, Profile slot."""
        yield AppHeader()
        with VerticalScroll(id="body"):
            yield Static("", id="job-info")
            with Grid(id="plots", classes="plots"):
                for spec in JOB_PLOTS:
                    yield TimeSeriesPlot(spec.title, spec.fmt, lo=spec.lo, hi=spec.hi, id=spec.id)
            if self.gapp.cfg.panels:
                with Grid(id="custom", classes="plots"):
                    for i, panel in enumerate(self.gapp.cfg.panels):
                        yield CustomPanel(panel, id=f"panel-{i}")
            yield Static("Processes", classes="section")
            yield ProcessTable(id="processes")
            yield Static("", id="profiler-action")
            yield ProfilePanel(0, id="profile")
        yield Footer()

    def on_mount(self) -> None:
        """First draw."""
        self.query_one("#body").focus()
        self.refresh_data(force=True)

    def profile_pids(self) -> list[int]:
        """The job's pids on this machine."""
        if self.view is None:
            return []
        return [p.pid for h, p in self.view.processes if self.is_local(h)]

    def polling_pids(self) -> tuple[int, ...]:
        """The job's processes that poll the Kineto endpoint (empty without a service)."""
        service = self.gapp.trace_service
        if service is None or self.view is None:
            return ()
        try:
            polling = service.polling_pids()
        except Exception:  # a broken service hides the action rather than the screen
            return ()
        return tuple(sorted(set(self.profile_pids()) & set(polling)))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Show "Open Profiler" only when the job's processes poll the endpoint."""
        if action == "open_profiler":
            return bool(self._polling)
        return True

    def refresh_data(self, force: bool = False) -> None:
        """Redraw when the job's data changed."""
        super().refresh_data(force)
        store = self.gapp.store
        view = store.job(self.key, self.gapp.window_s)
        if view is None:
            info = self.query_one("#job-info", Static)
            info.update(Text(f"job {self.key} is not running (last seen data kept below)", style="bold"))
            return
        if self.view is None:
            local = [p for h, p in view.processes if self.is_local(h)]
            self.query_one(ProfilePanel).set_state(ProfilePanel.idle_text(len(local)))
        self.view = view
        w = min(3600.0, max(60.0, view.runtime_s))
        seen = (tuple(store.host_version(h) for h in view.hosts), w)
        polling = self.polling_pids()
        if polling != self._polling:
            self._polling = polling
            self.refresh_bindings()
        action = self.query_one("#profiler-action", Static)
        action.display = bool(polling)
        action.update(f"o: Open Profiler — {len(polling)} process(es) poll the Kineto endpoint")
        if seen == self._seen and not force:
            return
        self._seen = seen
        self._info(view)
        for spec in JOB_PLOTS:
            plot = self.query_one(f"#{spec.id}", TimeSeriesPlot)
            values = self._series(spec.metrics[0], w, plot.points, view)
            for m in spec.metrics[1:]:
                values = add_series(values, self._series(m, w, plot.points, view))
            reason = None if view.gpus or not spec.id.startswith("job-") else "the job holds no GPU memory"
            if reason is None:
                reason = store.unavailable(view.hosts[0], spec.metrics[0])
            plot.set_data(values, reason, f"lifetime {duration(view.runtime_s)}, last {window_name(w)}")
        for i, panel in enumerate(self.gapp.cfg.panels):
            self.query_one(f"#panel-{i}", CustomPanel).show(
                self.gapp.panel_data(panel, host=None, job=self.key), window_name(w))
        self.query_one(ProcessTable).show(view.processes)

    def _series(self, metric: str, w: float, n: int, view: JobView) -> list[float]:
        store = self.gapp.store
        if metric.startswith("job."):
            series: list[float] = store.job_series(self.key, metric, w, n)
            return series
        if metric.startswith("gpu."):
            cols = [store.series(h, metric, w, n, gpu=int(g)) for h, g in view.gpus if g.isdigit()]
            return mean_series(cols, n)
        cols = [store.series(h, metric, w, n) for h in view.hosts]
        out: list[float] = cols[0]
        for c in cols[1:]:
            out = add_series(out, c)
        return out

    def _info(self, v: JobView) -> None:
        hosts = ", ".join(v.hosts[:6]) + (f" (+{len(v.hosts) - 6})" if len(v.hosts) > 6 else "")
        text = Text()
        for label, value in (("job", v.key), ("user", v.user), ("tree ID", v.tree_id),
                             ("hosts", hosts), ("GPUs", str(len(v.gpus))),
                             ("util", pct(v.util_percent)), ("GPU mem", size(v.gpu_mem_bytes)),
                             ("runtime", duration(v.runtime_s)), ("command", v.cmdline)):
            text.append(f"{label} ", style="dim")
            text.append(f"{value}   ", style="bold")
        self.query_one("#job-info", Static).update(text)

    def action_open_profiler(self) -> None:
        """Open the PyTorch profiler screen for the polling processes."""
        if not self._polling or self.view is None:
            return
        if importlib.util.find_spec("gpulens.tui.screens.profiler") is None:
            self.notify("the profiler screen is not available", severity="warning")
            return
        from gpulens.tui.screens.profiler import ProfilerScreen

        host = next(h for h, p in self.view.processes if p.pid in self._polling and self.is_local(h))
        self.app.push_screen(ProfilerScreen(service=self.gapp.trace_service, host=host,
                                            pids=list(self._polling)))
