"""One process (Enter on a process row; nvitop's process screen is the peer).

Its CPU, RSS, GPU memory and (where NVML gives it) GPU utilization over
time, its ancestor chain and job key, and signals to one's own processes,
each after a confirmation: on this machine directly, on another host through
the user's own ssh (config ``signal_ssh``). ``--readonly`` removes them.

The store keeps per-process history only for processes a screen tracks
(a fleet runs thousands), so the plots start when the screen opens, and
say so.
"""

from __future__ import annotations

import contextlib
import shlex
from typing import ClassVar

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Footer, Static

from gpulens.core.model import JobInfo
from gpulens.core.sanitize import clean_text
from gpulens.core.units import duration, pct, size, window_name
from gpulens.core.workload import describe
from gpulens.sources.local import replays
from gpulens.sources.signals import proc_cmdline, refusal, send
from gpulens.sources.ssh_signal import Answer, look_over_ssh, no_ssh, send_over_ssh
from gpulens.store.views import gpu_unreadable, job_key
from gpulens.tui.context import ScreenContext
from gpulens.tui.screens._listed import LIST_POLL_S, ListedProcess
from gpulens.tui.screens._plots import PROCESS_PLOTS, SeriesFeed, configure_plots, plot_rows
from gpulens.tui.screens.base import DataScreen, update_static
from gpulens.tui.widgets.header import AppHeader
from gpulens.tui.widgets.plot import TimeSeriesPlot, plot_data
from gpulens.tui.workers import call_in_app


