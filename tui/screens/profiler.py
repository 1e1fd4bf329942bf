"""The PyTorch profiler screen: take on-demand traces, list them, View / Analyze / Export.

Keys:

=========  =====================================================
t, enter   take a trace with the options above (duration or N iterations; enter in a field)
v          view the selected process's trace as a timeline
V          view every rank of the selected trace, side by side as lanes
a          analyze the selected process's trace (torch-style table, findings, charts)
A          analyze every rank of the selected trace together
e          export: the selected file, or every rank (a directory or a .tar.gz you name)
r          re-check which processes can be traced
escape     back
=========  =====================================================

The screen is handed one or more :class:`~.profiler_rows.Target` (a host, its
trace service and pids: the local service, another host's agent, or None);
a job's trace asks every target at once, with one common start time so the
ranks' windows line up. The table has one row per traced process of each
trace; the newest trace is selected when it appears. Loading, analysing and
exporting run in worker threads with a progress bar, so the UI never freezes.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import replace
from functools import partial
from typing import ClassVar

from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input, ProgressBar, Static

from gpulens.ipc.kineto.protocol import JobListener, TraceService
from gpulens.ipc.kineto.registry import DEFAULT_POLL_INTERVAL_S
from gpulens.ipc.kineto.requests import TraceJob, TraceRequest, TraceResult
from gpulens.tui._compositor import SparseScreen
from gpulens.tui.screens import profiler_work as work
from gpulens.tui.screens.profiler_book import TraceBook
from gpulens.tui.screens.profiler_rows import (
    FileRow,
    Target,
    common_start_ms,
    file_rows,
    poll_interval,
    short_paths,
    shown_path,
    status_lines,
)
from gpulens.tui.widgets.ordered_input import OrderedInput
from gpulens.tui.widgets.trace_options import TraceOptions
from gpulens.tui.workers import Background

NARROW_WIDTH = 140
MAX_STATUS_LINES = 8

STATE_STYLE = {
    "queued": "magenta",
    "waiting for poll": "yellow",
    "tracing": "cyan",
    "writing": "cyan",
    "done": "green",
    "failed": "red",
}


class ProfilerScreen(SparseScreen, Screen[None]):
    """Trace, View, Analyze and Export PyTorch traces of ``pids`` on ``host`` (and of ``others``)."""

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
        Binding("t", "trace", "Trace"),  # also from a number field, which takes no letters (OrderedInput)
        Binding("v", "view", "View"),
        Binding("V", "view_all", "View ranks", show=False),
        Binding("a", "analyze", "Analyze"),
        Binding("A", "analyze_all", "Analyze ranks", show=False),
        Binding("x", "export", "Export"),  # x as in the flame graph (docs/keys.md)
        Binding("r", "recheck", "Re-check"),
    ]

    def __init__(self, service: TraceService | None, host: str, pids: list[int], *,
                 others: Sequence[Target] = ()) -> None:
        super().__init__()
        self.service = service
        self.host = host
        self.pids = list(pids)
        self.targets = [Target(host, service, tuple(pids)), *others]
        """Where the traces are taken: this host's processes first, then the job's other hosts."""
        self.book = TraceBook()
        """Each target's trace jobs, the trace (batch) each belongs to, and the table's rows."""
        self._rows = self.book.rows
        self._listeners: list[tuple[TraceService, JobListener]] = []
        self._select_batch: int | None = None
        self.background = Background(self)
        """Loading, analysing and exporting traces: thread workers, cancelled when the screen goes."""

    # ---- layout --------------------------------------------------------------
    def _title(self) -> str:
        if len(self.targets) == 1:
            where = getattr(self.service, "address", "no trace service")
            return f"Profiler · {self.host} · pid {', '.join(map(str, self.pids))} · {where}"
        n = sum(len(t.pids) for t in self.targets)
        hosts = ", ".join(t.host for t in self.targets)
        return f"Profiler · job · {n} processes on {len(self.targets)} hosts ({hosts}) · one trace per rank"

    def compose(self) -> ComposeResult:
        yield Static(self._title(), id="pf-title")
        yield Static(id="pf-status")
        yield TraceOptions(id="pf-options")
        yield DataTable(id="pf-jobs", cursor_type="row", zebra_stripes=True)
        yield Static("", id="pf-selected")
        with Horizontal(id="pf-progress-row"):
            yield Static("", id="pf-progress-label")
            yield ProgressBar(total=1.0, show_eta=False, id="pf-progress")
        yield OrderedInput(placeholder="export to path (enter to write, escape to cancel)", id="pf-export")
        yield Footer()

    def on_resize(self, event: events.Resize) -> None:
        """Below 140 columns the options take two rows, so the Trace button stays on screen."""
        self.set_class(event.size.width < NARROW_WIDTH, "narrow")

    def on_mount(self) -> None:
        self.set_class(self.app.size.width < NARROW_WIDTH, "narrow")
        table = self.query_one("#pf-jobs", DataTable)
        # State and its reason first: at 80 columns they must be readable without scrolling sideways.
        table.add_columns("state", "detail", "what", "process", "request")
        for i, target in enumerate(self.targets):
            svc = target.service
            if svc is None:
                continue
            listener = partial(self._listener, i)
            svc.add_listener(listener)
            self._listeners.append((svc, listener))
            for job in svc.jobs():
                self._show_job(i, job)
        if table.row_count:  # the newest trace is the one worth acting on
            table.move_cursor(row=table.row_count - len(self.book.last_rows()))
        self.action_recheck()
        self.set_interval(2.0, self.action_recheck)
        table.focus()

    def on_unmount(self) -> None:
        self.background.cancel()
        for svc, listener in self._listeners:
            svc.remove_listener(listener)
        self._listeners.clear()

    # ---- service events (from its threads) ------------------------------------
    def _listener(self, target: int, job: TraceJob) -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # a service thread: hop onto the app's loop
            with contextlib.suppress(RuntimeError):  # the app is shutting down
                self.app.call_from_thread(self._show_job, target, job)
            return
        self._show_job(target, job)  # request_trace notifies from the caller: the app thread

    def _show_job(self, target: int, job: TraceJob) -> None:
        self.book.add(target, job)
        self._render_target(target)

    def _render_target(self, target: int) -> None:
        """Redraw the rows of ``target``'s traces (a finished trace can end another's "queued")."""
        table = self.query_one("#pf-jobs", DataTable)
        host = self.targets[target].host
        jobs = self.book.jobs_of(target)
        several = len(self.targets) > 1
        now = time.monotonic()
        for n, job in enumerate(jobs):
            batch = self.book.batches[(target, job.request_id)]
            for row in file_rows(job, target=target, host=host, batch=batch, earlier=jobs[:n], now_s=now):
                cells = (Text.from_markup(f"[{STATE_STYLE.get(row.state, 'white')}]{row.state}[/]"),
                         # Text, not str: a reason like "[Errno 2] ..." must not be read as markup.
                         Text(short_paths(row.detail, job.files.values())), job.request.describe(),
                         f"{host}:{row.pid}" if several else str(row.pid), job.request_id)
                if row.key in self._rows:
                    if self._rows[row.key] != row:
                        for col, value in enumerate(cells[:4]):
                            table.update_cell(row.key, table.ordered_columns[col].key, value)
                else:
                    table.add_row(*cells, key=row.key)
                    if batch == self._select_batch:  # the trace just asked for: select it
                        self._select_batch = None
                        table.move_cursor(row=table.get_row_index(row.key))
                self._rows[row.key] = row
        self._show_selected()

    @on(DataTable.RowHighlighted, "#pf-jobs")
    def _show_selected(self) -> None:
        """The highlighted process's state and whole reason, wrapped under the table (never cut off)."""
        line = self.query_one("#pf-selected", Static)
        row = self._cursor_row()
        if row is None:
            line.update("")
            return
        ranks = len(self.book.batch_rows(row.batch))
        more = f" · 1 of {ranks} processes (V / A: all ranks)" if ranks > 1 else ""
        text = Text.assemble((row.state, STATE_STYLE.get(row.state, "")),
                             f" · {row.job.request_id} · {row.host} pid {row.pid}{more}: ", row.detail,
                             *(("\nfile ", "dim"), shown_path(row.path))
                             if row.path is not None and row.path not in row.detail else ())
        line.update(text)

    # ---- actions ---------------------------------------------------------------
    def action_recheck(self) -> None:
        """Say, per process, whether it can be traced and why not (with the fix); how soon a trace starts."""
        status = self.query_one("#pf-status", Static)
        if all(t.service is None for t in self.targets):
            status.update("[red]no trace service here[/]: tracing needs the local agent's Kineto endpoint")
            return
        status.update("\n".join(status_lines(self.targets, MAX_STATUS_LINES)))
        for t in self.book.waiting():
            self._render_target(t)  # the waiting time keeps counting

    def action_trace(self) -> None:
        """Request a trace with the chosen options from every target; the table shows its progress."""
        live = [(i, t) for i, t in enumerate(self.targets)
                if t.service is not None and t.pids]
        if not live:
            self.notify("no trace service here", severity="error")
            return
        skipped = [t.host for t in self.targets if all(t is not other for _, other in live)]
        if skipped:
            self.notify(f"no trace service for {', '.join(skipped)}: its processes are not traced", severity="warning")
        base = self.query_one(TraceOptions).request(tuple(self.pids) or tuple(self.targets[0].pids))
        if base is None:
            return
        pids = sum(len(t.pids) for _, t in live)
        if pids > 1 and base.duration_ms is not None and hasattr(base, "start_time_ms"):
            # Every rank starts at one wall-clock time after each one's next poll: the windows line up.
            start = common_start_ms((poll_interval(t.service, p) for _, t in live for p in t.pids),
                                    DEFAULT_POLL_INTERVAL_S, warmup_s=float(getattr(base, "warmup_s", 0.0)))
            base = replace(base, start_time_ms=start)
        batch = self._select_batch = self.book.new_batch()
        for i, target in live:
            req = replace(base, pids=target.pids)
            self.book.asked.append((batch, i, req))
            assert target.service is not None
            fut = target.service.request_trace(req)
            fut.add_done_callback(partial(self._request_ended, target.host, req))

    def _request_ended(self, host: str, req: TraceRequest, fut: Future[TraceResult]) -> None:
        """A request that failed before any job showed for it (refused at once): say why, never silence."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # a service thread: hop onto the app's loop
            with contextlib.suppress(RuntimeError):
                self.app.call_from_thread(self._request_ended, host, req, fut)
            return
        err = fut.exception() if not fut.cancelled() else None
        if err is None or not self.book.refused(req):
            return  # it succeeded, or its job is in the table with its reason
        self.notify(f"trace on {host} refused: {err}", severity="error", timeout=10)

    def on_trace_options_submitted(self) -> None:
        """The Trace button, or Enter in an option field: take the trace, as ``t`` does."""
        self.action_trace()

    def _cursor_row(self) -> FileRow | None:
        table = self.query_one("#pf-jobs", DataTable)
        if table.row_count == 0:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return self._rows.get(str(key))

    def _selected(self, *, every_rank: bool = False) -> list[FileRow]:
        """The selected process's finished file (or every file of its trace); a notice when there is none."""
        row = self._cursor_row()
        if row is None:
            self.notify("no trace yet: press t", severity="warning")
            return []
        rows = [r for r in self.book.batch_rows(row.batch) if r.path is not None] if every_rank else (
            [row] if row.path is not None else [])
        if not rows:
            why = "select a finished trace (state: done)" if not row.finished else f"no file: {row.detail}"
            self.notify(why, severity="warning")
        return rows

    def action_view(self) -> None:
        """Open the selected process's trace as a timeline (loaded in a worker)."""
        rows = self._selected()
        if rows:
            self.background.start(partial(work.load_timeline, self, rows), name="loading the trace",
                                  group="trace-load")

    def action_view_all(self) -> None:
        """Every rank of the selected trace as lanes of one timeline."""
        rows = self._selected(every_rank=True)
        if rows:
            self.background.start(partial(work.load_timeline, self, rows), name="loading the traces",
                                  group="trace-load")

    def action_analyze(self) -> None:
        """Analyze the selected process's trace (in a worker)."""
        rows = self._selected()
        if rows:
            self.background.start(partial(work.analyze, self, rows), name="analysing the trace",
                                  group="trace-load")

    def action_analyze_all(self) -> None:
        """Analyze every rank of the selected trace together."""
        rows = self._selected(every_rank=True)
        if rows:
            self.background.start(partial(work.analyze, self, rows), name="analysing the traces",
                                  group="trace-load")

    def action_export(self) -> None:
        """Ask for a path and copy the selected trace (every rank of it) there."""
        row = self._cursor_row()
        if not self._selected():
            return
        box = self.query_one("#pf-export", Input)
        assert row is not None
        n = len([r for r in self.book.batch_rows(row.batch) if r.path is not None])
        box.placeholder = (f"export {n} ranks to a directory or NAME.tar.gz (NAME.json: this process only); "
                           "enter writes, escape cancels" if n > 1 else
                           "export to path (.gz compresses; enter to write, escape to cancel)")
        box.add_class("-open")
        box.focus()

    @on(Input.Submitted, "#pf-export")
    def _export_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        row = self._cursor_row()
        event.input.remove_class("-open")
        self.query_one("#pf-jobs", DataTable).focus()
        dest = event.value.strip()
        if row is None or row.path is None or not dest:
            return
        rows = [r for r in self.book.batch_rows(row.batch) if r.path is not None]
        if len(rows) > 1 and dest.endswith((".json", ".json.gz")):
            rows = [row]
        self.background.start(partial(work.export, self, rows, dest), name="exporting the trace",
                              group="trace-export")

    def action_leave(self) -> None:
        """Close the export box, else leave the screen."""
        box = self.query_one("#pf-export", Input)
        if box.has_class("-open"):
            box.remove_class("-open")
            self.query_one("#pf-jobs", DataTable).focus()
            return
        self.dismiss(None)

    # ---- progress (called in the app by the workers) ---------------------------
    def set_progress(self, fraction: float | None, what: str) -> None:
        """Show (or, with None, hide) the progress bar of the running load / analysis / export."""
        row = self.query_one("#pf-progress-row")
        row.set_class(fraction is not None, "-busy")
        self.query_one("#pf-progress-label", Static).update(f"{what} ")
        if fraction is not None:
            self.query_one("#pf-progress", ProgressBar).update(progress=fraction)

    def work_failed(self, err: Exception) -> None:
        """A load, analysis or export failed: say why (the screen stays)."""
        self.set_progress(None, "")
        title, text = str(getattr(err, "title", "error")), str(err)
        self.notify(text if text.startswith(title) else f"{title}: {text}", severity="error", timeout=10)
