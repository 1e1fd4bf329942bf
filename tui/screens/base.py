"""What every gpulens data screen shares: header, breadcrumbs, narrow layout, refresh."""

from __future__ import annotations

import importlib.util
import socket
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from textual import events, work
from textual.app import ComposeResult
from textual.containers import Grid
from textual.screen import Screen

from gpulens.tui.screens._plots import PlotSpec
from gpulens.tui.widgets.header import AppHeader
from gpulens.tui.widgets.panel import CustomPanel
from gpulens.tui.widgets.plot import TimeSeriesPlot
from gpulens.tui.widgets.profile_panel import ProfilePanel

if TYPE_CHECKING:
    from gpulens.tui.app import GpulensApp

NARROW_WIDTH = 100
PROFILE_S = 5.0
"""Seconds ``f`` samples the job's processes for."""


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

    def compose_plots(self, specs: Sequence[PlotSpec]) -> ComposeResult:
        """The screen's plot grid, then the user's custom panels from config.toml."""
        with Grid(id="plots", classes="plots"):
            for spec in specs:
                yield TimeSeriesPlot(spec.title, spec.fmt, lo=spec.lo, hi=spec.hi, id=spec.id)
        if self.gapp.cfg.panels:
            with Grid(id="custom", classes="plots"):
                for i, panel in enumerate(self.gapp.cfg.panels):
                    yield CustomPanel(panel, id=f"panel-{i}")

    # ---- Profile slot (flame-graph helper's FlameScreen) ------------------
    def profile_pids(self) -> list[int]:
        """The pids the Profile action samples (override); local processes only."""
        return []

    @staticmethod
    def is_local(host: str) -> bool:
        """True for this machine (py-spy and the trace service reach only local pids)."""
        return host == socket.gethostname()

    def _can_profile(self) -> bool:
        """False, with a notice, when there is nothing real to sample or no flame graphs."""
        if self.gapp.source.simulated:
            self.notify("SIMULATED data: there are no real processes to profile", severity="warning")
            return False
        if not (_has("gpulens.analysis.flame.pyspy") and _has("gpulens.tui.screens.flame")):
            self.notify("flame graphs not available", severity="warning")
            return False
        return True

    def action_profile(self) -> None:
        """Sample the processes' stacks with py-spy and open a flame graph."""
        if not self._can_profile():
            return
        pids = self.profile_pids()
        if pids:
            self.query_one(ProfilePanel).set_state(f"sampling {len(pids)} process(es) with py-spy for 5 s…")
            self._profile(pids)
            return
        remote = self.remote_profile_pids()
        source = self.gapp.source
        if remote and callable(getattr(source, "request", None)):
            host, host_pids = next(iter(remote.items()))
            more = f" (host 1 of {len(remote)})" if len(remote) > 1 else ""
            self.query_one(ProfilePanel).set_state(
                f"asking the agent on {host} to sample {len(host_pids)} process(es) with py-spy for "
                f"{PROFILE_S:g} s{more}…")
            self._profile_remote(host, host_pids)
            return
        where = "through an agent (--connect / --ssh)" if remote else "on this machine"
        self.notify(f"no job processes to profile {where}; this machine is {socket.gethostname()}",
                    severity="warning")

    def remote_profile_pids(self) -> dict[str, list[int]]:
        """Job pids on other hosts, by host, that an agent can sample (override)."""
        return {}

    @work(thread=True, exclusive=True, group="profile")
    def _profile_remote(self, host: str, pids: list[int]) -> None:

        from gpulens.analysis.flame.folded import parse_folded
        from gpulens.analysis.flame.pyspy import MAX_OUTPUT_BYTES
        from gpulens.core.limits import InputLimits, read_input

        panel = self.query_one(ProfilePanel)
        params = {"pids": pids, "duration_s": PROFILE_S, "rate_hz": 100}
        try:
            fut = self.gapp.source.request(host, "profile", params, PROFILE_S + 60.0)  # type: ignore[attr-defined]
            result = fut.result(timeout=PROFILE_S + 90.0)
            files = list(result.files.values())
            if len(files) != 1:
                raise RuntimeError(f"the agent sent {len(files)} files, expected 1")
            data = read_input(str(files[0]), InputLimits(max_bytes=MAX_OUTPUT_BYTES), what="folded profile")
            profile = parse_folded(bytes(data), source=str(files[0]),
                                   title=f"py-spy on {host}: {', '.join(map(str, pids))}")
        except Exception as err:  # shown in the panel: no agent, permission, py-spy missing...
            self.app.call_from_thread(panel.set_state, f"profile on {host} failed: {err}")
            return
        self.app.call_from_thread(self._show_flame, profile)

    @work(thread=True, exclusive=True, group="profile")
    def _profile(self, pids: list[int]) -> None:
        from gpulens.analysis.flame.pyspy import sample_pids

        panel = self.query_one(ProfilePanel)
        try:
            profile = sample_pids(pids, duration_s=PROFILE_S)
        except Exception as err:  # shown in the panel: permission, process gone...
            self.app.call_from_thread(panel.set_state, f"profile failed: {err}")
            return
        self.app.call_from_thread(self._show_flame, profile)

    def action_quick_look(self) -> None:
        """One ``py-spy dump`` per local process, merged into a flame graph (no waiting)."""
        if not self._can_profile():
            return
        pids = self.profile_pids()
        if pids:
            self.query_one(ProfilePanel).set_state(f"dumping the stacks of {len(pids)} process(es) with py-spy…")
            self._quick_look(pids)
            return
        if self.remote_profile_pids():
            self.notify("quick look (d) is local only; use f to sample through the agent", severity="warning")
            return
        self.notify(f"no job processes to profile on this machine; this machine is {socket.gethostname()}",
                    severity="warning")

    @work(thread=True, exclusive=True, group="profile")
    def _quick_look(self, pids: list[int]) -> None:
        from gpulens.analysis.flame.model import build_from_stacks
        from gpulens.analysis.flame.pyspy import dump

        panel = self.query_one(ProfilePanel)
        stacks: list[tuple[list[str], float]] = []
        errors: list[str] = []
        for pid in pids:
            try:
                part = dump(pid)
            except Exception as err:  # one gone process must not hide the others' stacks
                errors.append(str(err))
                continue
            # several processes: each one's threads under a "process PID" frame, as f does
            prefix = [f"process {pid}"] if len(pids) > 1 else []
            stacks.extend((prefix + list(frames), value) for frames, value in part.stacks())
        if not stacks:
            self.app.call_from_thread(panel.set_state, f"quick look failed: {errors[0] if errors else 'no stacks'}")
            return
        if errors:  # some processes dumped, others not: say so rather than show a silent partial graph
            self.app.call_from_thread(self.notify, f"{len(errors)} of {len(pids)} dumps failed: {errors[0]}",
                                      severity="warning")
        title = "py-spy dump: " + ", ".join(map(str, pids))
        profile = build_from_stacks(stacks, "samples", title)
        self.app.call_from_thread(self._show_flame, profile, title)

    def _show_flame(self, profile: Any, title: str = "") -> None:
        from gpulens.tui.screens.flame import FlameScreen

        self.query_one(ProfilePanel).set_state(ProfilePanel.idle_text(self.profile_count()))
        self.app.push_screen(FlameScreen(profile, title=title))

    def profile_count(self) -> int:
        """How many processes ``f`` would sample (here, or else through an agent)."""
        if self.gapp.source.simulated:
            return 0
        return len(self.profile_pids()) or sum(len(p) for p in self.remote_profile_pids().values())


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False
