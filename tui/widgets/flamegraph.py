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

from textual.actions import SkipAction
from textual.binding import Binding, BindingType
from textual.message import Message

from gpulens.tui.widgets.flame_layout import Span
from gpulens.tui.widgets.flame_view import FlameView


class _FlameMessage(Message):
    """A request from a :class:`FlameGraph` to its screen."""

    def __init__(self, control: FlameGraph) -> None:
        super().__init__()
        self.flamegraph = control

    @property

    def control(self) -> FlameGraph:
        return self.flamegraph


class FlameGraph(FlameView, can_focus=True):
    """A flame graph of a :class:`Profile` drawn line by line (see the module docstring).

    What it shows and how it is drawn are :class:`~gpulens.tui.widgets.flame_view.FlameView`'s;
    here are its keys and the messages they send to the screen.
    """

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

    # -- keys ---------------------------------------------------------------

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
