"""A scrollable list of one-line rows drawn lazily: only visible rows are built.

Rows are cached by key and rebuilt only when their version changes, which
is what keeps a 2,048-row heatmap cheap to update every second.
"""

from __future__ import annotations

import textwrap
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip


class LazyLines(ScrollView, can_focus=False):
    """Base: subclasses implement :meth:`make_line`; callers use :meth:`set_rows`."""

    DEFAULT_CSS = """
    LazyLines { height: 1fr; overflow-x: hidden; scrollbar-size-vertical: 1; }
    """

    class RowClicked(Message):
        """A row was clicked (the overview opens its host)."""

        def __init__(self, lines: LazyLines, key: Hashable) -> None:
            super().__init__()
            self.lines = lines
            self.key = key

        @property
        def control(self) -> LazyLines:
            """The widget that sent it."""
            return self.lines

    def __init__(self, *, name: str | None = None, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.rows: list[Hashable] = []
        self._versions: dict[Hashable, object] = {}
        self._cache: dict[Hashable, tuple[object, int, Strip]] = {}
        self.header_lines = 0
        self.placeholder = ""
        """Shown under the header lines when there are no rows."""
        self._base: Style | None = None
        self.more_line = False
        """Keep the last line for ``rows 1-18 of 128 · 110 more ↓`` while rows are hidden."""

    @property
    def base_style(self) -> Style:
        """``rich_style``, cached: it walks every ancestor, and each rebuilt row needs it."""
        if self._base is None:
            self._base = self.rich_style
        return self._base

    def notify_style_update(self) -> None:
        """Styles (or the theme) changed: the cached base style is stale."""
        self._base = None
        super().notify_style_update()

    def set_rows(self, rows: Sequence[Hashable], versions: Mapping[Any, object]) -> None:
        """Show ``rows``; a row whose version differs from before is redrawn."""
        rows = list(rows)
        if rows != self.rows:
            self.rows = rows
            self.virtual_size = Size(self.size.width, self._virtual_height())
            self.refresh()
        top = int(self.scroll_offset.y)
        visible = set(rows[max(0, top - self.header_lines): top + self.size.height])
        for key, ver in versions.items():
            if self._versions.get(key) != ver:
                self._versions[key] = ver
                self._cache.pop(key, None)
                if key in visible:
                    self.refresh()  # one repaint covers every changed visible row
                    visible = set()

    def invalidate(self) -> None:
        """Drop every cached row (the metric or window changed)."""
        self._cache.clear()
        self.refresh()

    def header_line(self, y: int, width: int) -> Strip:
        """Fixed line ``y`` above the rows (override with ``header_lines``)."""
        return Strip.blank(width)

    def _virtual_height(self) -> int:
        rows = len(self.rows) + self.header_lines
        # Scrolled to the end, the last row still shows above the "more" line.
        return rows + 1 if self.more_line and rows > self.size.height else rows

    def hidden(self) -> tuple[int, int, int]:
        """(first shown, last shown, hidden below) as row numbers from 1, for the "more" line."""
        top = int(self.scroll_offset.y)
        room = max(0, self.size.height - self.header_lines - 1)
        last = min(len(self.rows), top + room)
        return top + 1, last, len(self.rows) - last

    def _more(self, width: int) -> Strip | None:
        if not self.more_line or len(self.rows) + self.header_lines <= self.size.height:
            return None
        first, last, below = self.hidden()
        text = f" rows {first}–{last} of {len(self.rows)}"
        text += f" · {below} more ↓" if below else " · end"
        if self.can_focus:
            text += "  (tab here, ↑↓ pgup pgdn; or the mouse wheel)" if width >= len(text) + 46 else ""
        return Strip([Segment(text, self.base_style + Style(bold=True))]).crop_extend(0, width, self.base_style)

    def make_line(self, key: Hashable, width: int) -> list[Segment]:
        """The segments of row ``key``: every subclass defines it."""
        raise TypeError(f"{type(self).__name__} must define make_line()")

    def render_line(self, y: int) -> Strip:
        """Textual's Line API: build (or reuse) the row at screen line ``y``."""
        width = self.size.width
        if y < self.header_lines:
            return self.header_line(y, width)
        if y == self.size.height - 1 and (more := self._more(width)) is not None:
            return more
        index = int(self.scroll_offset.y) + y - self.header_lines
        if not self.rows and self.placeholder:
            # Wrapped, so a long reason ("NVML init failed: ...") is read whole.
            lines = textwrap.wrap(self.placeholder, max(10, width - 2)) or [""]
            text = lines[index] if 0 <= index < len(lines) else ""
            return Strip([Segment(" " + text, self.base_style)]).crop_extend(0, width, self.base_style)
        if index >= len(self.rows):
            return Strip.blank(width, self.base_style)
        key = self.rows[index]
        ver = self._versions.get(key)
        hit = self._cache.get(key)
        if hit is None or hit[0] != ver or hit[1] != width:
            strip = Strip(self.make_line(key, width)).crop_extend(0, width, self.base_style)
            hit = self._cache[key] = (ver, width, strip)
        return hit[2]

    def on_click(self, event: events.Click) -> None:
        """Post RowClicked for the row under the mouse."""
        index = int(self.scroll_offset.y) + event.y - self.header_lines
        if event.y >= self.header_lines and 0 <= index < len(self.rows):
            self.post_message(self.RowClicked(self, self.rows[index]))

    def on_resize(self) -> None:
        """Width changed: rows are rebuilt at the new width."""
        self.virtual_size = Size(self.size.width, self._virtual_height())
        self._cache.clear()


def style(color: str | None = None, bold: bool = False, dim: bool = False) -> Style:
    """A rich Style (shared helper)."""
    return Style(color=color, bold=bold, dim=dim)
