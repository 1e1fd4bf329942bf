"""The flame graph screen: the widget plus breadcrumbs, search box, sandwich, table, thread picker and export.

Keys (besides the graph's own, see :mod:`gpulens.tui.widgets.flamegraph`):

=====  ==============================================================
T      choose the thread / profile (files with one per thread), or all merged
x      export the focused subtree (folded with integer counts, or speedscope)
q      quit
=====  ==============================================================
"""

from __future__ import annotations

import os
import re
from functools import partial
from typing import ClassVar

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Footer, Input, Static
from textual.worker import Worker

from gpulens.analysis.flame.errors import FlameError
from gpulens.analysis.flame.exporters import default_name
from gpulens.analysis.flame.group import ProfileGroup
from gpulens.analysis.flame.labels import format_value
from gpulens.analysis.flame.model import Profile
from gpulens.analysis.flame.query import frame_nodes, sandwich
from gpulens.analysis.flame.units import count_suffix
from gpulens.core.sanitize import clean_text
from gpulens.sources.flame_export import export_folded, export_speedscope
from gpulens.tui.screens.flame_views import (
    CrumbedScreen,
    ExportScreen,
    FlameHelpScreen,
    FunctionTableScreen,
    ProfilePickerScreen,
    SandwichScreen,
)
from gpulens.tui.widgets.flamegraph import FlameGraph
from gpulens.tui.widgets.ordered_input import OrderedInput
from gpulens.tui.workers import Background, notify_failure

WARM_INDEX_NODES = 50_000
WARM_INDEX_DELAY_S = 0.5


def _warm(profile: Profile) -> None:
    """Derive what the first frame skipped (every total, the frame -> nodes index)."""
    profile.node_total  # noqa: B018  # each is derived on first use
    profile.node_parent  # noqa: B018
    frame_nodes(profile)


def _stem(title: str) -> str:
    """A file-name stem from a profile title (``flame-train.py``)."""
    text = re.sub(r"[^A-Za-z0-9._-]+", "-", title.split(":")[0]).strip("-.")
    # The source's own extensions go: the export adds its format's (``train.folded`` gave ``.folded.folded``).
    text = _KNOWN_EXT.sub("", text)[:40].strip("-.")
    return f"flame-{text}" if text else "flame"


_KNOWN_EXT = re.compile(r"(\.(us|bytes|samples|folded|collapsed|txt|json|gz|speedscope|pb|pprof|pickle|svg))+$",
                        re.IGNORECASE)


