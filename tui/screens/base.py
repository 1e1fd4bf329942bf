"""What every gpulens data screen shares: header, breadcrumbs, narrow layout, refresh."""

from __future__ import annotations

import importlib.util
import socket
from typing import TYPE_CHECKING, Any, cast

from textual import events, work
from textual.screen import Screen

from ..widgets.header import AppHeader
from ..widgets.profile_panel import ProfilePanel

if TYPE_CHECKING:
    from ..app import GpulensApp

NARROW_WIDTH = 100


class DataScreen(Screen[None]):
    """A screen fed by the store; the app calls :meth:`refresh_data` after new data."""

    crumb = "Overview"

    @property
    def gapp(self) -> GpulensApp:
        """The app, typed."""
        return cast("GpulensApp", self.app)

    def on_resize(self, event: events.Resize) -> None:
        """The ``.narrow`` layout below 100 columns (80x24 works)."""
        self.set_class(event.size.width < NARROW_WIDTH, "narrow")

    def on_screen_resume(self) -> None:
        """Back on top (after Esc): catch up with the data."""
        self.set_class(self.app.size.width < NARROW_WIDTH, "narrow")
        self.refresh_data(force=True)

    def update_header(self) -> None:
        """Breadcrumbs and state from the app."""
        app = self.gapp
        header = self.query_one(AppHeader)
        header.crumbs = ("gpulens", *(getattr(s, "crumb", "") for s in app.screen_stack
                                      if isinstance(s, DataScreen)))
        header.source = app.source.name
        header.simulated = app.source.simulated
        header.window = app.window
        header.paused = app.paused
        status = app.store.source_status
        header.status = (status.message, status.ok) if status else ("", True)
        header.clock = app.clock_text()

    def refresh_data(self, force: bool = False) -> None:
        """Redraw what changed in the store (override; call super for the header)."""
        self.update_header()

    # ---- Profile slot (flame-graph helper's FlameScreen) ------------------
    def profile_pids(self) -> list[int]:
        """The pids the Profile action samples (override); local processes only."""
        return []

    @staticmethod
    def is_local(host: str) -> bool:
        """True for this machine (py-spy and the trace service reach only local pids)."""
        return host == socket.gethostname()

    def action_profile(self) -> None:
        """Sample the processes' stacks with py-spy and open a flame graph."""
        if self.gapp.source.simulated:
            self.notify("SIMULATED data: there are no real processes to profile", severity="warning")
            return
        if not (_has("gpulens.collectors.flame.pyspy") and _has("gpulens.tui.screens.flame")):
            self.notify("flame graphs not available", severity="warning")
            return
        pids = self.profile_pids()
        if not pids:
            self.notify(f"no job processes on this machine ({socket.gethostname()}) to profile; "
                        "py-spy samples local processes only", severity="warning")
            return
        self.query_one(ProfilePanel).set_state(f"sampling {len(pids)} process(es) with py-spy for 5 s…")
        self._profile(pids)

    @work(thread=True, exclusive=True, group="profile")
    def _profile(self, pids: list[int]) -> None:
        from gpulens.collectors.flame.pyspy import sample_pids

        panel = self.query_one(ProfilePanel)
        try:
            profile = sample_pids(pids, duration_s=5.0)
        except Exception as err:  # shown in the panel: permission, process gone...
            self.app.call_from_thread(panel.set_state, f"profile failed: {err}")
            return
        self.app.call_from_thread(self._show_flame, profile)

    def _show_flame(self, profile: Any) -> None:
        from gpulens.tui.screens.flame import FlameScreen

        self.query_one(ProfilePanel).set_state(ProfilePanel.idle_text(len(self.profile_pids())))
        self.app.push_screen(FlameScreen(profile))


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False
