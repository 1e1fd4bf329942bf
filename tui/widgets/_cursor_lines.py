"""Lazy lines with a row cursor (the heatmap's): moved by keys, kept on its row as rows change.

While the widget is focused the cursor row's label is highlighted and marked (:data:`CURSOR_MARK`,
which reads where colour is off too); :meth:`CursorLines.move_cursor` scrolls to keep it shown and
:meth:`CursorLines.choose` posts :class:`~gpulens.tui.widgets._lines.LazyLines.RowChosen` for it.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.strip import Strip

from gpulens.tui.widgets._lines import LazyLines

CURSOR_MARK = "▶"
"""Marks the cursor row where colour is off (NO_COLOR) as well as where it is on."""


class CursorLines(LazyLines):
    """:class:`LazyLines` with a row cursor while focused; Enter on it posts ``RowChosen``."""

    cursor_rows = True
    label_cells = 11
    """Cells of a row's label (the cursor highlights them and marks the first)."""

    def __init__(self, *, name: str | None = None, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.cursor: int | None = None
        """Index of the cursor row in :attr:`rows` (None until focused)."""
        self._cursor_key: Hashable | None = None

    def set_rows(self, rows: Sequence[Hashable], versions: Mapping[Any, object]) -> None:
        """As :meth:`LazyLines.set_rows`; the cursor stays on its row."""
        super().set_rows(rows, versions)
        self._follow_cursor()

    def cursor_style(self) -> Style:
        """The cursor row's label style (override for a theme colour)."""
        return Style(reverse=True, bold=True)

    def _row(self, index: int, width: int, focused: bool) -> Strip:
        strip = super()._row(index, width, focused)
        if index == self.cursor and focused:
            n = self.label_cells
            st = self.cursor_style()
            strip = Strip.join([Strip([Segment(CURSOR_MARK, st)]), strip.crop(0, n - 1).apply_style(st),
                                strip.crop(n)])
        return strip

    def _follow_cursor(self) -> None:
        """The rows changed: the cursor stays on its row if still shown, else on the same place."""
        if self.cursor is None:
            return
        if not self.rows:
            self.cursor, self._cursor_key = None, None
            return
        try:
            self.cursor = self.rows.index(self._cursor_key)
        except ValueError:
            self.cursor = min(self.cursor, len(self.rows) - 1)
            self._cursor_key = self.rows[self.cursor]

    def set_cursor(self, index: int) -> None:
        """Put the cursor on row ``index`` (clamped), scrolling to show it."""
        if not self.rows:
            return
        index = max(0, min(len(self.rows) - 1, index))
        self.cursor, self._cursor_key = index, self.rows[index]
        top, room = int(self.scroll_offset.y), self._room()
        if index < top:
            self.scroll_to(y=index, animate=False, immediate=True)
        elif index >= top + room:
            self.scroll_to(y=index - room + 1, animate=False, immediate=True)
        self.repaint_changed()

    def move_cursor(self, delta: int) -> None:
        """Move the cursor by ``delta`` rows (from the top shown row if it has none)."""
        start = self.cursor if self.cursor is not None else int(self.scroll_offset.y)
        self.set_cursor(start + delta)

    def choose(self) -> None:
        """Post :class:`RowChosen` for the cursor row."""
        if self.cursor is not None and 0 <= self.cursor < len(self.rows):
            self.post_message(self.RowChosen(self, self.rows[self.cursor]))

    def on_focus(self) -> None:
        """Focused: the cursor shows (on the top shown row the first time)."""
        if self.cursor is None and self.rows:
            self.set_cursor(int(self.scroll_offset.y))
        self.repaint_changed()

    def on_blur(self) -> None:
        """Unfocused: the cursor row reads as the others."""
        self.repaint_changed()

    def on_click(self, event: events.Click) -> None:
        """The cursor goes to the row under the mouse (:class:`LazyLines` then posts ``RowClicked``)."""
        index = int(self.scroll_offset.y) + event.y - self.header_lines
        if event.y >= self.header_lines and 0 <= index < len(self.rows):
            self.cursor, self._cursor_key = index, self.rows[index]
