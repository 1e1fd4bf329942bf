"""Job detail: the job's GPUs and hosts over the chosen window, its processes, actions."""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from typing import ClassVar

from rich.text import Text
from textual import events
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.containers import Grid, VerticalScroll
from textual.widgets import Footer, Static

from gpulens.core.errors import GpulensError
from gpulens.core.events import RequestSource
from gpulens.core.units import duration, pct, size, window_name
from gpulens.ipc.request_schema import TraceDiagnoseParams
from gpulens.sources.ask import ask
from gpulens.store.views import JobView, gpu_unreadable
from gpulens.tui.context import ScreenContext, requester
from gpulens.tui.messages import OpenProfiler
from gpulens.tui.profiling import PROFILE_BINDINGS, Profiling
from gpulens.tui.screens._plots import JOB_PLOTS, configure_plots, plot_rows
from gpulens.tui.screens.job_data import (
    JobFigures,
    local_host,
    local_pids,
    remote_pids,
    shown_command,
)
from gpulens.tui.screens.process import ProcessScreen
from gpulens.tui.screens.profiled import ProfiledScreen
from gpulens.tui.screens.profiler_rows import LocalDiagnosis
from gpulens.tui.widgets.fields import NBSP, FieldsLine
from gpulens.tui.widgets.header import AppHeader
from gpulens.tui.widgets.panel import CustomPanel
from gpulens.tui.widgets.plot import TimeSeriesPlot, plot_data
from gpulens.tui.widgets.process_table import ProcessTable
from gpulens.tui.widgets.profile_panel import ProfilePanel
from gpulens.tui.workers import call_in_app, wait


