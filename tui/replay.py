"""A replay you can scrub: play, pause, seek and speed over a recording, on its own clock.

:class:`ReplayControl` drives a :class:`~gpulens.sources.replay.Scrubbable` source (a recording)
from the app's thread: the source indexes its file (a thread), then the
control starts at the beginning and plays at 1x, applying the records whose
time the position passes (read back from the file by offset, a few per
tick). A seek ahead by at most :data:`INCREMENTAL_SEEK_S` plays the records in
between; any other seek rebuilds the store in a worker, in two passes:
the :data:`SEEK_HISTORY_S` before the target first (shown at once), then the
whole history the store holds (``history_s``, 1 h by default) into a second
store that catches up with playback and is swapped in, so the 15m / 1h
windows and the job figures are whole again. Records are decoded
:data:`CHUNK_S` of recording time at a time (memory stays bounded: two
stores and one chunk). Every seek bumps a generation: a rebuild of an older
one stops at its next chunk and is never installed, so stores never mix.
:class:`ReplayBar` is the position bar every data screen shows while
replaying.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual.widget import Widget

from gpulens.core.errors import GpulensError
from gpulens.core.events import HostStatusEvent, SourceEvent, SourceStatusEvent
from gpulens.sources.replay import Scrubbable
from gpulens.store.store import Store
from gpulens.tui.screens.process import ProcessScreen

if TYPE_CHECKING:
    from gpulens.tui.app_data import StoreApp

TICK_S = 0.5
"""Wall time between two playback steps."""
SEEK_STEP_S = 10.0
"""What ← / → move the position by (shift: six times that)."""
SEEK_HISTORY_S = 300.0
"""The first pass of a seek: the store's fine (1 s) range before the target, shown at once."""
INCREMENTAL_SEEK_S = 60.0
"""A seek ahead by at most this plays the records in between instead of rebuilding the store."""
CHUNK_S = 30.0
"""Recording time decoded at once by a rebuild (16 hosts: 480 records); a newer seek stops it between two."""
ONE_PASS_RECORDS = 3000
"""A rebuild of at most this many records is done in one pass (under a second here)."""
CATCH_UP_S = 5.0
"""The second pass hands its store over once it is this close behind the playing position."""
CATCH_UP_PASSES = 200
"""At most this many CHUNK_S reads to catch up with playback (100 min of recording) before giving up."""
SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)


class _Superseded(Exception):
    """A newer seek started: this rebuild stops and installs nothing."""


