"""The flame graph screen: the widget plus search box, sandwich, table and guide."""

from __future__ import annotations

import re
from functools import partial
from typing import ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Footer, Input, Static
from textual.worker import Worker

from gpulens.analysis.flame.labels import format_value
from gpulens.analysis.flame.model import Profile
from gpulens.analysis.flame.query import frame_nodes, sandwich
from gpulens.tui.screens.flame_views import FlameHelpScreen, FunctionTableScreen, SandwichScreen
from gpulens.tui.widgets.flamegraph import FlameGraph
from gpulens.tui.workers import Background, notify_failure

WARM_INDEX_NODES = 50_000
WARM_INDEX_DELAY_S = 0.5


def _warm(profile: Profile) -> None:
    """Derive what the first frame skipped (every total, the frame -> nodes index)."""
    profile.node_total  # noqa: B018  # each is derived on first use
    profile.node_parent  # noqa: B018
    frame_nodes(profile)


class FlameScreen(Screen[None]):
    """A full-screen flame graph of ``profile``; escape at the top focus level leaves."""

    DEFAULT_CSS = """
    FlameScreen #flame-title { height: 1; background: $primary-muted; color: $foreground; padding: 0 1; }
    FlameScreen #flame-search { dock: bottom; display: none; }
    FlameScreen #flame-search.-open { display: block; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "leave", "Back")]

    def __init__(self, profile: Profile, title: str = "") -> None:
        super().__init__()
        self.profile = profile
        self.title_text = title or profile.title or "flame graph"
        self.background = Background(self)
        """The index warm-up worker, cancelled when the screen goes."""

    def compose(self) -> ComposeResult:
        p = self.profile
        yield Static(
            f"{self.title_text}  ·  {format_value(p.total, p.unit)} {p.unit if p.unit == 'samples' else ''}".rstrip(),
            id="flame-title",
        )
        yield FlameGraph(p, id="flame")
        yield Input(placeholder="search (regex), enter to keep, esc to close", id="flame-search")
        yield Footer()

    @property
    def graph(self) -> FlameGraph:
        return self.query_one(FlameGraph)

    def on_mount(self) -> None:
        self.graph.focus()
        if self.profile.n_nodes > WARM_INDEX_NODES:
            # The first search builds a frame -> nodes index: build it while the user reads,
            # once the first frame is on screen (the thread would hold the GIL against it).
            self.call_after_refresh(self.set_timer, WARM_INDEX_DELAY_S, self._warm_index)

    def _warm_index(self) -> None:
        self.background.start(partial(_warm, self.profile), name="indexing the flame graph", group="flame-index")

    def on_unmount(self) -> None:
        self.background.cancel()

    def update_profile(self, profile: Profile) -> None:
        """Live refresh: the widget keeps focus, search and expansion."""
        self.profile = profile
        self.graph.update_profile(profile)

    def action_leave(self) -> None:
        """Close the search box, else leave the screen."""
        box = self.query_one("#flame-search", Input)
        if box.has_class("-open"):
            box.remove_class("-open")
            self.graph.focus()
            return
        self.dismiss(None)

    def on_flame_graph_search_requested(self) -> None:
        box = self.query_one("#flame-search", Input)
        box.add_class("-open")
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.graph.set_search(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.input.remove_class("-open")
        self.graph.focus()

    def on_flame_graph_search_cleared(self) -> None:
        box = self.query_one("#flame-search", Input)
        with box.prevent(Input.Changed):
            box.value = ""

    def on_flame_graph_sandwich_requested(self, message: FlameGraph.SandwichRequested) -> None:
        self.app.push_screen(SandwichScreen(sandwich(message.control.profile, message.node)))

    def on_flame_graph_table_requested(self, message: FlameGraph.TableRequested) -> None:
        def chosen(name: str | None) -> None:
            if name:
                self.query_one("#flame-search", Input).value = f"^{re.escape(name)}"
                self.graph.set_search(f"^{re.escape(name)}")

        self.app.push_screen(FunctionTableScreen(message.control.profile), chosen)

    def on_flame_graph_help_requested(self) -> None:
        self.app.push_screen(FlameHelpScreen())


class FlameApp(App[None]):
    """A minimal app showing one :class:`FlameScreen` (``gpulens flame FILE``)."""

    TITLE = "gpulens flame"

    def __init__(self, profile: Profile, title: str = "") -> None:
        super().__init__()
        self.profile = profile
        self.flame_title = title

    def on_mount(self) -> None:
        self.push_screen(FlameScreen(self.profile, self.flame_title), lambda _: self.exit())

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """A background worker failed: say so."""
        notify_failure(self, event)


def run_flame_app(profile: Profile, title: str = "") -> None:
    """Run the flame graph full screen until the user leaves."""
    FlameApp(profile, title).run()
