"""``:ps [HOST]`` and ``P`` on a host screen: every process of a host, as nvitop and btop list them.

The samples carry only the processes of jobs (those whose tree ID matches
the job pattern); this table asks the host for all of them every
:data:`POLL_S` seconds (``sources.processes``: this machine's collector, or
the host's agent), GPU processes first. Shift+C, R, G sort by CPU, memory (RSS)
and GPU memory (again: reversed); ``/`` filters by pid, user, tree ID and
command line; Enter opens the process screen (py-spy, signals). A host
whose agent cannot list processes, a recording or a DOWN host says why in
place of the rows.
"""

from __future__ import annotations

import math
import time
from concurrent.futures import CancelledError
from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Vertical
from textual.widgets import Footer

from gpulens.core.errors import GpulensError
from gpulens.core.model import JobInfo
from gpulens.sources.processes import decode_rows, process_table
from gpulens.store.views import gpu_unreadable
from gpulens.tui.context import ScreenContext
from gpulens.tui.screens._finding import FindingScreen, sort_bindings
from gpulens.tui.screens.process import ProcessScreen
from gpulens.tui.screens.views import VIEW_CSS
from gpulens.tui.widgets._table import IncrementalTable
from gpulens.tui.widgets.header import AppHeader
from gpulens.tui.widgets.process_table import ProcessTable
from gpulens.tui.workers import call_in_app, wait

POLL_S = 2.0
"""The table is asked for again this often while shown."""
ROWS = 1000
"""Rows asked for (GPU processes and the busiest first; ``total`` says how many the host has)."""


class HostProcessTable(ProcessTable):
    """Every process of one host; sortable by CPU (C), memory (R: RSS), GPU memory (G), pid (I), user (U)."""

    SORT_KEYS: ClassVar[dict[str, str]] = {"cpu": "C", "rss": "R", "gpumem": "G", "pid": "I", "user": "U"}
    _COLUMN: ClassVar[dict[str, int]] = {c[0]: i for i, c in enumerate(ProcessTable.COLUMNS)}

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.sort_index = self._COLUMN["gpumem"]
        self.sort_reverse = True  # GPU processes first, as the agent orders them

    def sort_value(self, p: JobInfo) -> tuple[Any, ...]:
        """What the sort column compares (unknown last); ties: GPU memory, then CPU, then pid."""
        column = self.COLUMNS[self.sort_index][0]
        gpu, cpu = sum(p.gpu_mem_bytes.values()), p.cpu_percent
        value: Any = {"cpu": cpu, "rss": p.rss_bytes, "gpumem": gpu, "pid": p.pid, "user": p.user,
                      "tree": p.tree_id, "cmd": p.cmdline, "where": p.pid, "gpus": gpu}.get(column, p.pid)
        known = value is not None and not (isinstance(value, float) and math.isnan(value))
        return (known, value if known else 0, gpu, cpu or 0.0, -p.pid)


