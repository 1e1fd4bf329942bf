"""An interactive flame graph: root at the bottom, width in proportion to value.

Keys:

=================  ==================================================
arrows / hjkl      move: up = into a child, down = to the caller, left/right = neighbours
enter              focus the selected frame (it becomes full width)
escape, backspace  back up the focus history (at the top: leave)
/                  search (regex): matches highlighted, others dimmed
n / N              next / previous match
e / c              expand everything / collapse chains of single-child frames
s                  sandwich: callers and callees of the selected function
t                  table of functions by self and total
p                  pause live updates (only on a live graph: ``live=True``)
?                  how to read a flame graph
=================  ==================================================
"""

from __future__ import annotations

from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from textual.actions import SkipAction
from textual.binding import Binding, BindingType
from textual.color import Color
from textual.events import Click, Resize
from textual.message import Message
from textual.reactive import reactive
from textual.strip import Strip
from textual.widget import Widget

from gpulens.analysis.flame.errors import FlameError
from gpulens.analysis.flame.labels import colour_index, format_value
from gpulens.analysis.flame.model import Profile
from gpulens.analysis.flame.query import SearchResult, find_path, path_of, search
from gpulens.tui.widgets.flame_layout import Layout, Span, compute_layout


class _FlameMessage(Message):
    """A request from a :class:`FlameGraph` to its screen."""

    def __init__(self, control: FlameGraph) -> None:
        super().__init__()
        self.flamegraph = control

    @property
    def control(self) -> FlameGraph:
        return self.flamegraph


