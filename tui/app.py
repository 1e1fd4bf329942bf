"""GpulensApp: the TUI, handed its source; the store sits between them.

The app is the screens' :class:`~gpulens.tui.context.ScreenContext` and routes the navigation
messages they post (:mod:`gpulens.tui.messages`); screens never import it. Its one
``Worker.StateChanged`` handler shows any background worker's failure.

It is built in three layers, each a module: the data side (source, store, redraws:
:class:`~gpulens.tui.app_data.StoreApp`), the keys over time (pause, window, replay:
:class:`~gpulens.tui.app_pause.PausableApp`), and here the keys, navigation and command palette.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from typing import Any, ClassVar

from textual.actions import SkipAction
from textual.app import ScreenStackError, SystemCommand
from textual.binding import Binding, BindingType
from textual.screen import ModalScreen, Screen
from textual.widgets import Input
from textual.worker import Worker

from gpulens.core.config import WINDOWS
from gpulens.ipc.kineto.protocol import TraceService
from gpulens.tui.app_data import BURST_S, MIN_REFRESH_S
from gpulens.tui.app_pause import PausableApp
from gpulens.tui.messages import OpenFlame, OpenHost, OpenJob, OpenProfiler
from gpulens.tui.palette import binding_commands
from gpulens.tui.profiling import refusal
from gpulens.tui.replay import SEEK_STEP_S, ReplayBar
from gpulens.tui.screens.base import DataScreen
from gpulens.tui.screens.help import HelpScreen
from gpulens.tui.screens.host import HostScreen
from gpulens.tui.screens.job import JobScreen
from gpulens.tui.screens.jump import JumpScreen
from gpulens.tui.screens.jump_targets import run_jump
from gpulens.tui.screens.overview import OverviewScreen
from gpulens.tui.widgets.header import AppHeader
from gpulens.tui.widgets.heatmap import HEAT_METRICS
from gpulens.tui.workers import notify_failure

__all__ = ["BURST_S", "MIN_REFRESH_S", "GpulensApp"]


class GpulensApp(PausableApp):
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

    def on_mount(self) -> None:
        """Open the overview, then start the source (a recording: the replay control)."""
        signal = getattr(self, "screen_change_signal", None)  # Textual >= 8
        if signal is not None:
            signal.subscribe(self, self._screen_changed)
        else:  # older Textual (the floor in pyproject.toml): notice a new screen on a light timer
            self._last_screen: int | None = None
            self.set_interval(0.2, self._check_screen)
        self.push_screen(OverviewScreen(context=self))
        self.start_source()

    # ---- every screen: breadcrumbs, the replay bar ---------------------------
    def _check_screen(self) -> None:
        try:
            screen = self.screen
        except ScreenStackError:  # no screen yet
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
