"""What a screen's Profile panel shows of its profiling while py-spy samples: the countdown.

:class:`~gpulens.tui.profiling.Profiling` decides what to sample and keeps the result; this draws
its progress into the screen's :class:`~gpulens.tui.widgets.profile_panel.ProfilePanel` once a
second, only while that screen is the one shown.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from textual.timer import Timer

from gpulens.tui.widgets.profile_panel import ProfilePanel

if TYPE_CHECKING:
    from gpulens.tui.screens.base import DataScreen


class ProfileView:
    """The Profile panel of ``screen``: whether it is shown, and its countdown."""

    def __init__(self, screen: DataScreen) -> None:
        self.screen = screen
        self._timer: Timer | None = None
        self._doing = ""
        self._deadline = 0.0
        self._seconds = 0.0

    def mounted(self) -> bool:
        """Whether the screen is the one shown (its panel can be drawn)."""
        return self.screen.is_attached and self.screen.app.screen is self.screen

    def panel(self) -> ProfilePanel:
        """The screen's Profile panel."""
        return self.screen.query_one(ProfilePanel)

    def count_down(self, doing: str, deadline: float, seconds: float) -> None:
        """Say ``doing`` and the seconds left of ``seconds`` until ``deadline`` (``time.monotonic``), every second."""
        self.stop()
        self._doing, self._deadline, self._seconds = doing, deadline, seconds
        self.tick()
        self._timer = self.screen.set_interval(1.0, self.tick)

    def tick(self) -> None:
        """Draw the countdown (nothing while another screen is shown)."""
        if not self.mounted():
            return
        left = self._deadline - time.monotonic()
        seconds = self._seconds
        text = (f"{self._doing}: {max(round(left), 0)} s left of {seconds:g} s…" if left > 0.5
                else f"{self._doing}: {seconds:g} s done, reading py-spy's output…")
        self.panel().set_state(text)

    def stop(self) -> None:
        """Stop counting down."""
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
