"""The app's data side: its source, the store between them, and when screens redraw.

Sources call ``emit`` from their threads; events queue under a lock and one ``SourceEvents``
message at a time drains them: 256 host samples cost one store update and one redraw (≤ 4/s).
:class:`StoreApp` holds what every screen reads (store, window, clock, host changes) and never
knows a screen class beyond :class:`~gpulens.tui.screens.base.DataScreen`; the keys and navigation
are :class:`~gpulens.tui.app_pause.PausableApp`'s and :class:`~gpulens.tui.app.GpulensApp`'s.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable

from textual.app import App
from textual.message import Message
from textual.notifications import SeverityLevel
from textual.screen import ModalScreen
from textual.timer import Timer

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
from gpulens.tui.replay import ReplayBar, ReplayControl
from gpulens.tui.screens.base import DataScreen
from gpulens.tui.widgets._lines import LazyLines
from gpulens.tui.widgets.header import AppHeader
from gpulens.tui.widgets.panel import panel_series

MIN_REFRESH_S = 0.25
BURST_S = 0.02
"""How long a redraw waits for the rest of a burst of samples (one per host, sent together)."""
_log = logging.getLogger("gpulens.tui.app")


class StoreApp(IdleInput, ThemeCache, App[int]):
    """An app handed its source: events into the store, the store's changes into redraws."""

    class SourceEvents(Message, namespace="gpulens_app"):
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

    def start_source(self) -> None:
        """Start the source (a recording: the replay control); a failure is said in the header."""
        if self.replay is not None:
            self.replay.start()
            self._started = True
            return
        try:
            self.source.start(self.emit)
        except Exception as err:  # any source's own failure: shown in the header; the UI stays up to say so
            _log.debug("source failed to start", exc_info=True)  # the header and :log say it
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

    def on_gpulens_app_source_events(self, _: StoreApp.SourceEvents) -> None:
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
        if not screen.is_mounted:  # pushed, not composed yet (its widgets are not there): it draws itself on mount
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
