"""A light table updated in place: rows kept by key, only the visible lines that changed repainted.

Rebuilding a Textual DataTable every second costs about 26 % of a core, and
even in-place DataTable updates re-render every visible cell through Rich.
This table draws each row as one Strip with the Line API, caches it by the
row's cell texts, and marks dirty only the lines whose text, cursor state or
key changed since they were drawn (a line costs ~0.2 ms in Textual's
compositor; a 40-row table repainted whole each second was most of its cost).
The header and the scrollbar are left alone unless the sort or the row
count changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import BindingType
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from gpulens.tui.widgets._keys import cursor_bindings
from gpulens.tui.widgets._table_draw import (
    Layout,
    header_line,
    layout_columns,
    marked_line,
    plain_line,
    shown_cells,
    wrapped,
)
from gpulens.tui.widgets.thresholds import level_of_text

ASCENDING_FIRST = frozenset({"gpu", "pid"})
"""Right-aligned columns of ids, not figures: their first sort is ascending."""
DESCENDING_FIRST = frozenset({"alerts", "throttle"})
"""Left-aligned columns whose first sort puts the most on top: the hosts and GPUs in trouble."""
SortKey = tuple[int, object]
"""What a table's ``sort_value`` returns: ``(0, value)``, or ``(1, 0)`` for an unknown one (sorted last)."""


