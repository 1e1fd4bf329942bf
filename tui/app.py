"""GpulensApp: the TUI, handed its source; the store sits between them.

Sources call ``emit`` from their threads; events queue under a lock and one ``SourceEvents``
message at a time drains them: 256 host samples cost one store update and one redraw (≤ 4/s).

The app is the screens' :class:`~gpulens.tui.context.ScreenContext` and routes the navigation
messages they post (:mod:`gpulens.tui.messages`); screens never import it. Its one
``Worker.StateChanged`` handler shows any background worker's failure.
"""

from __future__ import annotations

import importlib.util
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

from textual.actions import SkipAction
from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.notifications import SeverityLevel
from textual.screen import ModalScreen, Screen
from textual.timer import Timer
from textual.widgets import Input
from textual.worker import Worker

from gpulens.core import logbook
from gpulens.core.config import WINDOWS, Config, Panel
from gpulens.core.events import HostStatusEvent, PanelData, Source, SourceEvent, SourceStatusEvent
from gpulens.ipc.kineto.protocol import TraceService
from gpulens.sources.local import collects_here, sample_step
from gpulens.sources.replay import Scrubbable
from gpulens.store.store import Store
from gpulens.tui._driver import IdleInput
from gpulens.tui._theme_cache import ThemeCache
from gpulens.tui.frozen import Pause
from gpulens.tui.host_changes import note_change
from gpulens.tui.messages import OpenFlame, OpenHost, OpenJob, OpenProfiler
from gpulens.tui.palette import binding_commands
from gpulens.tui.profiling import refusal
from gpulens.tui.replay import SEEK_STEP_S, ReplayBar, ReplayControl
from gpulens.tui.screens.base import DataScreen
from gpulens.tui.screens.help import HelpScreen
from gpulens.tui.screens.host import HostScreen
from gpulens.tui.screens.job import JobScreen
from gpulens.tui.screens.jump import JumpScreen
from gpulens.tui.screens.jump_targets import run_jump
from gpulens.tui.screens.overview import OverviewScreen
from gpulens.tui.widgets._lines import LazyLines
from gpulens.tui.widgets.header import AppHeader
from gpulens.tui.widgets.heatmap import HEAT_METRICS
from gpulens.tui.widgets.panel import panel_series
from gpulens.tui.workers import notify_failure

MIN_REFRESH_S = 0.25
BURST_S = 0.02
"""How long a redraw waits for the rest of a burst of samples (one per host, sent together)."""


