"""The flame graph's view: what it shows (focus, selection, search) and how it is drawn.

:class:`FlameView` keeps the navigation state over a :class:`~gpulens.analysis.flame.model.Profile`
and draws it line by line (the drawing itself is :mod:`gpulens.tui.widgets.flame_draw`'s); the
keys and the messages to the screen are :class:`~gpulens.tui.widgets.flamegraph.FlameGraph`'s.
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.events import Click, Resize
from textual.reactive import reactive
from textual.strip import Strip
from textual.widget import Widget

from gpulens.analysis.flame.errors import FlameError
from gpulens.analysis.flame.model import Profile
from gpulens.analysis.flame.query import SearchResult, find_path, path_of, search
from gpulens.tui.widgets.flame_draw import fit_status, flame_palette, row_segments, status_text
from gpulens.tui.widgets.flame_layout import Layout, Span, compute_layout


class FlameView(Widget):
    """A flame graph of a :class:`Profile`: its focus, selection and search, drawn root at the bottom."""

    collapsed: reactive[bool] = reactive(False)
    """Show linear chains of single-child frames as one bar."""
    paused: reactive[bool] = reactive(False)
    """Hold live updates; the newest profile is applied on resume."""

    def __init__(
        self, profile: Profile, *, live: bool = False,
        name: str | None = None, id: str | None = None, classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.live = live
        """Fed newer profiles (:meth:`update_profile`): only then does ``p`` pause."""
        self._profile = profile
        self._pending: Profile | None = None
        self.focus_history: list[int] = []
        self._focus = 0
        self.selected = 0
        self._search: SearchResult | None = None
        self._search_error = ""
        self._layout: Layout | None = None
        self._layout_key: tuple[int, int, int, bool] | None = None
        self._row_offset = 0
        self._palette: list[tuple[Style, Style]] | None = None
        self._palette_theme = ""

    @property
    def profile(self) -> Profile:
        return self._profile

    @property
    def focus_node(self) -> int:
        return self._focus

    def update_profile(self, profile: Profile) -> None:
        """Show a new profile, keeping focus, selection, search and expansion (unless paused)."""
        if self.paused:
            self._pending = profile
            self.refresh(layout=False)
            return
        old = self._profile
        history = [path_of(old, n) for n in self.focus_history]
        focus, selected = path_of(old, self._focus), path_of(old, self.selected)
        self._profile = profile
        self.focus_history = [find_path(profile, p) for p in history]
        self._focus = find_path(profile, focus)
        self.selected = find_path(profile, selected)
        if self._search is not None:
            self._run_search(self._search.pattern)
        self._invalidate()

    def show_profile(self, profile: Profile) -> None:
        """Show another profile from the start (another thread of the file): focus and history reset."""
        self._profile, self._pending = profile, None
        self.focus_history, self._focus, self.selected = [], 0, 0
        if self._search is not None:
            self._run_search(self._search.pattern)
        self._invalidate()

    def set_search(self, pattern: str | None) -> None:
        """Highlight frames matching ``pattern`` (a regex); None or "" clears."""
        if not pattern:
            self._search, self._search_error = None, ""
        else:
            self._run_search(pattern)
        self.refresh()

    def focus_on(self, node: int) -> None:
        """Focus ``node`` (pushed on the focus history)."""
        if node != self._focus:
            self.focus_history.append(self._focus)
            self._focus = node
        self.selected = node
        self._invalidate()

    # -- state --------------------------------------------------------------

    def _run_search(self, pattern: str) -> None:
        try:
            self._search = search(self._profile, pattern, self._focus)
            self._search_error = ""
        except FlameError as err:
            self._search, self._search_error = None, str(err)

    def _invalidate(self) -> None:
        self._layout = None
        if self._search is None:
            self._search_error = ""  # focus, collapse or another profile: a refused pattern is old news
        if self._search is not None and self._search.root != self._focus:
            self._run_search(self._search.pattern)
        self.refresh()

    def watch_collapsed(self) -> None:
        self._invalidate()

    def watch_paused(self, paused: bool) -> None:
        if not paused and self._pending is not None:
            pending, self._pending = self._pending, None
            self.update_profile(pending)
        self.refresh()

    def on_resize(self, event: Resize) -> None:
        self._layout = None

    def on_click(self, event: Click) -> None:
        """Select the bar under the mouse; a double click focuses it."""
        layout = self.layout_now
        graph_h = max(self.size.height - 1, 1)
        row = self._row_offset + (graph_h - 1 - event.y)
        if not 0 <= row < len(layout.rows) or event.y >= graph_h:
            return
        span = next((s for s in layout.rows[row] if s.x0 <= event.x < s.x1), None)
        if span is not None:
            self.selected = span.node
            if event.chain >= 2:
                self.focus_on(span.node)
            self.refresh()

    @property

    def layout_now(self) -> Layout:
        """The current layout (recomputed when focus, width or expansion changed)."""
        key = (id(self._profile), self._focus, self.size.width, self.collapsed)
        if self._layout is None or self._layout_key != key:
            self._layout = compute_layout(self._profile, self._focus, self.size.width, self.collapsed)
            self._layout_key = key
            if self.selected not in self._layout.by_node:
                self.selected = self._focus
        return self._layout

    def _selected_span(self) -> Span:
        layout = self.layout_now
        return layout.by_node.get(self.selected) or layout.by_node[self._focus]

    # -- drawing ------------------------------------------------------------

    def _styles(self) -> list[tuple[Style, Style]]:
        theme = self.app.current_theme
        if self._palette is None or self._palette_theme != theme.name:
            self._palette, self._palette_theme = flame_palette(theme.dark), theme.name
        return self._palette

    def render_line(self, y: int) -> Strip:
        width, height = self.size.width, self.size.height
        if y == height - 1:
            status = self.get_component_rich_style("flamegraph--status")
            return Strip([Segment(fit_status(self._status_text(), width), status)], width)
        layout = self.layout_now
        graph_h = max(height - 1, 1)
        sel = self._selected_span()
        if sel.row < self._row_offset:
            self._row_offset = sel.row
        elif sel.row >= self._row_offset + graph_h:
            self._row_offset = sel.row - graph_h + 1
        row_index = self._row_offset + (graph_h - 1 - y)
        empty = self.get_component_rich_style("flamegraph--empty")
        if row_index < 0 or row_index >= len(layout.rows):
            return Strip([Segment(" " * width, empty)], width)
        segments = row_segments(layout.rows[row_index], self._profile, width, self._styles(), self._search,
                                self.selected, empty=empty, dim=self.get_component_rich_style("flamegraph--dim"),
                                selected_style=self.get_component_rich_style("flamegraph--selected"))
        return Strip(segments, width)

    def _status_text(self) -> str:
        return status_text(self._profile, self._selected_span(), self._focus, self._search, self._search_error,
                           self.paused, self._pending is not None)
