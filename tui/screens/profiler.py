"""The PyTorch profiler screen: take on-demand traces, list them, View / Analyze / Export.

Keys:

=========  =====================================================
t          take a trace with the options above (duration or N iterations)
v          view the selected trace as a timeline
a          analyze the selected trace (torch-style table, findings)
e          export the selected trace to a path you type (.gz compresses)
r          re-check which processes can be traced
escape     back
=========  =====================================================

The screen is handed a trace service (a ``TraceService``: the local one, the
remote one of another host's agent, or None where there is none); loading
and analysing run in worker threads with a progress bar, so the UI never
freezes.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from functools import partial
from typing import ClassVar

from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Button, Checkbox, DataTable, Footer, Input, Label, ProgressBar, Static

from gpulens.ipc.kineto.protocol import TraceService
from gpulens.ipc.kineto.requests import TraceJob, TraceRequest, TraceState
from gpulens.tui.screens.profiler_views import AnalyzeScreen, TimelineScreen
from gpulens.tui.workers import Background, Cancelled, call_in_app, check_cancelled

NARROW_WIDTH = 140

STATE_STYLE = {
    TraceState.WAITING_FOR_POLL: "yellow",
    TraceState.TRACING: "cyan",
    TraceState.WRITING: "cyan",
    TraceState.DONE: "green",
    TraceState.FAILED: "red",
}


class OptionBox(Checkbox):
    """A checkbox whose mark shows its state without colour (``X`` on, blank off): NO_COLOR."""

    @property
    def _button(self) -> Content:
        self.BUTTON_INNER = "X" if self.value else " "
        button: Content = super()._button
        return button


class ProfilerScreen(Screen[None]):
    """Trace, View, Analyze and Export PyTorch traces of ``pids`` on ``host``."""

    DEFAULT_CSS = """
    ProfilerScreen #pf-title { height: 1; background: $primary-muted; padding: 0 1; }
    ProfilerScreen #pf-status { height: auto; padding: 0 1; }
    ProfilerScreen #pf-options { height: 3; }
    ProfilerScreen #pf-amount, ProfilerScreen #pf-flags { width: auto; height: 3; }
    ProfilerScreen.narrow #pf-options { layout: vertical; height: 6; }
    ProfilerScreen #pf-options Input { width: 16; }
    ProfilerScreen #pf-options Label { padding: 1 0 0 1; }
    ProfilerScreen #pf-options Checkbox { width: auto; }
    ProfilerScreen #pf-jobs { height: 1fr; }
    ProfilerScreen #pf-selected { height: auto; max-height: 3; padding: 0 1; }
    ProfilerScreen #pf-progress-row { height: 1; display: none; }
    ProfilerScreen #pf-progress-row.-busy { display: block; }
    ProfilerScreen #pf-export { dock: bottom; display: none; }
    ProfilerScreen #pf-export.-open { display: block; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "leave", "Back"),
        Binding("t", "trace", "Trace"),
        Binding("v", "view", "View"),
        Binding("a", "analyze", "Analyze"),
        Binding("e", "export", "Export"),
        Binding("r", "recheck", "Re-check"),
    ]

    def __init__(self, service: TraceService | None, host: str, pids: list[int]) -> None:
        super().__init__()
        self.service = service
        self.host = host
        self.pids = list(pids)
        self._rows: dict[str, TraceJob] = {}
        self.background = Background(self)
        """Loading, analysing and exporting traces: thread workers, cancelled when the screen goes."""

    # ---- layout --------------------------------------------------------------
    def compose(self) -> ComposeResult:
        where = getattr(self.service, "address", "no trace service")
        yield Static(f"Profiler · {self.host} · pid {', '.join(map(str, self.pids))} · {where}", id="pf-title")
        yield Static(id="pf-status")
        with Horizontal(id="pf-options"):
            with Horizontal(id="pf-amount"):
                yield Label("ms")
                yield Input("500", placeholder="duration ms", id="pf-duration", type="integer")
                yield Label("or steps")
                yield Input("", placeholder="iterations", id="pf-iterations", type="integer")
                yield Label("warm-up s")
                yield Input("0", placeholder="warm-up s", id="pf-warmup", type="number")
            with Horizontal(id="pf-flags"):
                yield OptionBox("shapes", id="pf-shapes")
                yield OptionBox("stack", id="pf-stack")
                yield OptionBox("memory", id="pf-memory")
                yield Button("Trace (t)", id="pf-trace", variant="primary")
        yield DataTable(id="pf-jobs", cursor_type="row", zebra_stripes=True)
        yield Static("", id="pf-selected")
        with Horizontal(id="pf-progress-row"):
            yield Static("", id="pf-progress-label")
            yield ProgressBar(total=1.0, show_eta=False, id="pf-progress")
        yield Input(placeholder="export to path (enter to write, escape to cancel)", id="pf-export")
        yield Footer()

    def on_resize(self, event: events.Resize) -> None:
        """Below 140 columns the options take two rows, so the Trace button stays on screen."""
        self.set_class(event.size.width < NARROW_WIDTH, "narrow")

    def on_mount(self) -> None:
        self.set_class(self.app.size.width < NARROW_WIDTH, "narrow")
        table = self.query_one("#pf-jobs", DataTable)
        # State and its reason first: at 80 columns they must be readable without scrolling sideways.
        table.add_columns("state", "detail", "what", "pids", "request")
        if self.service is not None:
            # Tolerate services without the listener API (test doubles, remote stubs).
            if hasattr(self.service, "add_listener"):
                self.service.add_listener(self._listener)
            for job in getattr(self.service, "jobs", list)():
                self._show_job(job)
        self.action_recheck()
        self.set_interval(2.0, self.action_recheck)
        table.focus()

    def on_unmount(self) -> None:
        self.background.cancel()
        if self.service is not None and hasattr(self.service, "remove_listener"):
            self.service.remove_listener(self._listener)

    # ---- service events (from its threads) ------------------------------------
    def _listener(self, job: TraceJob) -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # a service thread: hop onto the app's loop
            with contextlib.suppress(RuntimeError):  # the app is shutting down
                self.app.call_from_thread(self._show_job, job)
            return
        self._show_job(job)  # request_trace notifies from the caller: the app thread

    def _show_job(self, job: TraceJob) -> None:
        table = self.query_one("#pf-jobs", DataTable)
        what = job.request.describe()
        pids = ",".join(map(str, job.pids))
        state = f"[{STATE_STYLE[job.state]}]{job.state.value}[/]"
        detail = job.detail
        if job.state is TraceState.WAITING_FOR_POLL:
            detail = f"{detail} · {time.monotonic() - job.started_s:.0f} s"
        # Text, not str: DataTable reads a str as markup, and a reason like "[Errno 2] ..." would vanish.
        cell = Text(detail)
        if job.request_id in self._rows:
            for col, value in ((0, state), (1, cell), (2, what), (3, pids)):
                table.update_cell(job.request_id, table.ordered_columns[col].key, value)
        else:
            table.add_row(state, cell, what, pids, job.request_id, key=job.request_id)
        self._rows[job.request_id] = job
        self._show_selected()

    @on(DataTable.RowHighlighted, "#pf-jobs")
    def _show_selected(self) -> None:
        """The highlighted trace's state and whole reason, wrapped under the table (never cut off)."""
        table = self.query_one("#pf-jobs", DataTable)
        line = self.query_one("#pf-selected", Static)
        if table.row_count == 0:
            line.update("")
            return
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        job = self._rows.get(str(key))
        if job is None:
            line.update("")
            return
        text = Text.assemble((job.state.value, STATE_STYLE[job.state]), f" · {job.request_id}: ", job.detail)
        line.update(text)

    # ---- actions ---------------------------------------------------------------
    def action_recheck(self) -> None:
        """Say, per process, whether it can be traced and why not (with the fix)."""
        status = self.query_one("#pf-status", Static)
        if self.service is None:
            status.update("[red]no trace service here[/]: tracing needs the local agent's Kineto endpoint")
            return
        lines = []
        diagnose = getattr(self.service, "diagnose", lambda pid: None)
        for pid in self.pids:
            why = diagnose(pid)
            lines.append(f"[green]pid {pid}: ready[/] (polls {getattr(self.service, 'address', 'the endpoint')})" if why is None
                         else f"[red]pid {pid}: cannot be traced[/]: {why}")
        lines.append("[dim]a trace starts at the target's next poll: up to one poll interval (5 s by default)[/]")
        status.update("\n".join(lines))
        for job in list(self._rows.values()):
            if job.state is TraceState.WAITING_FOR_POLL:
                self._show_job(job)  # the waiting time keeps counting

    def _request(self) -> TraceRequest | None:
        def number(widget_id: str) -> str:
            return self.query_one(widget_id, Input).value.strip()

        try:
            iterations = int(number("#pf-iterations")) if number("#pf-iterations") else None
            duration = None if iterations is not None else int(number("#pf-duration") or "500")
            warmup = float(number("#pf-warmup") or "0")
        except ValueError:
            self.notify("duration, iterations and warm-up must be numbers", severity="error")
            return None
        req = TraceRequest(
            pids=tuple(self.pids),
            duration_ms=duration,
            iterations=iterations,
            record_shapes=self.query_one("#pf-shapes", Checkbox).value,
            with_stack=self.query_one("#pf-stack", Checkbox).value,
            profile_memory=self.query_one("#pf-memory", Checkbox).value,
            warmup_s=warmup,
        )
        try:
            req.validate()
        except ValueError as err:
            self.notify(str(err), severity="error")
            return None
        return req

    def action_trace(self) -> None:
        """Request a trace with the chosen options; the table shows its progress."""
        if self.service is None or not hasattr(self.service, "request_trace"):
            self.notify("no trace service here", severity="error")
            return
        req = self._request()
        if req is not None:
            self.service.request_trace(req)

    @on(Button.Pressed, "#pf-trace")
    def _trace_pressed(self) -> None:
        self.action_trace()

    def _selected_file(self) -> str | None:
        table = self.query_one("#pf-jobs", DataTable)
        if table.row_count == 0:
            self.notify("no trace yet: press t", severity="warning")
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        job = self._rows.get(str(key))
        if job is None or job.state is not TraceState.DONE or not job.files:
            self.notify("select a finished trace (state: done)", severity="warning")
            return None
        return str(next(iter(job.files.values())))

    def action_view(self) -> None:
        """Open the selected trace as a timeline (loaded in a worker)."""
        path = self._selected_file()
        if path is not None:
            self.background.start(partial(self._load_timeline, path), name="loading the trace", group="trace-load")

    def action_analyze(self) -> None:
        """Analyze the selected trace (in a worker)."""
        path = self._selected_file()
        if path is not None:
            self.background.start(partial(self._analyze, path), name="analysing the trace", group="trace-load")

    def action_export(self) -> None:
        """Ask for a path and copy the selected trace there."""
        if self._selected_file() is None:
            return
        box = self.query_one("#pf-export", Input)
        box.add_class("-open")
        box.focus()

    @on(Input.Submitted, "#pf-export")
    def _export_submitted(self, event: Input.Submitted) -> None:
        path = self._selected_file()
        event.input.remove_class("-open")
        self.query_one("#pf-jobs", DataTable).focus()
        if path is not None and event.value.strip():
            self.background.start(partial(self._export, path, event.value.strip()), name="exporting the trace",
                                  group="trace-export")

    def action_leave(self) -> None:
        """Close the export box, else leave the screen."""
        box = self.query_one("#pf-export", Input)
        if box.has_class("-open"):
            box.remove_class("-open")
            self.query_one("#pf-jobs", DataTable).focus()
            return
        self.dismiss(None)

    # ---- workers ---------------------------------------------------------------
    def _progress(self, fraction: float, what: str) -> None:
        """Worker-side progress callback; stops the work once nobody waits for it."""
        check_cancelled()
        call_in_app(self._set_progress, fraction, what)

    def _set_progress(self, fraction: float | None, what: str) -> None:
        row = self.query_one("#pf-progress-row")
        row.set_class(fraction is not None, "-busy")
        self.query_one("#pf-progress-label", Static).update(f"{what} ")
        if fraction is not None:
            self.query_one("#pf-progress", ProgressBar).update(progress=fraction)

    def _done(self) -> None:
        self._set_progress(None, "")

    def _failed(self, err: Exception) -> None:
        self._done()
        self.notify(f"{getattr(err, 'title', 'error')}: {err}", severity="error", timeout=10)

    def _load_timeline(self, path: str) -> None:
        from gpulens.analysis.trace.load import load_trace
        from gpulens.analysis.trace.timeline import build_timeline

        try:
            trace = load_trace(path, keep_args=True, progress=self._progress)
            self._progress(1.0, "building timeline")
            timeline = build_timeline(trace.events)
        except Cancelled:  # the screen went away
            return
        except Exception as err:  # shown to the user, never kills the UI
            call_in_app(self._failed, err)
            return
        call_in_app(self._done)
        call_in_app(self.app.push_screen, TimelineScreen(timeline, path))

    def _analyze(self, path: str) -> None:
        from gpulens.analysis.trace.analyze import analyze_file

        try:
            summary = analyze_file(path, progress=self._progress)
        except Cancelled:
            return
        except Exception as err:
            call_in_app(self._failed, err)
            return
        call_in_app(self._done)
        call_in_app(self.app.push_screen, AnalyzeScreen(summary, path))

    def _export(self, src: str, dest: str) -> None:
        from gpulens.analysis.trace.export import export_trace

        try:
            out = export_trace(src, dest)
        except Cancelled:
            return
        except Exception as err:
            call_in_app(self._failed, err)
            return
        call_in_app(self.notify, f"trace written to {out}")
