"""A replay you can scrub: play, pause, seek and speed over a recording, on its own clock.

:class:`ReplayControl` drives a :class:`~gpulens.sources.local.ReplaySource`
from the app's thread: the source indexes its file (a thread), then the
control starts at the beginning and plays at 1x, applying the records whose
time the position passes (read back from the file by offset, a few per
tick). A seek backwards (or far ahead) builds a fresh store in a worker from
the :data:`SEEK_HISTORY_S` before the target (older history shows as gaps until
played through) and hands it to the app. :class:`ReplayBar` is the position
bar every data screen shows while replaying.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual.widget import Widget

from gpulens.core.events import HostStatusEvent, SourceEvent, SourceStatusEvent
from gpulens.sources.local import ReplaySource
from gpulens.store.store import Store

if TYPE_CHECKING:
    from gpulens.tui.app import GpulensApp

TICK_S = 0.5
"""Wall time between two playback steps."""
SEEK_STEP_S = 10.0
"""What ← / → move the position by (shift: six times that)."""
SEEK_HISTORY_S = 300.0
"""History loaded before a seek target: the store's fine (1 s) range."""
INCREMENTAL_SEEK_S = 60.0
"""A seek ahead by at most this plays the records in between instead of rebuilding the store."""
SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)


class ReplayControl:
    """Position, play/pause and speed of one replay; the app calls it from its keys and jumps."""

    def __init__(self, app: GpulensApp, source: ReplaySource) -> None:
        self.app = app
        self.source = source
        self.index = source.index
        self._target = math.nan
        self.position = math.nan
        """Where the replay is, in the recording's own clock (unix s); NaN while indexing."""
        self.playing = False
        self.speed = 1.0
        self.seeking = False
        self.loaded_from = math.nan
        """The oldest time the store holds records from (after a seek: target - SEEK_HISTORY_S)."""
        self._last_tick = 0.0
        self._index_timer: Any = None
        self._queued: float | None = None
        """Seek keys pressed while a seek runs add up here (no key is lost)."""

    # ---- lifecycle ------------------------------------------------------------
    def start(self) -> None:
        """Index the file in a thread; the first records show once it is done."""
        self.source.build_index()
        self._index_timer = self.app.set_interval(0.2, self._wait_for_index, name="replay-index")

    def _wait_for_index(self) -> None:
        if self.position == self.position or not self.index.done.is_set():
            return
        if self._index_timer is not None:
            self._index_timer.stop()
        if self.index.error:
            self.app.note(f"replay: {self.index.error} (replaying the records before it)", "error")
        if not len(self.index):
            self.app.emit(SourceStatusEvent(message=f"{self.source.path}: no records to replay", ok=False,
                                            time=time.time()))
            return
        self.position = self.loaded_from = self.index.start
        self._apply(self.index.events_between(-math.inf, self.position))
        self.playing = True
        self._last_tick = time.monotonic()
        self.app.set_interval(TICK_S, self._tick, name="replay-tick")
        self.app.refresh_data(force=True)

    def _apply(self, events: list[SourceEvent]) -> None:
        for e in events:
            if isinstance(e, HostStatusEvent):
                self.app.note_host_status(e)
        if self.app.store.apply_many(events):
            self.app.schedule_refresh()  # rate-limited like live data (``:interval``)

    def _tick(self) -> None:
        now = time.monotonic()
        dt, self._last_tick = now - self._last_tick, now
        if not self.playing or self.seeking or self.position != self.position:
            return
        target = min(self.index.end, self.position + dt * self.speed)
        self._apply(self.index.events_between(self.position, target))
        self.position = target
        if target >= self.index.end:
            self.playing = False
            self.app.notify("end of the recording (space plays it again from the start)", timeout=4)
        self.app.refresh_bar()

    # ---- keys -----------------------------------------------------------------
    @property
    def ready(self) -> bool:
        """The index is built and the replay has a position."""
        return self.position == self.position

    def toggle(self) -> None:
        """Space: play or pause (at the end: from the start again)."""
        if not self.ready:
            return
        if not self.playing and self.position >= self.index.end:
            self.seek_to(self.index.start, then=lambda: setattr(self, "playing", True))
            return
        self.playing = not self.playing
        self._last_tick = time.monotonic()
        self.app.refresh_bar()

    def change_speed(self, faster: bool) -> None:
        """``[`` / ``]``: half or double speed."""
        at = min(range(len(SPEEDS)), key=lambda i: abs(SPEEDS[i] - self.speed))
        self.speed = SPEEDS[max(0, min(len(SPEEDS) - 1, at + (1 if faster else -1)))]
        self.app.refresh_bar()

    def seek_by(self, delta_s: float) -> None:
        """← / →: move the position (pressed during a seek: from where that seek lands)."""
        if not self.ready:
            return
        if self.seeking:
            self._queued = (self._queued if self._queued is not None else self._target) + delta_s
            return
        self.seek_to(self.position + delta_s)

    def seek_to(self, t: float, then: Callable[[], Any] | None = None) -> None:
        """Move to ``t`` (clamped to the recording); ``then`` runs once the store shows it."""
        if not self.ready or self.seeking:
            return
        t = min(max(t, self.index.start), self.index.end)
        self._target = t
        if self.position <= t <= self.position + INCREMENTAL_SEEK_S:
            self._apply(self.index.events_between(self.position, t))
            self.position = t
            self._done(then)
            return
        self.seeking = True
        self.app.refresh_bar()
        self.app.run_worker(lambda: self._rebuild(t, then), name="replay seek", group="replay-seek",
                            thread=True, exit_on_error=False)

    def _rebuild(self, t: float, then: Callable[[], Any] | None) -> None:
        """In a worker: a store holding the history before ``t``; the app swaps it in."""
        store = Store(resolution_s=self.app.store.resolution_s, history_s=self.app.store.history_s)
        try:
            events = self.index.events_between(t - SEEK_HISTORY_S, t)
            store.apply_many(events)
        except Exception as err:  # the file changed or went away: say so, stay where we are
            message = f"replay seek failed: {err}"

            def failed() -> None:
                self.seeking, self._queued = False, None
                self.app.note(message, "error")
                self.app.refresh_bar()

            self.app.call_from_thread(failed)
            return

        def install() -> None:
            self.app.replace_store(store, [e for e in events if isinstance(e, HostStatusEvent)])
            self.position, self.loaded_from = t, max(self.index.start, t - SEEK_HISTORY_S)
            self.seeking = False
            self._done(then)

        self.app.call_from_thread(install)

    def _done(self, then: Callable[[], Any] | None) -> None:
        if self._queued is not None:
            queued, self._queued = self._queued, None
            self.seek_to(queued, then)
            return
        self._last_tick = time.monotonic()
        self.app.refresh_data(force=True)
        self.app.refresh_bar()
        if then is not None:
            then()

    # ---- reaching what is not on screen now ------------------------------------
    def reach_job(self, text: str, open_it: Callable[[str], Any]) -> str | None:
        """Seek to where job ``text`` (key or pid) ran, then open it; a message, or None if unknown."""
        job = self.index.find_job(text)
        if job is None:
            return None
        t = job.span.clamp(self.position)
        self.seek_to(t, then=lambda: open_it(job.key))
        return f"job {job.key} ran {self._hms(job.span.first)}–{self._hms(job.span.last)}: at {self._hms(t)}"

    def reach_host(self, text: str, open_it: Callable[[str], Any]) -> str | None:
        """Seek to where host ``text`` reported, then open it; a message, or None if unknown."""
        found = self.index.find_host(text)
        if found is None:
            return None
        host, span = found
        t = span.clamp(self.position)
        self.seek_to(t, then=lambda: open_it(host))
        return f"{host} reported {self._hms(span.first)}–{self._hms(span.last)}: at {self._hms(t)}"

    def _hms(self, t: float) -> str:
        return self.app.clock_text(t)

    # ---- the bar ----------------------------------------------------------------
    def bar_text(self, width: int) -> Text:
        """``▶ 2x 10:12:05 ━━━━●────── 10:02:00–10:42:00  space ←→ [ ]``."""
        if not self.ready:
            done = "" if not self.index.done.is_set() else " (empty)"
            return Text(f" replay: indexing {self.source.path}{done}…", style="bold")
        state = "seeking…" if self.seeking else ("▶" if self.playing else "❚❚")
        left = f" {state} {self.speed:g}x  {self._hms(self.position)} "
        right = f" {self._hms(self.index.start)}–{self._hms(self.index.end)}"
        keys = "  space ←→ [ ]"
        if width - len(left) - len(right) - len(keys) >= 12:
            right += keys
        room = max(4, width - len(left) - len(right))
        span = (self.index.end - self.index.start) or 1.0
        at = round((self.position - self.index.start) / span * (room - 1))
        text = Text(left, style="bold")
        text.append("━" * at, style="bold")
        text.append("●", style="bold reverse" if self.seeking else "bold")
        text.append("─" * (room - at - 1))
        text.append(right)
        return text


class ReplayBar(Widget):
    """The position bar: state, speed, position on the recording's clock, and its span."""

    DEFAULT_CSS = """
    ReplayBar { dock: bottom; height: 1; margin-bottom: 1; background: $panel; color: $text; }
    """

    def __init__(self, control: ReplayControl, *, name: str | None = None, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.control = control

    def render(self) -> Text:
        """One line, redrawn on each playback step."""
        return self.control.bar_text(self.size.width)