class FlameScreen(CrumbedScreen[None]):
    """A full-screen flame graph of ``profile``; escape at the top focus level leaves.

    ``group``: the file's profiles when it has several (``T`` picks one);
    ``live``: the graph will be fed newer profiles (then ``p`` pauses them).
    The title line starts with the crumbs unless the app's header shows them (:class:`CrumbedScreen`).
    """

    crumb = "Flame graph"
    DEFAULT_CSS = """
    FlameScreen #flame-title { height: 1; background: $primary-muted; color: $foreground; padding: 0 1; }
    FlameScreen #flame-search { dock: bottom; display: none; }
    FlameScreen #flame-search.-open { display: block; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "leave", "Back"),
        Binding("T", "pick_profile", "Threads", key_display="T"),
        Binding("x", "export", "Export"),
        Binding("q", "app.quit", "Quit"),
    ]

    def __init__(self, profile: Profile, title: str = "", *, group: ProfileGroup | None = None,
                 choice: int | str | None = None, live: bool = False) -> None:
        super().__init__()
        self.profile = profile
        self.group = group if group is not None and len(group) > 1 else None
        self.choice = choice
        self.live = live
        self.title_text = title or (self.group.title if self.group else "") or profile.title or "flame graph"
        self.background = Background(self)
        """The index warm-up worker, cancelled when the screen goes."""

    def compose(self) -> ComposeResult:
        yield Static(self._title_line(), id="flame-title")
        yield FlameGraph(self.profile, live=self.live, id="flame")
        yield OrderedInput(placeholder="search (regex), enter to keep, esc to close", id="flame-search")
        yield Footer()

    @property
    def crumbs(self) -> str:
        """``gpulens › Overview › node01`` from the screens below this one, then ``Flame graph``."""
        try:
            stack = self.app.screen_stack
        except RuntimeError:  # not mounted yet (Textual's NoActiveAppError)
            stack = []
        below = [c for s in stack if s is not self and (c := str(getattr(s, "crumb", "") or ""))]
        root = "gpulens flame" if isinstance(self.app, FlameApp) else "gpulens"
        return " › ".join([root, *below, self.crumb])

    def _title_line(self) -> Text:
        p = self.profile
        unit = count_suffix(p.total, p.unit)  # "1 sample", "3,400 events (cycles)"; "1.2 ms" says it
        part = f"{self.group.label(self.choice)} (T: threads)  ·  " if self.group is not None else ""
        # The total before the title: a narrow terminal cuts the end of the line.
        line = f"{format_value(p.total, p.unit)}{unit}  ·  {part}{self.title_text}"
        # Plain text, not markup: thread names and titles are the profiled process's or the file's words.
        return Text(clean_text(line if self.has_header else f"{self.crumbs}  ·  {line}"))

    def header_mounted(self) -> None:
        """The app's header shows the crumbs: the title line leaves them out."""
        self.query_one("#flame-title", Static).update(self._title_line())

    @property
    def graph(self) -> FlameGraph:
        return self.query_one(FlameGraph)

    def on_mount(self) -> None:
        self.query_one("#flame-title", Static).update(self._title_line())
        self.graph.focus()
        if self.profile.n_nodes > WARM_INDEX_NODES:
            # The first search builds a frame -> nodes index: build it while the user reads,
            # once the first frame is on screen (the thread would hold the GIL against it).
            self.call_after_refresh(self.set_timer, WARM_INDEX_DELAY_S, self._warm_index)

    def _warm_index(self) -> None:
        self.background.start(partial(_warm, self.profile), name="indexing the flame graph", group="flame-index")

    def on_unmount(self) -> None:
        self.background.cancel()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """``T`` only for files with several profiles."""
        return self.group is not None if action == "pick_profile" else True

    def update_profile(self, profile: Profile) -> None:
        """Live refresh: the widget keeps focus, search and expansion."""
        self.profile = profile
        self.graph.live = True
        self.graph.update_profile(profile)
        self.query_one("#flame-title", Static).update(self._title_line())  # its total changed too

    def action_leave(self) -> None:
        """Close the search box, else leave the screen."""
        box = self.query_one("#flame-search", Input)
        if box.has_class("-open"):
            box.remove_class("-open")
            self.graph.focus()
            return
        self.dismiss(None)

    def action_pick_profile(self) -> None:
        """Choose the thread (profile) shown, or all merged."""
        group = self.group
        if group is None:
            return

        def chosen(choice: int | str | None) -> None:
            if choice is None or choice == self.choice:
                return
            try:
                profile = group.pick(choice)
            except FlameError as err:
                self.notify(str(err), severity="error")
                return
            self.choice, self.profile = choice, profile
            self.graph.show_profile(profile)
            self.query_one("#flame-title", Static).update(self._title_line())

        self.app.push_screen(ProfilePickerScreen(group, self.choice), chosen)

    def action_export(self) -> None:
        """Write the focused subtree (the whole graph at the top) to a file the user names."""
        graph = self.graph
        node = graph.focus_node
        what = "the whole graph" if node == 0 else f"the focus ({self.profile.label(node)})"
        default = default_name(self.profile, "folded", _stem(self.title_text))

        def chosen(path: str | None) -> None:
            if not path:
                return
            path = os.path.expanduser(path)
            try:
                write = export_speedscope if path.endswith(".json") else export_folded
                written = write(graph.profile, path, node)
            except FlameError as err:
                self.notify(str(err), severity="error", timeout=10)
                return
            self.notify(clean_text(written.message()), markup=False, timeout=10)  # names the file's event

        self.app.push_screen(ExportScreen(what, default), chosen)

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
        self.app.push_screen(SandwichScreen(sandwich(message.control.profile, message.node), self.crumbs))

    def on_flame_graph_table_requested(self, message: FlameGraph.TableRequested) -> None:
        def chosen(name: str | None) -> None:
            if name:
                self.query_one("#flame-search", Input).value = f"^{re.escape(name)}"
                self.graph.set_search(f"^{re.escape(name)}")

        self.app.push_screen(FunctionTableScreen(message.control.profile, self.crumbs), chosen)

    def on_flame_graph_help_requested(self, message: FlameGraph.HelpRequested) -> None:
        keys = message.control.key_help()
        if self.group is not None:
            keys.append(("T", "threads / profiles"))
        keys += [("x", "export focus"), ("q", "quit"), ("?", "this guide")]
        self.app.push_screen(FlameHelpScreen(keys))


class FlameApp(App[None]):
    """A minimal app showing one :class:`FlameScreen` (``gpulens flame FILE``)."""

    TITLE = "gpulens flame"
    BINDINGS: ClassVar[list[BindingType]] = [Binding("ctrl+c", "interrupt", "Quit", show=False, priority=True)]

    def __init__(self, profile: Profile, title: str = "", *, group: ProfileGroup | None = None,
                 choice: int | str | None = None) -> None:
        super().__init__()
        self.profile = profile
        self.flame_title = title
        self.group = group
        self.choice = choice

    def on_mount(self) -> None:
        screen = FlameScreen(self.profile, self.flame_title, group=self.group, choice=self.choice)
        self.push_screen(screen, lambda _: self.exit())

    def action_interrupt(self) -> None:
        """Ctrl-C: quit with 130, as a shell reports an interrupted command (``q`` and Esc quit with 0)."""
        self.exit(return_code=130)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """A background worker failed: say so."""
        notify_failure(self, event)


def run_flame_app(profile: Profile, title: str = "", *, group: ProfileGroup | None = None,
                  choice: int | str | None = None) -> int:
    """Run the flame graph full screen until the user leaves; the exit code (130: Ctrl-C or SIGINT,
    143: SIGTERM, 129: SIGHUP, else 0)."""
    from gpulens.tui.terminal import run_restoring_terminal

    app = FlameApp(profile, title, group=group, choice=choice)
    run_restoring_terminal(app)
    return int(app.return_code or 0)