class FlameGraph(Widget, can_focus=True):
    """A flame graph of a :class:`Profile` drawn line by line (see the module docstring)."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"flamegraph--status", "flamegraph--selected", "flamegraph--dim", "flamegraph--empty"}

    DEFAULT_CSS = """
    FlameGraph {
        height: 1fr;
        width: 1fr;
    }
    FlameGraph > .flamegraph--status {
        background: $panel;
        color: $foreground;
    }
    FlameGraph > .flamegraph--selected {
        text-style: bold reverse;
    }
    FlameGraph > .flamegraph--dim {
        background: $surface;
        color: $foreground-muted;
    }
    FlameGraph > .flamegraph--empty {
        background: $background;
    }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up,k", "move('up')", "Child", show=False),
        Binding("down,j", "move('down')", "Caller", show=False),
        Binding("left,h", "move('left')", "Left", show=False),
        Binding("right,l", "move('right')", "Right", show=False),
        Binding("enter", "focus_frame", "Focus"),
        Binding("escape,backspace", "unfocus", "Back"),
        Binding("slash", "search", "Search"),
        Binding("n", "next_match(1)", "Next", show=False),
        Binding("N", "next_match(-1)", "Prev", show=False),
        Binding("e", "expand", "Expand", show=False),
        Binding("c", "collapse", "Collapse", show=False),
        Binding("s", "sandwich", "Sandwich"),
        Binding("t", "table", "Functions"),
        Binding("p", "pause", "Pause"),
        Binding("question_mark", "help", "Help"),
    ]

    collapsed: reactive[bool] = reactive(False)
    """Show linear chains of single-child frames as one bar."""
    paused: reactive[bool] = reactive(False)
    """Hold live updates; the newest profile is applied on resume."""

    class SandwichRequested(_FlameMessage):
        """The user asked for callers and callees of ``node``."""

        def __init__(self, control: FlameGraph, node: int) -> None:
            super().__init__(control)
            self.node = node

    class TableRequested(_FlameMessage):
        """The user asked for the function table."""

    class SearchRequested(_FlameMessage):
        """The user pressed ``/``: the screen shows a search box."""

    class SearchCleared(_FlameMessage):
        """Escape cleared the search: the screen empties its search box."""

    class HelpRequested(_FlameMessage):
        """The user pressed ``?``."""

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

    # -- public API ---------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """``p`` exists only on a live graph (elsewhere it would do nothing)."""
        return self.live if action == "pause" else True

    def key_help(self) -> list[tuple[str, str]]:
        """(key, what it does) for the keys this graph really has, for the help screen."""
        keys = [("arrows/hjkl", "move"), ("enter", "focus"), ("esc/backspace", "back"), ("/", "search"),
                ("n/N", "next/previous match"), ("e", "expand"), ("c", "collapse chains"), ("s", "sandwich"),
                ("t", "functions")]
        if self.live:
            keys.append(("p", "pause updates"))
        return keys

    @property
    def profile(self) -> Profile:
        return self._profile

    @property
    def focus_node(self) -> int:
        return self._focus

    @property
    def search_result(self) -> SearchResult | None:
        return self._search

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

    # -- actions ------------------------------------------------------------

    def action_move(self, direction: str) -> None:
        """Move the selection up (child), down (caller), left or right."""
        layout = self.layout_now
        span = self._selected_span()
        target: Span | None = None
        if direction == "up" and span.row + 1 < len(layout.rows):
            kids = [s for s in layout.rows[span.row + 1] if s.x0 >= span.x0 and s.x1 <= span.x1]
            mid = (span.x0 + span.x1) / 2
            target = max(kids, key=lambda s: (s.x1 - s.x0, -abs((s.x0 + s.x1) / 2 - mid)), default=None)
        elif direction == "down" and span.row > 0:
            target = next((s for s in layout.rows[span.row - 1] if s.x0 <= span.x0 < s.x1), None)
        elif direction in ("left", "right"):
            row = layout.rows[span.row]
            i = row.index(span) + (1 if direction == "right" else -1)
            target = row[i] if 0 <= i < len(row) else None
        if target is not None:
            self.selected = target.node
            self._search_error = ""  # the user has moved on: a refused pattern is old news
            self.refresh()

    def action_focus_frame(self) -> None:
        """Focus the selected frame."""
        self.focus_on(self.selected)

    def action_unfocus(self) -> None:
        """Go back up the focus history; at the top clear the search, then let the screen leave."""
        if not self.focus_history:
            if self._search is not None or self._search_error:
                self.set_search(None)
                self.post_message(self.SearchCleared(self))
                return
            raise SkipAction()
        previous = self._focus
        self._focus = self.focus_history.pop()
        self.selected = previous
        self._invalidate()

    def action_search(self) -> None:
        """Ask the screen for a search box."""
        self.post_message(self.SearchRequested(self))

    def action_next_match(self, step: int) -> None:
        """Select the next (1) or previous (-1) visible match."""
        if self._search is None:
            return
        layout = self.layout_now
        matched = self._search.matched_frames
        frame = self._profile.node_frame
        visible = sorted(n for n, s in layout.by_node.items() if any(frame[k] in matched for k in range(n, s.tail + 1)))
        if not visible:
            return
        if step > 0:
            nxt = next((n for n in visible if n > self.selected), visible[0])
        else:
            nxt = next((n for n in reversed(visible) if n < self.selected), visible[-1])
        self.selected = nxt
        self.refresh()

    def action_expand(self) -> None:
        """Show every frame on its own row."""
        self.collapsed = False

    def action_collapse(self) -> None:
        """Group linear chains of single-child frames."""
        self.collapsed = True

    def action_sandwich(self) -> None:
        """Ask for the sandwich view of the selected function."""
        if self.selected > 0:
            self.post_message(self.SandwichRequested(self, self._selected_span().tail))

    def action_table(self) -> None:
        """Ask for the function table."""
        self.post_message(self.TableRequested(self))

    def action_pause(self) -> None:
        """Pause or resume live updates."""
        self.paused = not self.paused

    def action_help(self) -> None:
        """Ask for the reading guide."""
        self.post_message(self.HelpRequested(self))

    # -- drawing ------------------------------------------------------------

    def _styles(self) -> list[tuple[Style, Style]]:
        theme = self.app.current_theme
        if self._palette is None or self._palette_theme != theme.name:
            # Hues spread round the wheel, lightness chosen for the theme's
            # background so labels stay readable on dark and light themes.
            lightness = 0.72 if not theme.dark else 0.36
            palette: list[tuple[Style, Style]] = []
            for hue in (0, 25, 45, 80, 140, 170, 195, 215, 250, 280, 310, 335):
                colour = Color.from_hsl(hue / 360, 0.55, lightness)
                lighter = colour.lighten(0.07)
                palette.append(
                    (
                        Style(bgcolor=colour.rich_color, color=colour.get_contrast_text().rich_color),
                        Style(bgcolor=lighter.rich_color, color=lighter.get_contrast_text().rich_color),
                    )
                )
            self._palette, self._palette_theme = palette, theme.name
        return self._palette

    def _span_label(self, span: Span) -> str:
        profile = self._profile
        label: str = profile.label(span.node)
        if span.tail != span.node:
            label = f"{label} ⋯ {profile.label(span.tail)} [{span.chain_length}]"
        return label

    def _is_match(self, span: Span) -> bool:
        assert self._search is not None
        matched, frame = self._search.matched_frames, self._profile.node_frame
        return any(frame[k] in matched for k in range(span.node, span.tail + 1))

    def render_line(self, y: int) -> Strip:
        width, height = self.size.width, self.size.height
        if y == height - 1:
            return self._status_strip(width)
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
        palette = self._styles()
        dim = self.get_component_rich_style("flamegraph--dim")
        selected_style = self.get_component_rich_style("flamegraph--selected")
        segments: list[Segment] = []
        x = 0
        profile = self._profile
        for k, span in enumerate(layout.rows[row_index]):
            if span.x0 > x:
                segments.append(Segment(" " * (span.x0 - x), empty))
            w = span.x1 - span.x0
            if w <= 0:
                continue
            style = palette[colour_index(profile.node_info(span.tail).module, len(palette))][k % 2]
            if self._search is not None and not self._is_match(span):
                style = dim
            elif self._search is not None:
                style = style + Style(bold=True, underline=True)
            if span.node == self.selected:
                style = style + selected_style
            if w == 1:
                segments.append(Segment(" ", style))
            else:
                # The last cell is a gap so neighbouring bars stay apart even when dimmed.
                segments.append(Segment(self._span_label(span)[: w - 1].ljust(w - 1), style))
                segments.append(Segment(" ", empty))
            x = span.x1
        if x < width:
            segments.append(Segment(" " * (width - x), empty))
        return Strip(segments, width)

    def _status_text(self) -> str:
        profile = self._profile
        span = self._selected_span()
        node = span.tail
        info = profile.node_info(node)
        unit = profile.unit
        root_total = profile.total or 1.0
        focus_total = profile.total_of(self._focus) or 1.0
        total, selfv = profile.total_of(node), profile.node_self[node]
        short = "/".join(info.file.replace("\\", "/").split("/")[-2:]) if info.file else ""
        where = f"  {short}:{info.line}" if short and info.line else f"  {short}" if short else ""
        left = (
            f" {profile.label(node)}  self {format_value(selfv, unit)}  total {format_value(total, unit)}"
            f"  {100 * total / root_total:.1f}% of root  {100 * total / focus_total:.1f}% of focus{where}"
        )
        right = ""
        if self._search is not None:
            s = self._search
            scope = "focus" if s.root else "all"
            right = f"/{s.pattern}/ {100 * s.share:.1f}% of {scope} ({format_value(s.value, unit)})"
        elif self._search_error:
            right = self._search_error
        if self.paused:
            right += "  PAUSED" + (" (update waiting)" if self._pending is not None else "")
        return left + ("  │ " + right.strip() if right else "")

    def _status_strip(self, width: int) -> Strip:
        text = self._status_text()
        left, sep, right = text.partition("  │ ")
        if sep and len(text) > width:
            # Keep the search and pause state whole; shorten the frame details.
            room = max(width - len(right) - 3, 0)
            text = (left[: max(room - 1, 0)] + "…" if len(left) > room else left.ljust(room)) + " │ " + right
        text = text[:width].ljust(width)
        return Strip([Segment(text, self.get_component_rich_style("flamegraph--status"))], width)
