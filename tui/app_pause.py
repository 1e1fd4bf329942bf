"""The app's keys over time: pause, the statistics window, the redraw interval, a replay's.

:class:`PausableApp` freezes what the screens draw at one instant (``tui.frozen``) while data keeps
being recorded, and steers a recording's replay (:class:`~gpulens.tui.replay.ReplayControl`).
"""

from __future__ import annotations

from gpulens.tui.app_data import MIN_REFRESH_S, StoreApp
from gpulens.tui.screens.base import DataScreen


class PausableApp(StoreApp):
    """Pause / resume, the window keys, ``:interval`` and the replay's keys (their bindings: ``GpulensApp``)."""

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
        if not (self.paused and isinstance(screen, DataScreen) and screen.is_mounted):
            self.refresh_data(force=True)  # which skips a screen not composed yet: it draws itself on mount
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