class ConfirmSignal(ModalScreen[bool]):
    """``Send SIGTERM to pid 4711 (python train.py)? y / n``."""

    DEFAULT_CSS = """
    ConfirmSignal { align: center middle; }
    ConfirmSignal > Vertical { width: auto; max-width: 90%; height: auto; border: thick $warning;
                               padding: 1 2; background: $surface; }
    ConfirmSignal Static { width: auto; max-width: 100%; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes, send it"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        """The question and the keys."""
        with Vertical():
            yield Static(Text(self.question, style="bold"))
            yield Static("y: send   n / esc: cancel")

    def action_answer(self, yes: bool) -> None:
        """Close with the answer."""
        self.dismiss(yes)


def ancestry(job: JobInfo) -> str:
    """``systemd(1) › bash(812) › python3(4711)``: names from the tree ID, pids from the ancestors."""
    names = [n for n in job.tree_id.split("/") if n]
    pids = [*job.ancestors, job.pid] if job.ancestors else []
    if pids and len(pids) == len(names):
        return " › ".join(f"{n}({p})" for n, p in zip(names, pids, strict=True))
    chain = " › ".join(names) or "?"
    return chain + (f"  (pids {' › '.join(map(str, pids))})" if pids else "")


class ProcessScreen(DataScreen):
    """One process on one host.

    | key | action |
    | --- | --- |
    | I | send SIGINT (asks first; your own processes only; another host's through ssh) |
    | T | send SIGTERM (asks first) |
    | K | send SIGKILL (asks first) |
    | esc | back |
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("I", "signal('SIGINT')", "SIGINT"),
        Binding("T", "signal('SIGTERM')", "SIGTERM"),
        Binding("K", "signal('SIGKILL')", "SIGKILL"),
    ]

    def __init__(self, host: str, pid: int, *, context: ScreenContext | None = None,
                 row: JobInfo | None = None) -> None:
        """``row``: the process as a host's process table listed it (``:ps``), for one no job pattern matches."""
        super().__init__(context=context)
        self.host = host
        self.pid = pid
        self.listed = ListedProcess(host, pid, row)
        """The process as the host's process table lists it, asked while the samples do not carry it."""
        self.crumb = f"pid {pid}"
        self._seen: tuple[object, ...] = ()
        self.feed = SeriesFeed()
        """The plots' aligned columns: per tick only the newest is read while the store's stamp holds."""
        self._why: str | bool | None = False
        """The refusal the footer's bindings were last refreshed for (False: never)."""

    @property
    def readonly(self) -> bool:
        """``--readonly``: no actions (from the context; False when it does not say)."""
        return bool(getattr(self.ctx, "readonly", False))

    def compose(self) -> ComposeResult:
        """Header, who the process is, its plots, its actions."""
        yield AppHeader()
        with VerticalScroll(id="body"):
            yield Static("", id="proc-down", classes="host-down")
            yield Static("", id="proc-info")
            yield Static("", id="proc-who")  # apart from the figures: it does not change each second
            yield Static("", id="proc-note")
            with Grid(id="plots", classes="plots"):
                for spec in PROCESS_PLOTS:
                    yield TimeSeriesPlot(spec.title, spec.fmt, lo=spec.lo, hi=spec.hi, id=spec.id)
            yield Static("", id="proc-actions")
        yield Footer()

    def on_mount(self) -> None:
        """Start recording the process, then draw."""
        self.ctx.store.track_process(self.host, self.pid)
        configure_plots(self, PROCESS_PLOTS, self.ctx.cfg)
        self.query_one("#body").focus()
        self.refresh_data(force=True)

    def on_unmount(self) -> None:
        """Stop recording it: the store keeps no history nobody looks at."""
        super().on_unmount()
        self.ctx.store.processes.untrack(self.host, self.pid)

    def on_resize(self, event: events.Resize) -> None:
        """Narrow layout; plots fill the height."""
        super().on_resize(event)
        plot_rows(self.query_one("#plots", Grid), len(PROCESS_PLOTS), event.size.height, 12, event.size.width)

    def sampled(self) -> JobInfo | None:
        """The process as the newest sample of its host reports it (a job's process)."""
        s = self.ctx.store.latest(self.host)
        return next((j for j in s.jobs if j.pid == self.pid), None) if s else None

    def job(self) -> JobInfo | None:
        """The process as the newest sample reports it, else as the host's process table last listed it."""
        return self.sampled() or self.listed.row

    def remote_why(self) -> str | None:
        """Why ssh cannot signal this host's processes (None: it can)."""
        source = self.ctx.source
        if source.simulated:
            return "the demo's hosts are SIMULATED: they have no processes to signal"
        if replays(source):
            return "a recording: its processes are not running now"
        why = no_ssh(self.host, self.ctx.cfg.signal_ssh)
        return None if why is None else str(why)  # the screen: words

    def signals_here(self) -> bool:
        """Whether a signal is sent from here: only to this machine's own collector's processes.

        An agent on the stream that names itself like this machine is not
        trusted with it (an impostor listed alice's process under a forged
        command line, issue 27 item 6): its processes go the remote way,
        where the host itself is asked what runs.
        """
        return self.is_local(self.host) and self.ctx.collects_here

    def why_not(self, job: JobInfo | None = None) -> str | None:
        """Why no signal can be sent now to ``job`` (default: the process as last reported; None: it can)."""
        down = self.down_text()
        if down and not self.readonly:
            return f"{down}: its processes may be gone or other processes now"
        local = self.signals_here()
        why = refusal(job or self.job(), local=local, readonly=self.readonly,
                      remote_why=None if local else self.remote_why())
        return None if why is None else str(why)  # the screen: words

    def down_text(self) -> str:
        """``host node07 DOWN since 12:01:05 (11s ago): connection lost``, or '' while it is up."""
        up, reason = self.ctx.store.host_status(self.host)
        if up:
            return ""
        since = self.ctx.down_since(self.host)
        when = "" if since is None else f" since {self.ctx.clock_text(since)} ({duration(self.ctx.clock() - since)} ago)"
        return f"host {self.host} DOWN{when}: {reason}"

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Signals: hidden with --readonly; otherwise offered, and a refused one says why (a greyed key said nothing)."""
        return not (action == "signal" and self.readonly)

    def refresh_data(self, force: bool = False) -> None:
        """Redraw when the host's data or the window changed."""
        super().refresh_data(force)
        ctx = self.ctx
        store, w = ctx.store, ctx.window_s
        down = self.down_text()
        seen = (store.host_version(self.host), w, int(ctx.clock()) if down else 0, self.listed.version)
        if seen == self._seen and not force:
            return
        self._seen = seen
        if not down and self.sampled() is None:  # not a job's process: the host's process table, polled
            self.listed.poll(self)
        job = self.job()
        shown = self._shown
        down_line = self.query_one("#proc-down", Static)
        down_line.display = bool(down)
        update_static(shown, down_line, Text(f"{down} — the figures below are the last received", style="bold red")
                      if down else Text(""))
        self.set_class(bool(down), "-down")
        figures, who = self._info(job)
        update_static(shown, self.query_one("#proc-info", Static), figures)
        who_line = self.query_one("#proc-who", Static)
        who_line.display = job is not None
        update_static(shown, who_line, who)
        since = store.processes.since(self.host, self.pid)
        update_static(shown, self.query_one("#proc-note", Static),
                      Text(f"history recorded since {ctx.clock_text(since)}, when this screen opened "
                           "(the store records only the processes you look at)" if since is not None else "",
                           style="dim"))
        unreadable = gpu_unreadable(store.latest(self.host))
        for spec in PROCESS_PLOTS:
            plot = self.query_one(f"#{spec.id}", TimeSeriesPlot)
            metric = spec.metric
            values = self.feed.series(store, self.host, metric, w, plot.points, pid=self.pid)
            stats = store.window_stats(self.host, metric, w, pid=self.pid)
            no_gpu = unreadable if metric.startswith("proc.gpu") else None
            reason = ("the process is no longer reported" if job is None
                      else no_gpu if no_gpu is not None
                      else "NVML gives no per-process utilization here" if metric == "proc.gpu_util_percent"
                      else "no sample since this screen opened")
            plot.set_data(plot_data(values, reason, window_name(w), w, stats,  # repaints the lines that differ
                                    newest_column=store.newest_column(w, plot.points)))
        why = self.why_not()
        update_static(shown, self.query_one("#proc-actions", Static),
                      Text(f"signals: {why}", style="dim") if why else
                      Text("I: SIGINT   T: SIGTERM   K: SIGKILL   (each asks first)", style="bold"))
        if why != self._why:  # the footer greys the signal keys out while refused
            self._why = why
            self.refresh_bindings()

    def _info(self, job: JobInfo | None) -> tuple[Text, Text]:
        """(the figures line, the ancestors and command lines): the second rarely changes."""
        text, who = Text(), Text()
        if job is None:
            text.append(self.listed.why or f"{self.host}:{self.pid} is not in the host's newest sample (exited, or "
                        "no longer matches the job pattern); last recorded figures below", style="bold")
            return text, who
        for label, value in (("pid", f"{self.host}:{job.pid}"), ("user", job.user),
                             ("job", "-" if job is self.listed.row else job_key(self.host, job)),
                             ("CPU", pct(job.cpu_percent)),
                             ("RSS", size(job.rss_bytes)),
                             ("GPU mem", "n/a" if gpu_unreadable(self.ctx.store.latest(self.host))
                              else size(sum(job.gpu_mem_bytes.values())) if job.gpu_mem_bytes else "-"),
                             ("GPU#", ",".join(sorted(job.gpu_mem_bytes)) or "-"),
                             *((("runs in", describe(job.workload)),) if job.workload is not None else ())):
            text.append(f"{label} ", style="dim")
            text.append(f"{value}   ", style="bold")
        if job is self.listed.row:
            text.append(f"(no job's process: from the host's process table, every {LIST_POLL_S:g} s)", style="dim")
        who.append("ancestors ", style="dim")
        who.append(ancestry(job))
        who.append("\ncommand ", style="dim")
        who.append(clean_text(job.cmdline[:2000]))
        return text, who

    def action_signal(self, name: str) -> None:
        """Ask, then send ``name`` to the process (refused with the reason when it is not yours)."""
        job = self.job()
        why = self.why_not(job)
        if why is not None or job is None:
            self.notify(f"{name} not sent: {why}", severity="warning")
            return
        # The whole command, as far as a confirmation can show it: a cut one can read as another program.
        target, what = job, clean_text(job.cmdline if len(job.cmdline) <= 240 else job.cmdline[:239] + "…")
        if not self.signals_here():
            self._ask_remote(target, name, what)
            return
        # What runs now, from /proc (not the sample's text): the confirmation names the real program.
        seen = proc_cmdline(job.pid)
        if seen is None:
            self.notify(f"{name} not sent: pid {job.pid} has exited", severity="warning")
            return
        seen = clean_text(seen if len(seen) <= 240 else seen[:239] + "…")
        if seen != what:
            what = f"{seen}; the sample said: {what}"

        def answered(yes: bool | None) -> None:
            if yes:
                result = send(target, name)
                self.notify(result, severity="information" if " sent to " in result else "error")

        self.app.push_screen(ConfirmSignal(f"Send {name} to pid {job.pid} ({what})?"), answered)

    def _ask_remote(self, job: JobInfo, name: str, what: str) -> None:
        """Look at the process on its host (ssh), ask with the command line the host reports, then send.

        Both ssh runs are workers: the screen never waits. The confirmation is
        dropped if the screen has gone by then; the result of a send is a
        notice even after Esc.
        """
        ssh, host, app = self.ctx.cfg.signal_ssh, self.host, self.app

        def send_it() -> None:
            result = send_over_ssh(ssh, host, job, name)
            with contextlib.suppress(RuntimeError):  # the app has exited meanwhile
                app.call_from_thread(app.notify, result, severity="information" if " sent to " in result
                                     else "error", timeout=10)

        def answered(yes: bool | None) -> None:
            if yes:
                self.notify(f"{name} to {host} pid {job.pid}: running ssh {host}", timeout=3)
                # A newer send marks this one cancelled, which it ignores: each runs to its notice.
                self.background.start(send_it, name=f"{name} through ssh", group="signal-send")

        def ask(seen: Answer) -> None:
            if not seen.ok:
                self.notify(f"{name} not sent: {seen.text}", severity="error", timeout=10)
                return
            self.app.push_screen(ConfirmSignal(
                f"Send {name} to pid {job.pid} on {host}?\n{host} says it runs: {seen.text[:200]}\n"
                f"(the stream said: {what})\nThrough `{shlex.join(ssh)} -- {host}`, as you there: it checks "
                f"again that pid {job.pid} is still this process and yours."), answered)

        self.notify(f"{name}: looking at pid {job.pid} on {host} through ssh", timeout=3)
        self.background.start(lambda: call_in_app(ask, look_over_ssh(ssh, host, job)),
                              name="ssh look", group="signal-look")