class ReplayControl:
    """Position, play/pause and speed of one replay; the app calls it from its keys and jumps."""

    def __init__(self, app: StoreApp, source: Scrubbable) -> None:
        self.app = app
        self.source = source
        self.index = source.index
        self._target = math.nan
        self.position = math.nan
        """Where the replay is, in the recording's own clock (unix s); NaN while indexing."""
        self.playing = False
        self.speed = 1.0
        self.seeking = False
        """The first pass of a seek runs: the store does not show the position yet."""
        self.filling: float | None = None
        """The second pass runs (its progress, 0..1): older history is still being loaded."""
        self.loaded_from = math.nan
        """The oldest time the store holds records from (first pass: target - SEEK_HISTORY_S)."""
        self.generation = 0
        """Bumped by every rebuilding seek; a rebuild of an older generation is dropped."""
        self.installs: list[tuple[int, str, float]] = []
        """``(generation, pass, target)`` of every store swapped in (the last 16; tests and ``:log``)."""
        self._last_tick = 0.0
        self._index_timer: Any = None

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
        if self.ready:
            self.seek_to((self._target if self.seeking else self.position) + delta_s)

    def seek_to(self, t: float, then: Callable[[], Any] | None = None) -> None:
        """Move to ``t`` (clamped to the recording); ``then`` runs once the store shows it.

        A seek during a rebuild supersedes it (its worker stops at the next chunk).
        """
        if not self.ready:
            return
        t = min(max(t, self.index.start), self.index.end)
        self._target = t
        if not self.seeking and self.position <= t <= self.position + INCREMENTAL_SEEK_S:
            self._apply(self.index.events_between(self.position, t))  # a running second pass catches up
            self.position = t
            self._done(then)
            return
        self.generation += 1
        self.seeking, self.filling = True, None
        self.app.refresh_bar()
        gen = self.generation
        self.app.run_worker(lambda: self._rebuild(gen, t, then), name="replay seek", group="replay-seek",
                            thread=True, exit_on_error=False)

    # ---- the rebuild (a worker thread) -------------------------------------------
    def _rebuild(self, gen: int, t: float, then: Callable[[], Any] | None) -> None:
        """The history before ``t``: the last SEEK_HISTORY_S (unless all of it is small), then all of it."""
        full_from = t - self.app.store.history_s
        quick_from = t - SEEK_HISTORY_S
        two_pass = (self.index.count_between(full_from, quick_from) > 0
                    and self.index.count_between(full_from, t) > ONE_PASS_RECORDS)
        try:
            store, statuses = self._build(gen, quick_from if two_pass else full_from, t, None)
            self._call(gen, lambda: self._install_first(gen, t, store, statuses, two_pass, then))
            if not two_pass:
                return
            store, statuses = self._build(gen, full_from, t, lambda f: setattr(self, "filling", f))
            built = t
            for _ in range(CATCH_UP_PASSES):  # playback went on meanwhile
                if (ahead := min(self.position, built + CHUNK_S)) - built <= CATCH_UP_S:
                    break
                self._check(gen)
                events = self.index.events_between(built, ahead)
                store.apply_many(events)
                statuses += [e for e in events if isinstance(e, HostStatusEvent)]
                built = ahead
            else:  # playing faster than it decodes: give up rather than chase (or freeze the UI)
                self._call(gen, lambda: self._failed("older history not loaded: playback outran the decoder "
                                                     "(pause, then seek, to load it)", "warning"))
                return
            self._call(gen, lambda: self._install_full(gen, t, built, store, statuses))
        except _Superseded:
            return
        except (GpulensError, OSError, ValueError) as err:  # the file changed or went away: say so, stay
            message = f"replay seek failed: {err}"
            with contextlib.suppress(_Superseded):
                self._call(gen, lambda: self._failed(message))

    def _build(self, gen: int, after: float, upto: float,
               progress: Callable[[float], None] | None) -> tuple[Store, list[HostStatusEvent]]:
        """A fresh store fed the records in ``(after, upto]``, CHUNK_S at a time (raises _Superseded)."""
        old = self.app.store
        store = Store(resolution_s=old.resolution_s, history_s=old.history_s)
        statuses: list[HostStatusEvent] = []
        at = max(after, self.index.start - 1.0)
        first = at
        while at < upto:
            self._check(gen)
            step = min(upto, at + CHUNK_S)
            events = self.index.events_between(at, step)
            store.apply_many(events)
            statuses += [e for e in events if isinstance(e, HostStatusEvent)]
            at = step
            if progress is not None:
                progress((at - first) / ((upto - first) or 1.0))
                self._call(gen, self.app.refresh_bar)
        return store, statuses

    def _check(self, gen: int) -> None:
        if gen != self.generation:
            raise _Superseded

    def _call(self, gen: int, fn: Callable[[], Any]) -> None:
        """Run ``fn`` on the app's thread unless a newer seek started (then raise _Superseded)."""
        self._check(gen)
        try:
            self.app.call_from_thread(lambda: fn() if gen == self.generation else None)
        except RuntimeError as err:  # the app is closing
            raise _Superseded from err
        self._check(gen)

    # ---- installing (the app's thread) ---------------------------------------------
    def _install_first(self, gen: int, t: float, store: Store, statuses: list[HostStatusEvent],
                       more: bool, then: Callable[[], Any] | None) -> None:
        self._swap(gen, "first" if more else "whole", t, store, statuses)
        self.position = t
        self.loaded_from = max(self.index.start, t - (SEEK_HISTORY_S if more else store.history_s))
        self.seeking, self.filling = False, (0.0 if more else None)
        self._done(then)

    def _install_full(self, gen: int, t: float, built: float, store: Store,
                      statuses: list[HostStatusEvent]) -> None:
        """The whole history, brought up to the position playback reached meanwhile."""
        events = self.index.events_between(built, self.position)
        store.apply_many(events)
        self._swap(gen, "full", t, store, statuses + [e for e in events if isinstance(e, HostStatusEvent)])
        self.loaded_from = max(self.index.start, t - store.history_s)
        self.filling = None
        self.app.refresh_data(force=True)
        self.app.refresh_bar()

    def _swap(self, gen: int, kind: str, t: float, store: Store, statuses: list[HostStatusEvent]) -> None:
        for screen in self.app.screen_stack:  # an open process screen keeps recording its process
            if isinstance(screen, ProcessScreen):
                store.track_process(screen.host, screen.pid)
        self.app.replace_store(store, statuses)
        self.installs = [*self.installs[-15:], (gen, kind, t)]

    def _failed(self, message: str, severity: str = "error") -> None:
        self.seeking, self.filling = False, None
        self.app.note(message, severity)
        self.app.refresh_bar()

    def _done(self, then: Callable[[], Any] | None) -> None:
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
        filling = f" (history {self.filling:.0%})" if self.filling is not None else ""
        left = f" {state} {self.speed:g}x  {self._hms(self.position)}{filling} "
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