class GpulensApp(IdleInput, ThemeCache, App[int]):
    """The gpulens TUI. Its keys are :attr:`BINDINGS` (q quit, ? keys, esc back, : command, 1-4 window,
    p pause / resume, replay's space ← → [ ]); ``?`` lists each screen's, the README all of them."""

    CSS_PATH = "app.tcss"
    TITLE = "gpulens"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit"),
        Binding("ctrl+c", "interrupt", "Quit", show=False, priority=True),
        Binding("question_mark", "help", "Keys", key_display="?"),
        Binding("escape", "go_back", "Back"),
        # Priority: the prompt opens when ':' arrives, so a fast ':host x' loses no key.
        Binding("colon", "jump", "Jump", key_display=":", priority=True),
        Binding("1", "window('1m')", "Window 1m", show=False),
        Binding("2", "window('5m')", "Window 5m", show=False),
        Binding("3", "window('15m')", "Window 15m", show=False),
        Binding("4", "window('1h')", "Window 1h", show=False),
        Binding("p", "pause", "Pause"),
        Binding("p", "resume", "Resume"),  # one of the two, as check_action says: the footer names what p does
        Binding("space", "replay_toggle", "Replay: play / pause", show=False),
        Binding("left", f"replay_seek({-SEEK_STEP_S})", "Replay: back 10 s", show=False),
        Binding("right", f"replay_seek({SEEK_STEP_S})", "Replay: ahead 10 s", show=False),
        Binding("shift+left", f"replay_seek({-6 * SEEK_STEP_S})", "Replay: back 1 min", show=False),
        Binding("shift+right", f"replay_seek({6 * SEEK_STEP_S})", "Replay: ahead 1 min", show=False),
        Binding("left_square_bracket", "replay_speed(False)", "Replay: slower", show=False),
        Binding("right_square_bracket", "replay_speed(True)", "Replay: faster", show=False),
    ]

    class SourceEvents(Message):
        """New events are queued (one such message at a time)."""

    def __init__(self, source: Source, cfg: Config | None = None, *,
                 clock: Callable[[], float] = time.time, trace_service: TraceService | None = None,
                 store: Store | None = None, trace_error: str | None = None,
                 hostname: str | None = None, readonly: bool = False) -> None:
        super().__init__()
        self.source = source
        self.cfg = cfg or Config()
        self.clock = clock
        self.trace_service = trace_service
        self.trace_error = trace_error  # why there is no trace service (where "Open Profiler" would be)
        self.store = store or Store(resolution_s=sample_step(source, self.cfg.interval_s),
                                    history_s=max(3600.0, self.cfg.history_minutes * 60.0))
        self.window = self.cfg.window
        self.paused = False
        self.pause = Pause()
        """While paused: the instant it began, which every redraw ends at (``tui.frozen``)."""
        self.hostname = hostname or socket.gethostname()
        """This machine: py-spy and the local trace service reach its processes only."""
        self.collects_here = collects_here(source)  # not an agent that names itself like it: local signals
        self._lock = threading.Lock()
        self._pending: list[SourceEvent] = []
        self._posted = False
        self._last_refresh = 0.0
        self._timer: Timer | None = None
        self._started = False
        self.host_changes: dict[str, tuple[bool, float]] = {}
        """host -> (up, time) of its last up/down change: the store keeps no time."""
        self.readonly = readonly
        """``--readonly``: screens offer no action that changes anything (signals, traces)."""
        self.refresh_s = MIN_REFRESH_S
        """Least time between two redraws (``:interval S``); sampling keeps its own interval."""
        self.replay: ReplayControl | None = None
        """The scrubbing control when the source is one recording."""
        if isinstance(source, Scrubbable):  # the recording's own clock, not the wall clock
            control = self.replay = ReplayControl(self, source)
            self.clock = lambda: control.position if control.ready else self.store.now or clock()

    @property
    def window_s(self) -> float:
        """The statistics window in seconds."""
        return float(WINDOWS[self.window])

    def clock_text(self, t: float | None = None) -> str:
        """The clock (or time ``t``), as HH:MM:SS local time."""
        now = self.pause.clock() if t is None and self.paused else None  # paused: the clock stands still
        return time.strftime("%H:%M:%S", time.localtime((now or self.clock()) if t is None else t))

    def down_since(self, host: str) -> float | None:
        """When ``host`` went down (None when up or never seen going down)."""
        change = self.host_changes.get(host)
        return change[1] if change is not None and not change[0] else None

    def down_hosts(self) -> dict[str, float]:
        """Every host that is down now, with when it went down."""
        return {h: t for h, (up, t) in self.host_changes.items() if not up}

    def on_mount(self) -> None:
        """Open the overview, then start the source (a recording: the replay control)."""
        signal = getattr(self, "screen_change_signal", None)  # Textual >= 8
        if signal is not None:
            signal.subscribe(self, self._screen_changed)
        else:  # older Textual (the floor in pyproject.toml): notice a new screen on a light timer
            self._last_screen: int | None = None
            self.set_interval(0.2, self._check_screen)
        self.push_screen(OverviewScreen(context=self))
        if self.replay is not None:
            self.replay.start()
            self._started = True
            return
        try:
            self.source.start(self.emit)
        except Exception as err:  # shown in the header; the UI stays up to say so
            self.emit(SourceStatusEvent(message=f"source failed to start: {err}", ok=False,
                                        time=self.clock()))
            return
        self._started = True

    def on_unmount(self) -> None:
        """Stop the source (also on errors and Ctrl-C)."""
        self.stop_source()

    def stop_source(self) -> None:
        """Stop the source once."""
        if self._started:
            self._started = False
            self.source.stop()

    # ---- events from sources (any thread) ---------------------------------
    def emit(self, event: SourceEvent) -> None:
        """The ``emit`` given to the source; thread-safe, merges bursts."""
        with self._lock:
            self._pending.append(event)
            if self._posted:
                return
            self._posted = True
        self.post_message(self.SourceEvents())

    def on_gpulens_app_source_events(self, _: SourceEvents) -> None:
        """Apply every queued event, then redraw (rate-limited)."""
        with self._lock:
            events, self._pending = self._pending, []
            self._posted = False
        for e in events:
            if isinstance(e, HostStatusEvent):
                self.note_host_status(e)
            elif isinstance(e, SourceStatusEvent) and not e.ok:
                self.note(e.message, "warning", notify=False)
        if self.store.apply_many(events):
            self.schedule_refresh()

    def note_host_status(self, e: HostStatusEvent) -> None:
        """Remember when a host went up or down, and say it in ``:log``."""
        if (said := note_change(self.host_changes, e)) is not None:
            logbook.note(said, logging.INFO if e.up else logging.WARNING)

    def replace_store(self, store: Store, statuses: list[HostStatusEvent]) -> None:
        """A replay seek: the screens read ``store`` from now on."""
        self.store = store
        self.host_changes = {}
        for e in statuses:  # a seek replays the changes: known already, not said again
            note_change(self.host_changes, e)
        for screen in self.screen_stack:
            for lines in screen.query(LazyLines):
                lines.invalidate()

    def refresh_bar(self) -> None:
        """Redraw the replay's position bar and the header clock on the top screen."""
        screen = self.screen
        for bar in screen.query(ReplayBar):
            bar.refresh()
        if isinstance(screen, DataScreen):
            screen.update_header()

    def note(self, message: str, severity: str = "warning", *, notify: bool = True) -> None:
        """Show ``message`` (unless ``notify`` is False) and keep it for ``:log``."""
        if notify:
            self.notify(message, severity=severity)  # type: ignore[arg-type]
        else:
            logbook.note(message, logging.ERROR if severity == "error" else logging.WARNING)

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = True) -> None:
        """Textual's notify, never as markup; warnings and errors are kept for ``:log`` too.

        ``markup`` is ignored (Widget.notify always passes True): messages carry
        hosts', jobs' and agents' text, where ``[@click=app.quit]`` would be an action.
        """
        if severity in ("warning", "error"):
            logbook.note(str(message), logging.ERROR if severity == "error" else logging.WARNING)
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=False)

    def schedule_refresh(self) -> None:
        """Redraw once the rest of a burst has landed (``BURST_S``), and ``refresh_s`` after the last redraw.

        Sixteen hosts' samples arrive within a few ms of each other: redrawn at the first,
        the screen would be redrawn again for the other fifteen.
        """
        if self._timer is None:
            due = self._last_refresh + self.refresh_s - time.monotonic()
            self._timer = self.set_timer(max(BURST_S, due), self._timed_refresh)

    def _timed_refresh(self) -> None:
        self._timer = None
        self.refresh_data()

    def refresh_data(self, force: bool = False) -> None:
        """Redraw the top screen from the store (only its header while paused)."""
        self._last_refresh = time.monotonic()
        if not self.screen_stack:  # no screen left: a timed redraw that fires while the app exits
            return
        if not isinstance(screen := self.screen, DataScreen):
            for header in () if isinstance(screen, ModalScreen) else screen.query(AppHeader):
                header.follow(self)  # a flame, profiler or timeline screen's (:meth:`_decorate`): REC size, clock
            return
        with self.batch_update():
            if self.paused:
                with self.pause.frozen(self.store):
                    screen.update_header()
            else:
                screen.refresh_data(force)

    def panel_data(self, panel: Panel, host: str | None, job: str | None) -> PanelData:
        """A custom panel's series: the store for ``metric``, the source for ``expr``."""
        return panel_series(panel, host, job, self.window_s, self.store, self.source)

    # ---- every screen: breadcrumbs, the replay bar ---------------------------
    def _check_screen(self) -> None:
        try:
            screen = self.screen
        except Exception:  # no screen yet
            return
        if id(screen) != self._last_screen:
            self._last_screen = id(screen)
            self._screen_changed(screen)

    def _screen_changed(self, screen: Screen[Any]) -> None:
        self.call_after_refresh(self._decorate, screen)

    def _decorate(self, screen: Screen[Any]) -> None:
        """A header with breadcrumbs on screens without one (flame, profiler, timeline); the replay bar."""
        if not screen.is_attached or isinstance(screen, ModalScreen):
            return
        if not screen.query(AppHeader):
            header = AppHeader()
            header.follow(self)
            screen.mount(header)
        if self.replay is not None and isinstance(screen, DataScreen) and not screen.query(ReplayBar):
            screen.mount(ReplayBar(self.replay))

    # ---- navigation: the screens' messages ---------------------------------
    def open_host(self, host: str) -> None:
        """Push the host screen."""
        self.push_screen(HostScreen(host, context=self))

    def open_job(self, key: str) -> None:
        """Push the job screen."""
        self.push_screen(JobScreen(key, context=self))

    def on_open_host(self, message: OpenHost) -> None:
        """A screen asked for a host."""
        self.open_host(message.host)

    def on_open_job(self, message: OpenJob) -> None:
        """A screen asked for a job."""
        self.open_job(message.key)

    def on_open_flame(self, message: OpenFlame) -> None:
        """A profile is ready: show it full screen."""
        from gpulens.tui.screens.flame import FlameScreen

        self.push_screen(FlameScreen(message.profile, title=message.title))

    def on_open_profiler(self, message: OpenProfiler) -> None:
        """The profiler for processes here (the trace service) or on another host (its agent)."""
        # --readonly or a replay: the screens offer no "o"; this guards any other way a message gets here.
        why = refusal(self) or ("" if importlib.util.find_spec("gpulens.tui.screens.profiler")
                                else "the profiler screen is not available")
        if why:
            self.notify(why, severity="warning")
            return
        from gpulens.tui.screens.profiler import ProfilerScreen
        from gpulens.tui.screens.profiler_rows import Target

        service = self._agent_trace_service(message.host) if message.through_agent else self.trace_service
        others = [Target(h, self._agent_trace_service(h), pids) for h, pids in message.others]
        self.push_screen(ProfilerScreen(service=service, host=message.host, pids=list(message.pids), others=others))

    def _agent_trace_service(self, host: str) -> TraceService:
        """A trace service that reaches ``host``'s processes through its agent (one per app and host)."""
        from gpulens.sources.remote_trace import service_for

        store = self.store

        def polling() -> set[int]:
            sample = store.latest(host)
            return {j.pid for j in sample.jobs if j.kineto_polling} if sample is not None else set()

        return service_for(self, host, polling)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """A background worker failed: say so (the screen stays up)."""
        notify_failure(self, event)

    def action_go_back(self) -> None:
        """Esc: the screen's own undo first (the overview's filter), else pop a screen."""
        screen = self.screen
        if isinstance(screen, DataScreen) and screen.go_back():
            return
        if len(self.screen_stack) > 2:
            self.pop_screen()

    def action_help(self) -> None:
        """Show the keys of this screen, then the global ones that apply here."""
        if not isinstance(self.screen, HelpScreen):
            active: list[BindingType] = [b for b in self.BINDINGS if isinstance(b, Binding)
                      and not (b.action.startswith("replay_") and self.replay is None)]
            self.push_screen(HelpScreen(self.screen, active))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Replay keys only while replaying (elsewhere space and the arrows stay the screens'); p pauses or
        resumes, and it and the window keys only where a screen draws data (not a flame graph or a timeline)."""
        if action in ("pause", "resume", "window") and self.screen_stack and not isinstance(self.screen, DataScreen):
            return False
        if action in ("pause", "resume"):
            return self.paused == (action == "resume")
        return not (action.startswith("replay_") and self.replay is None)

    def action_replay_toggle(self) -> None:
        """Space: play or pause the replay."""
        if self.replay is not None:
            self.replay.toggle()

    def action_replay_seek(self, delta_s: float) -> None:
        """← / →: seek the replay."""
        if self.replay is not None:
            self.replay.seek_by(delta_s)

    def action_replay_speed(self, faster: bool) -> None:
        """``[`` / ``]``: replay slower or faster."""
        if self.replay is not None:
            self.replay.change_speed(faster)

    def action_interrupt(self) -> None:
        """Ctrl-C: quit with 130, as a shell reports an interrupted command (``q`` quits with 0)."""
        self.exit(return_code=130)

    def action_jump(self) -> None:
        """``:`` opens the command line (``hosts``, ``job PID``, ...)."""
        if isinstance(self.focused, Input) or isinstance(self.screen, ModalScreen):
            raise SkipAction()  # a ':' typed into a text field, or over the help / the prompt
        self.push_screen(JumpScreen(self.store.hosts()), self.jump)

    def jump(self, text: str | None) -> None:
        """Run the ``:`` command in ``text`` (a view, a host, a job, a process, the interval, the log)."""
        run_jump(self, text)

    def set_refresh_interval(self, seconds: float) -> None:
        """``:interval S``: redraw at most every ``S`` seconds (sampling keeps its own interval)."""
        self.refresh_s = max(MIN_REFRESH_S, seconds)
        floor = f" (the screen redraws at most every {MIN_REFRESH_S:g} s)" if seconds < MIN_REFRESH_S else ""
        self.notify(f"refresh every {self.refresh_s:g} s{floor}; sampling stays every {self.cfg.interval_s:g} s",
                    timeout=3)
        self.refresh_data(force=True)

    def action_window(self, name: str) -> None:
        """Statistics window: 1m, 5m, 15m or 1h; while paused the screen is redrawn once for it (and says so)."""
        self.window = name
        screen = self.screen if self.screen_stack else None
        if not (self.paused and isinstance(screen, DataScreen)):
            self.refresh_data(force=True)
            return
        with self.batch_update(), self.pause.frozen(self.store):
            screen.refresh_data(force=True)  # once, paused: over the new window that ends at the pause
        self.notify(f"window {name}: redrawn up to {self.clock_text()}, when you paused; still paused (p resumes)",
                    timeout=3)

    def action_pause(self) -> None:
        """Pause or resume redrawing (data keeps being recorded); in a replay, the replay's play / pause."""
        if self.replay is not None:
            return self.action_replay_toggle()  # one pause in a replay, on Space and p alike (docs/keys.md)
        self.paused = not self.paused
        if self.paused:
            self.pause.begin(self.store, self.clock())
        else:
            self.pause.end()
        self.refresh_data(force=True)
        self.refresh_bindings()

    action_resume = action_pause

    async def action_heatmap(self, key: str) -> None:
        """Heatmap metric, from the command palette (the overview's ``heat``; elsewhere nothing)."""
        await self.screen.run_action(f"heat({key!r})")

    def _screen_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        """The keys of the screen the palette was opened on, as commands."""
        if len(self.screen_stack) > 2:
            yield SystemCommand("Back", "esc: the previous screen", self.action_go_back)
        own = list(screen.commands()) if isinstance(screen, DataScreen) else []
        yield from own
        yield from binding_commands(screen, [c.title for c in own])  # every key: what a key does, the palette does

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        """The command palette lists every gpulens action."""
        # Textual's own "Keys" panel would be a second "Keys": ours lists this screen's keys.
        yield from (c for c in super().get_system_commands(screen) if c.title != "Keys")
        for name in WINDOWS:
            yield SystemCommand(f"Window {name}", f"statistics over the last {name}",
                                lambda n=name: self.action_window(n))
        yield SystemCommand("Pause / resume", "stop or restart redrawing", self.action_pause)
        yield from self._screen_commands(screen)
        yield SystemCommand("Keys", "show every key", self.action_help)
        yield SystemCommand("Jump", ":host NAME, :job PID, :ps, :proc PID …", self.action_jump)
        yield SystemCommand("Overview", ":home: back to the overview, every screen above it closed",
                            lambda: self.jump("home"))
        for name, what in (("hosts", "every host"), ("jobs", "every job"), ("gpus", "every GPU of the fleet"),
                           ("log", "the warnings shown so far")):
            yield SystemCommand(f"View :{name}", what, lambda n=name: self.jump(n))
        for m in HEAT_METRICS:
            yield SystemCommand(f"Heatmap: {m.label}", f"key {m.key} on the overview",
                                lambda k=m.key: self.action_heatmap(k))
        for h in self.store.hosts()[:200]:
            yield SystemCommand(f"Host {h}", "open the host screen", lambda h=h: self.open_host(h))
        for j in self.store.jobs(self.window_s)[:200]:
            yield SystemCommand(f"Job {j.key}", f"{j.user} {j.tree_id}", lambda k=j.key: self.open_job(k))
        if self.replay is not None:  # the recording's others: a seek to where they ran
            shown = {j.key for j in self.store.jobs(self.window_s)}
            for key, span in list(self.replay.index.jobs.items())[:200]:
                if key not in shown:
                    yield SystemCommand(f"Job {key} (in the recording)", f"{span.user}: seek to where it ran",
                                        lambda k=key: self.jump(f"job {k}"))