class ProcessesView(FindingScreen):
    """``:ps HOST``: the host's every process (module docstring)."""

    DEFAULT_CSS = VIEW_CSS.format(name="ProcessesView")
    BINDINGS: ClassVar[list[BindingType]] = sort_bindings(HostProcessTable)

    def __init__(self, host: str = "", *, context: ScreenContext | None = None) -> None:
        super().__init__(context=context)
        self.host = host or default_host(context) or ""
        self.crumb = f"ps {self.host}" if self.host else "ps"
        self.rows: list[JobInfo] = []
        self.total = 0
        self.hidden = 0
        self.why: str | None = None
        self.asked_at = -math.inf
        self._asking = False
        self._drawn: tuple[object, ...] = ()

    def compose(self) -> ComposeResult:
        """Header, the table, the filter line, the footer."""
        yield AppHeader()
        with Vertical(classes="view-box") as box:
            box.border_title = f"Processes on {self.host or '?'} · CPU since the last listing · GPU memory now"
            yield HostProcessTable(id="ps")
        yield from self.filter_widgets()
        yield Footer()

    def on_mount(self) -> None:
        """Ask at once."""
        super().on_mount()
        self.query_one(HostProcessTable).focus()
        self.query_one(HostProcessTable).placeholder = "asking the host for its processes…"
        self.refresh_data(force=True)

    def refresh_data(self, force: bool = False) -> None:
        """Ask every :data:`POLL_S` (one question at a time); redraw what the last answer said."""
        super().refresh_data(force)
        now = time.monotonic()
        if not self._asking and now - self.asked_at >= POLL_S:
            self._ask()
        self._draw(force)

    def _ask(self) -> None:
        table = self.query_one(HostProcessTable)
        if not self.host:
            self.why = "which host? ':ps HOST' (several hosts are shown, none of them this machine)"
            table.placeholder = self.why
            return
        up, reason = self.ctx.store.host_status(self.host)
        if not up and self.ctx.store.latest(self.host) is not None:
            self.why = f"host {self.host} is DOWN ({reason}): its processes cannot be listed now"
            self.rows = []
            self.asked_at = time.monotonic()
            return
        self._asking = True
        self.asked_at = time.monotonic()
        source, host = self.ctx.source, self.host
        self.background.start(lambda: self._fetch(source, host), name=f"process list of {host}", group="ps")

    def _fetch(self, source: object, host: str) -> None:
        """In a worker: the host's answer, or why there is none."""
        try:
            answer = wait(process_table(source, host, limit=ROWS), 15.0)
            if answer is None:
                return
            got: tuple[list[JobInfo], int, int, str | None] = (*decode_rows(getattr(answer, "result", answer)), None)
        except (GpulensError, OSError, ValueError, RuntimeError, CancelledError) as err:  # no such kind, a timeout,
            # a malformed answer, the lister's own failure, a cancelled ask: said, and asked again later
            got = ([], 0, 0, f"{host}: {str(err)[:300] or type(err).__name__}")
        call_in_app(self._answered, *got)

    def _answered(self, rows: list[JobInfo], total: int, hidden: int, why: str | None) -> None:
        self._asking = False
        self.rows, self.total, self.hidden, self.why = rows, total, hidden, why
        self._draw(True)

    def _draw(self, force: bool) -> None:
        table = self.query_one(HostProcessTable)
        key = (id(self.rows), self.why, self.finder, table.sort_index, table.sort_reverse)
        if key == self._drawn and not force:
            return
        self._drawn = key
        pattern = self.finder.pattern
        kept = [p for p in self.rows if pattern is None or self.finder.inverted != any(
            pattern.search(x) for x in (str(p.pid), p.user, p.tree_id, p.cmdline))]
        kept.sort(key=table.sort_value, reverse=table.sort_reverse)
        if self.why is not None:
            table.placeholder = self.why
        elif self.rows:
            table.placeholder = f"no process matches the filter '{self.finder.text}'"
        no_gpu = frozenset({self.host}) if _gpu_unreadable(self.ctx, self.host) else frozenset()
        table.show(tuple((self.host, p) for p in kept), no_gpu)
        box = table.parent
        if isinstance(box, Vertical):
            more = f" of {self.total}" if self.total > len(self.rows) else ""
            hid = f" · {self.hidden} hidden (/proc hidepid: not yours)" if self.hidden else ""
            box.border_subtitle = (f"{table.sort_label()} · {len(kept)}{more} processes{hid}{self.filter_note()}"
                                   " · shift+C/R/G/I/U sorts · enter opens")

    def on_incremental_table_row_selected(self, event: IncrementalTable.RowSelected) -> None:
        """Enter opens the process screen, with the row it was opened from."""
        event.stop()
        host, _, pid = event.key.rpartition(":")
        row = next((p for p in self.rows if str(p.pid) == pid), None)
        if pid.isdigit():
            self.app.push_screen(ProcessScreen(host, int(pid), context=self.ctx, row=row))


def _gpu_unreadable(ctx: ScreenContext, host: str) -> bool:
    return gpu_unreadable(ctx.store.latest(host)) is not None


def default_host(app: ScreenContext | None) -> str | None:
    """The host a command that names none means: the shown screen's own, the only one, or this machine's.

    ``app``: the app the command was typed in (None outside one: no default)."""
    stack = getattr(app, "screen_stack", None)
    if app is None or not stack:
        return None
    own = getattr(stack[-1], "host", None)  # the shown screen's
    if isinstance(own, str) and own:
        return own
    hosts = app.store.hosts()
    if len(hosts) == 1:
        return str(hosts[0])
    return next((h for h in hosts if h == getattr(app, "hostname", None)), None)


class ProcView(ProcessScreen):
    """``:proc PID`` (the shown screen's host, the only host, or this machine's) or ``:proc HOST:PID``."""

    def __init__(self, arg: str, *, context: ScreenContext | None = None) -> None:
        host, _, pid = arg.rpartition(":")
        super().__init__(host or default_host(context) or "", int(pid) if pid.isdigit() else 0, context=context)
        if not self.host:
            self.listed.why = (f"which host runs pid {pid}? ':proc HOST:{pid}' (several hosts are shown, "
                               "none of them this machine)")