class IncrementalTable(ScrollView, can_focus=True):
    """Keyed rows with a cursor; subclasses set ``COLUMNS``.

    How columns are laid out and lines drawn is :mod:`gpulens.tui.widgets._table_draw`'s; the
    table keeps the rows, the sort, the cursor, and what each line last showed.

    | key | action |
    | --- | --- |
    | up / down / k / j | move the cursor |
    | pageup / pagedown / home / end | move further |
    | enter (or click the cursor row) | post :class:`RowSelected` |
    """

    COLUMNS: tuple[tuple[str, str, bool, int], ...] = ()
    """(key, label, right-aligned, width) per column."""
    FLEX: ClassVar[tuple[str, ...]] = ()
    """Columns that share the spare width (a wide terminal shows whole names)."""
    DROP: ClassVar[tuple[str, ...]] = ()
    """Columns hidden, in this order, while the row does not fit (as k9s and nvitop do)."""
    CUT_LEFT: ClassVar[frozenset[str]] = frozenset()
    """Columns cut at the start (``…tail``): the end of a process tree says the most."""
    MARKED: ClassVar[bool] = False
    """Cells whose threshold marker (``89C!``, ``▲ THROTTLE``) names a level are drawn in its style."""
    SORT_KEYS: ClassVar[dict[str, str]] = {}
    """Column key -> the (shifted) letter that sorts by it; underlined in the header, as htop shows F-keys."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"table--header", "table--cursor", "table--cursor-blur",
                                             "table--row", "table--placeholder"}
    DEFAULT_CSS = """
    IncrementalTable { height: auto; max-height: 100%; overflow-x: hidden; scrollbar-size-vertical: 1; }
    IncrementalTable > .table--header { background: $panel; color: $text; text-style: bold; }
    IncrementalTable > .table--row { color: $text; }
    IncrementalTable > .table--cursor { background: $accent; color: $text; text-style: bold; }
    IncrementalTable > .table--cursor-blur { background: $panel; }
    IncrementalTable > .table--placeholder { color: $text-muted; }
    """
    BINDINGS: ClassVar[list[BindingType]] = cursor_bindings("select", "Open")

    class RowSelected(Message):
        """Enter (or a click on the cursor row) chose a row."""

        def __init__(self, table: IncrementalTable, key: str) -> None:
            super().__init__()
            self.table = table
            self.key = key

        @property
        def control(self) -> IncrementalTable:
            """The table that sent it."""
            return self.table

    def __init__(self, *, name: str | None = None, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._cells: dict[str, tuple[str, ...]] = {}
        self.order: list[str] = []
        self.cursor = 0
        self.sort_index = 0
        self.sort_reverse = False
        self.filter_text = ""
        self.placeholder = ""
        """Shown (muted) in place of the rows when there are none."""
        self._cache: dict[str, tuple[tuple[str, ...], int, int, Strip]] = {}
        self._painted: dict[int, tuple[object, ...]] = {}
        """Widget line -> what :meth:`render_line` last drew there (compared by :meth:`_repaint_changed`)."""
        self._layout_for: tuple[int, int] = (-1, -1)
        self._layout: Layout = ()
        self._cursor_line = False
        self._width_for: tuple[object, int] = ((), 0)

    # ---- data --------------------------------------------------------------
    @property
    def row_count(self) -> int:
        """Rows shown."""
        return len(self.order)

    def sync(self, rows: dict[str, tuple[str, ...]], order: Sequence[str]) -> bool:
        """Show ``rows`` (key -> cell texts) in ``order``; True if anything changed.

        Only the lines whose text changed are repainted (see :meth:`_repaint_changed`).
        """
        order = [k for k in order if k in rows]
        top = int(self.scroll_offset.y)
        changed = order != self.order
        if not changed:
            changed = any(self._cells.get(k) != rows[k] for k in self.order[top: top + self.size.height])
        else:
            key = self.selected_key()
            self.order = order
            if key in rows:
                self.cursor = order.index(key)
            self.cursor = max(0, min(self.cursor, len(order) - 1))
        self._cells = rows
        want = Size(self.size.width, max(self._placeholder_rows() + 1, len(order) + 1))
        if want != self.virtual_size:  # also when a long placeholder wraps; repaints the scrollbar too
            self.virtual_size = want
            self.refresh()
        else:
            self._repaint_changed()
        return changed

    def _line_state(self, y: int, width: int) -> tuple[object, ...]:
        """What line ``y`` of the widget shows: equal states draw equal strips."""
        if y == 0:
            return ("header", width, self.sort_index, self.sort_reverse)
        if not self.order and self.placeholder:
            return ("placeholder", width, self.placeholder, y)
        row = y - 1 + int(self.scroll_offset.y)
        if row >= len(self.order):
            return ("blank", width)
        key = self.order[row]
        mode = 0 if row != self.cursor else (1 if self.has_focus else 2)
        return ("row", width, key, shown_cells(self._cells[key], self.column_layout(width)), mode)

    def _row_width(self) -> int:
        """The rows' width: the content's without the vertical scrollbar (a column under it would be cut).

        Worked out once per size: ``scrollable_content_region`` looks the widget up on its screen,
        which cost as much as drawing a cached row.
        """
        outer = self.outer_size
        key = (outer, self.show_vertical_scrollbar, self.styles.gutter)
        if key != self._width_for[0]:
            width = outer.width - self.styles.gutter.width - self.scrollbar_size_vertical
            self._width_for = (key, width if width > 0 else self.size.width)
        return self._width_for[1]

    def _repaint_changed(self) -> int:
        """Mark dirty the lines whose state differs from what was drawn; how many.

        A pending whole repaint needs no help: :meth:`render_line` reads the
        state when it draws.
        """
        width = self._row_width()
        painted = self._painted
        changed = []
        for y in range(self.size.height):
            state = self._line_state(y, width)
            if painted.get(y) != state:
                # Kept now, not only when drawn: a line clipped out of view is never drawn, and
                # marking it every tick stretched each frame's crop over the whole screen.
                painted[y] = state
                changed.append(Region(0, y, width, 1))  # the row's width: not over the scrollbar
        if changed:
            self.refresh(*changed)  # one call: each works out the widget's offsets again
        return len(changed)

    def selected_key(self) -> str | None:
        """Key of the row under the cursor."""
        return self.order[self.cursor] if 0 <= self.cursor < len(self.order) else None

    def reverse_sort(self) -> None:
        """Flip the sort order."""
        self.sort_reverse = not self.sort_reverse
        self.refresh()

    def sort_by_letter(self, letter: str) -> str | None:
        """Sort by the column bound to ``letter`` (its second press reverses); its label, None if unbound.

        A column of figures sorts largest first (the busiest, hottest, biggest on top), alerts and
        throttling the loudest first, names and ids A-Z.
        """
        column = next((k for k, v in self.SORT_KEYS.items() if v == letter), None)
        if column is None:
            return None
        index = next(i for i, c in enumerate(self.COLUMNS) if c[0] == column)
        if index == self.sort_index:
            self.sort_reverse = not self.sort_reverse
        else:  # figures largest first, as htop and nvitop sort (ids and names A-Z)
            self.sort_index = index
            self.sort_reverse = (self.COLUMNS[index][2] and column not in ASCENDING_FIRST) or column in DESCENDING_FIRST
        self.refresh()
        return self.COLUMNS[index][1]

    def sort_label(self) -> str:
        """``sort Util ↓``: the sort column and direction."""
        return f"sort {self.COLUMNS[self.sort_index][1]} {'↓' if self.sort_reverse else '↑'}"

    def sort_hint(self) -> str:
        """`` · shift+underlined letter`` where there is room for it (tables with sort letters)."""
        return " · shift+underlined letter" if self.SORT_KEYS and self.size.width >= 70 else ""

    # ---- cursor ------------------------------------------------------------
    def action_cursor(self, delta: int) -> None:
        """Move the cursor by ``delta`` rows."""
        if not self.order:
            return
        self.cursor = max(0, min(len(self.order) - 1, self.cursor + delta))
        self.scroll_to_region(Region(0, self.cursor + 1, 1, 1), spacing=None, animate=False)
        self._repaint_changed()  # a scroll repaints everything itself

    def action_page(self, direction: int) -> None:
        """Move the cursor by a page."""
        self.action_cursor(direction * max(1, self.size.height - 2))

    def action_select(self) -> None:
        """Post RowSelected for the cursor row."""
        key = self.selected_key()
        if key is not None:
            self.post_message(self.RowSelected(self, key))

    def on_click(self, event: events.Click) -> None:
        """Click moves the cursor; clicking the cursor row opens it."""
        row = event.y - 1 + int(self.scroll_offset.y)
        if event.y < 1 or not 0 <= row < len(self.order):
            return
        if row == self.cursor:
            self.action_select()
        else:
            self.cursor = row
            self._repaint_changed()

    def on_focus(self) -> None:
        """The cursor colour follows focus (its line only)."""
        self._repaint_changed()

    def on_blur(self) -> None:
        """The cursor colour follows focus (its line only)."""
        self._repaint_changed()

    # ---- drawing -----------------------------------------------------------
    def column_layout(self, width: int) -> Layout:
        """(column index, width) of each column shown at ``width`` cells (once per width and sort column).

        Columns in ``DROP`` go first while the row is too wide (never the sort column); spare width
        goes to the ``FLEX`` columns.
        """
        if self._layout_for != (width, self.sort_index):
            self._layout_for = (width, self.sort_index)
            self._layout = layout_columns(self.COLUMNS, self.DROP, self.FLEX, self.sort_index, width)
            self._cache.clear()
        return self._layout

    def cell_level(self, column: str, text: str) -> int:
        """The threshold level a cell shows (its trailing marker; override for other cells)."""
        return level_of_text(text)

    def _line(self, cells: Sequence[str], style: Style, width: int) -> Strip:
        """A row in ``style`` (``MARKED``: each marked cell in its level's, off the cursor line)."""
        layout = self.column_layout(width)
        if self.MARKED:
            return marked_line(self.COLUMNS, self.CUT_LEFT, layout, cells, style, width, self.cell_level,
                               not self._cursor_line)
        return plain_line(self.COLUMNS, self.CUT_LEFT, layout, cells, style, width)

    def render_line(self, y: int) -> Strip:
        """Header at y=0, then the rows (cached by their cell texts)."""
        width = self._row_width()  # without the scrollbar: a column under it would be cut ("Runtim")
        state = self._painted[y] = self._line_state(y, width)
        kind = state[0]
        if kind == "header":
            return header_line(self.COLUMNS, self.SORT_KEYS, self.column_layout(width), self.sort_index,
                               self.sort_reverse, self.get_component_rich_style("table--header"), width)
        if kind == "placeholder":
            muted = self.get_component_rich_style("table--placeholder")
            lines = wrapped(self.placeholder, width)
            text = lines[y - 1] if y - 1 < len(lines) else ""
            return Strip([Segment(" " + text, muted)]).crop_extend(0, width, self.rich_style)
        if kind == "blank":
            return Strip.blank(width, self.rich_style)
        _, _, key, shown, mode = state
        assert isinstance(key, str) and isinstance(shown, tuple) and isinstance(mode, int)
        self.column_layout(width)  # a new layout empties the cache
        hit = self._cache.get(key)
        if hit is not None and hit[0] == shown and hit[1] == mode and hit[2] == width:
            return hit[3]
        cells = self._cells[key]
        name = ("table--row", "table--cursor", "table--cursor-blur")[mode]
        self._cursor_line = mode != 0  # level colours would vanish on the cursor's background
        strip = self._line(cells, self.get_component_rich_style(name), width)
        self._cursor_line = False
        self._cache[key] = (shown, mode, width, strip)
        if len(self._cache) > 4 * max(64, len(self.order)):
            self._cache.clear()
        return strip

    def _placeholder_rows(self) -> int:
        if self.order or not self.placeholder:
            return 1
        return len(wrapped(self.placeholder, self.size.width))

    def notify_style_update(self) -> None:
        """A theme or class change: the cached strips hold the old styles."""
        super().notify_style_update()
        self._cache.clear()

    def on_resize(self) -> None:
        """Keep the scroll range right."""
        self.virtual_size = Size(self.size.width, max(self._placeholder_rows() + 1, len(self.order) + 1))