class JobScreen(ProfiledScreen):
    """One job (joined over hosts by its job key).

    | key | action |
    | --- | --- |
    | enter | to the process table; there, open the process under the cursor |
    | f | profile the job's processes (flame graph) |
    | d | quick look: one py-spy dump of each local process (flame graph) |
    | o | Open Profiler (only when its processes poll the Kineto endpoint) |
    | esc | back |
    """

    HELP_NOTES: ClassVar[tuple[tuple[str, str], ...]] = (
        ("min≥ max≤", "bounds, not exact: a plot joined over several GPUs or hosts takes the min and max of "
                      "any one of them (a mean), or adds them up (a sum: memory, CPU, network)"),
        ("N of M … read", "the newest figure covers only N of the job's M GPUs or hosts (the others are n/a now)"),
    )
    """What the plots' summaries say beyond now / avg / min / max (``?`` lists them)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("f", "profile", "Profile"),
        Binding("d", "quick_look", "Quick look", tooltip="one py-spy dump of each local process"),
        *PROFILE_BINDINGS,
        Binding("o", "open_profiler", "Open Profiler"),
        Binding("o", "profiler_hint", "Open Profiler", show=False),  # the other o: says why not
        Binding("enter", "to_processes", "Go to the processes (again: open one)", show=False),
    ]

    def __init__(self, key: str, *, context: ScreenContext | None = None) -> None:
        super().__init__(context=context)
        self.key = key
        self.crumb = f"job {key}"
        self.view: JobView | None = None
        self._seen: tuple[object, ...] = ()
        self._polling: tuple[int, ...] = ()
        self._polling_host: str | None = None  # set when the polling processes run on another host
        self._why = LocalDiagnosis()
        self._trace_why = ""
        """Why the job's processes cannot be traced, as the profiler line last said ("" when it said nothing)."""
        self._remote_why: tuple[float, str | None] | None = None  # (asked at, the agent's reason)
        self.profiling = Profiling(self, self.profile_pids, self.remote_profile_pids,
                                   lambda: local_host(self.view, self.is_local))
        self._plots: list[TimeSeriesPlot] = []
        self.figures = JobFigures(key)
        """The plots' window figures and aligned columns, joined over the job's hosts and GPUs."""

    def compose(self) -> ComposeResult:
        """Header, job line, plots, custom panels, processes, Profile slot."""
        yield AppHeader()
        with VerticalScroll(id="body"):
            yield Static("", id="job-down")
            yield FieldsLine(id="job-info")
            yield from self.compose_plots(JOB_PLOTS)
            yield Static("Processes · now: the newest sample (enter: process detail)", classes="section")
            yield ProcessTable(id="processes")
            yield Static("", id="profiler-action")
            yield ProfilePanel(0, id="profile")
        yield Footer()

    def on_mount(self) -> None:
        """First draw."""
        configure_plots(self, JOB_PLOTS, self.ctx.cfg)
        self.query_one("#body").focus()
        self.refresh_data(force=True)
        self.profiling.resume()  # a sampling still running, or finished while this job was closed

    def on_resize(self, event: events.Resize) -> None:
        """Narrow layout; plots as tall as the terminal allows."""
        super().on_resize(event)
        self._layout_plots(event.size.width, event.size.height)

    def _layout_plots(self, width: int, height: int) -> None:
        procs = len(self.view.processes) if self.view is not None else 4
        others = 12 + self.left_out_lines(width)
        plots = plot_rows(self.query_one("#plots", Grid), self.shown_plots(JOB_PLOTS), height,
                          others + min(20, procs + 1), width)
        # The process table takes what the plots leave (20 rows at least): no blank screen below it.
        table = self.query_one(ProcessTable)
        room = max(20, height - plots - others)
        if table.styles.max_height is None or table.styles.max_height.value != room:
            table.styles.max_height = room

    def action_to_processes(self) -> None:
        """Enter outside the process table: to its cursor row (the next Enter opens that process)."""
        table = self.query_one(ProcessTable)
        table.focus()
        table.scroll_visible(animate=False)

    def on_incremental_table_row_selected(self, event: ProcessTable.RowSelected) -> None:
        """Enter on a process opens the process screen."""
        event.stop()
        host, _, pid = event.key.rpartition(":")
        if pid.isdigit():
            self.app.push_screen(ProcessScreen(host, int(pid), context=self.ctx))

    def profile_pids(self) -> list[int]:
        """The job's pids on this machine."""
        return local_pids(self.view, self.is_local)

    def remote_profile_pids(self) -> dict[str, list[int]]:
        """The job's pids on other hosts, by host (their agents sample them)."""
        return remote_pids(self.view, self.is_local)

    def commands(self) -> Iterable[SystemCommand]:
        """Profile, quick look and, while offered, Open Profiler."""
        yield from self.profiling.commands()
        if self.check_action("open_profiler", ()):
            yield SystemCommand("Open Profiler", "o: PyTorch traces of this job (Kineto)", self.action_open_profiler)

    def polling_pids(self) -> tuple[int, ...]:
        """The job's processes that poll the Kineto endpoint (empty without a service)."""
        service = self.ctx.trace_service
        if service is None or self.view is None:
            return ()
        try:
            polling = service.polling_pids()
        except (GpulensError, OSError):  # a broken service hides the action rather than the screen
            return ()
        return tuple(sorted(set(self.profile_pids()) & set(polling)))

    def remote_polling(self) -> tuple[str, tuple[int, ...]] | None:
        """The first other host whose job processes poll its agent's Kineto endpoint, and their pids.

        None when the source cannot send requests to agents (replay, demo, Prometheus).
        """
        if self.view is None or requester(self.ctx) is None:
            return None
        by_host: dict[str, list[int]] = {}
        for h, p in self.view.processes:
            if p.kineto_polling and not self.is_local(h):
                by_host.setdefault(h, []).append(p.pid)
        if not by_host:
            return None
        host = min(by_host)
        return host, tuple(sorted(set(by_host[host])))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """"Open Profiler" when the job's processes poll the endpoint, else the o that says why; none read-only."""
        if not self.profiling.allows(action):
            return False
        if action in ("open_profiler", "profiler_hint"):
            return bool(self._polling) == (action == "open_profiler")
        return True

    def action_profiler_hint(self) -> None:
        """``o`` while no process of the job polls Kineto: why, and how to make it poll."""
        why = f" ({self._trace_why})" if self._trace_why else ""
        self.notify(f"no process of this job polls Kineto{why}: start it with KINETO_USE_DAEMON=1 "
                    "(and the agent's KINETO_IPC_SOCKET_DIR), then press o here", timeout=8)

    def refresh_data(self, force: bool = False) -> None:
        """Redraw when the job's data changed."""
        super().refresh_data(force)
        ctx = self.ctx
        store = ctx.store
        view = store.job(self.key, ctx.window_s)
        if view is None:
            self._show_ended()
            return
        first = self.view is None
        self.view = view
        if first:
            profile = self.query_one(ProfilePanel)
            profile.set_state(ProfilePanel.idle_text(self.profiling.count(), self.profiling.refusal))
            if self.profiling.readonly:
                profile.set_note("")
        w = ctx.window_s
        down = self._show_down(view.hosts)
        seen = (tuple(store.host_version(h) for h in view.hosts), w, down)
        self._show_profiler_line(self._update_polling())
        if seen == self._seen and not force:
            return
        self._seen = seen
        self._info(view)
        self._draw_plots(view, w)
        for i, panel in enumerate(ctx.cfg.panels):
            self.query_one(f"#panel-{i}", CustomPanel).show(
                ctx.panel_data(panel, host=None, job=self.key), window_name(w))
        no_gpu = frozenset(h for h in view.hosts if gpu_unreadable(store.latest(h)) is not None)
        self.query_one(ProcessTable).show(view.processes, no_gpu)  # repaints the rows whose text changed

    def _show_ended(self) -> None:
        """The job is not running: say so, and no stale "Open Profiler" line or key for processes that are gone."""
        self._shown.pop("info-fields", None)
        self.query_one("#job-info", FieldsLine).show(
            Text(f"job {self.key} is not running (last seen data kept below)", style="bold"))
        self.query_one("#profiler-action", Static).display = False
        if self._polling:
            self._polling, self._polling_host = (), None
            self.refresh_bindings()

    def _update_polling(self) -> tuple[int, ...]:
        """The job's pids that poll Kineto, here or (none here) on one agent's host; the keys follow a change."""
        polling, polling_host = self.polling_pids(), None
        if not polling:
            polling_host, polling = self.remote_polling() or (None, ())
        if (polling, polling_host) != (self._polling, self._polling_host):
            self._polling, self._polling_host = polling, polling_host
            self.refresh_bindings()
        return polling

    def _draw_plots(self, view: JobView, w: float) -> None:
        """Each plot's data for the window; a plot n/a with nothing in the window is left out."""
        store = self.ctx.store
        drawn, left_out = [], []
        if not self._plots:  # looked up once: a query a plot a tick adds up
            self._plots = [self.query_one(f"#{spec.id}", TimeSeriesPlot) for spec in JOB_PLOTS]
        for spec, plot in zip(JOB_PLOTS, self._plots, strict=True):
            reason = None if view.gpus or not spec.id.startswith("job-") else "the job holds no GPU memory"
            if reason is None:
                reason = store.unavailable(view.hosts[0], spec.metric)
            stats, note = self.figures.stats(store, spec.metric, w, view)
            # n/a with nothing in the window: the plot is left out, its series not read (a third of a
            # CPU job's plots, every tick).
            empty = reason is not None and (stats is None or stats.empty)
            values = [math.nan] if empty else self.figures.values(store, spec.metric, w, plot.points, view)
            left_out.append(reason if empty else None)
            drawn.append((plot, plot_data(values, reason, window_name(w), w, stats, note=note,
                                          newest_column=store.newest_column(w, plot.points))))
        if self.leave_out_plots(JOB_PLOTS, left_out):
            self._layout_plots(self.size.width, self.size.height)
        for plot, data in drawn:
            if plot.display:
                plot.set_data(data)  # repaints the lines that differ

    def _show_down(self, hosts: tuple[str, ...]) -> str:
        """Say which of the job's hosts are DOWN and since when (their figures are the last received)."""
        ctx = self.ctx
        parts = []
        for h in hosts:
            up, reason = ctx.store.host_status(h)
            if not up:
                since = ctx.down_since(h)
                when = "" if since is None else f" since {ctx.clock_text(since)} ({duration(ctx.clock() - since)} ago)"
                parts.append(f"{h} DOWN{when}: {reason}")
        text = "; ".join(parts) + (" — the job's figures there are the last received" if parts else "")
        self.update_static("#job-down", Text(text, style="bold red"), display=bool(parts))
        self.set_class(bool(parts), "-down")
        return text

    def _show_profiler_line(self, polling: tuple[int, ...]) -> None:
        """"o: Open Profiler", or why the job's processes cannot be traced (with the fix)."""
        action = self.query_one("#profiler-action", Static)
        if self.profiling.readonly:
            action.display = False
            return
        if polling:
            action.set_class(False, "-unavailable")
            action.display = True
            where = f"of the agent on {self._polling_host}" if self._polling_host else ""
            self.update_static("#profiler-action",
                         f"o: Open Profiler — {len(polling)} process(es) poll the Kineto endpoint {where}".rstrip())
            return
        simulated = self.ctx.source.simulated
        pids = [] if simulated else self.profile_pids()
        why = self._why.why(self.ctx.trace_service, self.ctx.trace_error, pids) if pids else None
        if not pids and not simulated:
            why = self._why_not_traceable_remote()
        self._trace_why = why or ""
        action.display = why is not None
        if why is not None:
            action.set_class(True, "-unavailable")
            self.update_static("#profiler-action", f"Open Profiler unavailable: {why}")

    def _why_not_traceable_remote(self) -> str | None:
        """The agent's diagnosis of the job's processes on another host (asked every 5 s at most)."""
        remote = self.remote_profile_pids()
        source = requester(self.ctx)
        if not remote or source is None:
            return None
        now = time.monotonic()
        if self._remote_why is None or now - self._remote_why[0] >= 5.0:
            self._remote_why = (now, self._remote_why[1] if self._remote_why else None)
            host = min(remote)
            pids = sorted(set(remote[host]))[:8]
            agents: RequestSource = source
            self.background.start(lambda: self._ask_remote_why(agents, host, pids),
                                  name=f"trace diagnosis on {host}", group="trace-diagnose")
        return self._remote_why[1]

    def _ask_remote_why(self, source: RequestSource, host: str, pids: list[int]) -> None:
        """In a worker: the agent's reasons why the job's processes there cannot be traced."""
        try:
            answer = wait(ask(source, host, TraceDiagnoseParams(pids=tuple(pids)), 10.0), 15)
            if answer is None:  # the screen closed meanwhile
                return
            reasons = answer.answer.reasons
            found = [(int(p), str(r)[:300]) for p, r in reasons.items() if r and str(p).isdigit()]
        except (GpulensError, OSError):  # an older agent, or one without tracing: no line rather than noise
            found = []
        # A job's shell or launcher never loads torch: say why its Python cannot be traced.
        best = sorted(found, key=lambda r: r[1].startswith(("no PyTorch", "process ")))
        why = f"{host} pid {best[0][0]}: {best[0][1]}" if best else None
        call_in_app(self._set_remote_why, why)

    def _set_remote_why(self, why: str | None) -> None:
        asked = self._remote_why[0] if self._remote_why else time.monotonic()
        self._remote_why = (asked, why)
        if not self._polling:
            self._show_profiler_line(())

    def _info(self, v: JobView) -> None:
        """The job line, rebuilt only when one of its texts changed."""
        hosts = ", ".join(v.hosts[:6]) + (f" (+{len(v.hosts) - 6})" if len(v.hosts) > 6 else "")
        fields = (("job", v.key), ("user", v.user), ("tree ID", v.tree_id),
                  ("hosts", hosts), ("GPUs", str(len(v.gpus))),
                  ("util avg", pct(v.util_percent)), ("GPU mem", size(v.gpu_mem_bytes)),
                  ("runtime", duration(v.runtime_s)), ("command", shown_command(v.cmdline)))
        if self._shown.get("info-fields") == fields:
            return
        self._shown["info-fields"] = fields
        text = Text()
        for label, value in fields:  # a label never ends a line with its value on the next (no-break spaces)
            text.append(f"{label} ".replace(" ", NBSP), style="dim")
            text.append(f"{value}   ", style="bold")
        self.query_one("#job-info", FieldsLine).show(text)  # a runtime tick repaints one line

    def action_open_profiler(self) -> None:
        """Open the PyTorch profiler screen for every polling process of the job, on every host."""
        if not self._polling or self.view is None:
            return
        from gpulens.tui.screens.profiler_rows import job_hosts

        hosts = job_hosts(self.view.processes, self.is_local, self.polling_pids(), requester(self.ctx) is not None)
        if hosts:
            (host, pids, through_agent), *rest = hosts
            self.post_message(OpenProfiler(host, pids, through_agent=through_agent,
                                           others=tuple((h, p) for h, p, _ in rest)))

