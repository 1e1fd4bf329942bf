"""A scrollable list of one-line rows drawn lazily: only visible rows are built.

Rows are cached by key and rebuilt only when their version changes. A tick
repaints only the screen lines whose strip differs from the one last painted
there (:meth:`LazyLines.repaint_changed`), never the whole widget: in Textual
each repainted line costs ~0.2 ms, so an unchanged row must not be repainted
even when it was rebuilt.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from gpulens.tui.widgets._line_cache import RowCache, more_strip, placeholder_strip


class LazyLines(ScrollView, can_focus=False):
    """Base: subclasses implement :meth:`make_line`; callers use :meth:`set_rows`.

    Rows are kept in a :class:`~gpulens.tui.widgets._line_cache.RowCache`. A row cursor (the
    heatmap's) is :class:`~gpulens.tui.widgets._cursor_lines.CursorLines`', which posts
    :class:`RowChosen`.
    """

    DEFAULT_CSS = """
    LazyLines { height: 1fr; overflow-x: hidden; scrollbar-size-vertical: 1; }
    """

    cursor_rows = False
    """True for a row cursor while focused (:class:`~gpulens.tui.widgets._cursor_lines.CursorLines`)."""

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

    class RowChosen(RowClicked):
        """Enter on the cursor row (the overview opens that GPU)."""

    def __init__(self, *, name: str | None = None, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.rows: list[Hashable] = []
        self._cache = RowCache()
        self._painted: dict[int, Strip] = {}
        """Screen line -> the strip last handed to Textual for it."""
        self.header_lines = 0
        self._placeholder = ""
        self._base: Style | None = None
        self._components: dict[str, Style] = {}
        self.more_line = False
        """Keep the last line for ``rows 1-18 of 128 · 110 more ↓`` while rows are hidden."""

    @property
    def placeholder(self) -> str:
        """Shown under the header lines when there are no rows."""
        return self._placeholder

    @placeholder.setter
    def placeholder(self, text: str) -> None:
        if text != self._placeholder:
            self._placeholder = text
            if not self.rows:
                self.repaint_changed()

    @property
    def base_style(self) -> Style:
        """``rich_style``, cached: it walks every ancestor, and each rebuilt row needs it."""
        if self._base is None:
            self._base = self.rich_style
        return self._base

    def notify_style_update(self) -> None:
        """Styles (or the theme) changed: the cached base style is stale."""
        self._base = None
        self._components.clear()
        self._cache.clear()  # its strips carry the old styles
        self.styles_changed()
        super().notify_style_update()

    def styles_changed(self) -> None:
        """Override: drop what a subclass keeps that carries styles."""

    def set_rows(self, rows: Sequence[Hashable], versions: Mapping[Any, object]) -> None:
        """Show ``rows``; a row whose version differs is rebuilt, and repainted if it now reads differently."""
        self._cache.update(versions)
        rows = list(rows)
        if rows != self.rows:
            self.rows = rows
            self._cache.keep(rows)
            self.virtual_size = Size(self.size.width, self._virtual_height())
            self.refresh()
            return
        self.repaint_changed()

    def repaint_changed(self) -> int:
        """Repaint each visible line whose strip changed since it was painted; how many were."""
        width, height = self._extent()
        if not width:
            return 0
        top = int(self.scroll_offset.y)
        focused = self.has_focus
        painted = self._painted
        changed = []
        for y in range(height):
            strip = self._line(y, width, height, top, focused)
            if strip != painted.get(y):
                painted[y] = strip  # now, not only when drawn: a clipped line is never drawn
                changed.append(Region(0, y, width, 1))
        if changed:
            self.refresh(*changed)  # one call: each works out the widget's offsets again
        return len(changed)

    def _extent(self) -> tuple[int, int]:
        """(width, height) the rows are drawn in: the width left of the scrollbar, when one shows.

        Once per repaint: it looks the widget up in the screen's map.
        """
        region = self.scrollable_content_region
        return region.width, region.height

    @property
    def row_width(self) -> int:
        """Cells a row is built for (the scrollbar, when shown, takes the last)."""
        return self.scrollable_content_region.width

    def invalidate(self) -> None:
        """Drop every cached row (the metric, window or store changed)."""
        self._cache.clear()
        self.refresh()

    def header_line(self, y: int, width: int) -> Strip:
        """Fixed line ``y`` above the rows (override with ``header_lines``)."""
        return Strip.blank(width)

    def header_key(self) -> Hashable:
        """What the header lines depend on besides the width (override: rebuilt only when it changes)."""
        return None

    def _virtual_height(self) -> int:
        rows = len(self.rows) + self.header_lines
        # Scrolled to the end, the last row still shows above the "more" line.
        return rows + 1 if self.more_line and rows > self.size.height else rows

    def _room(self) -> int:
        """Rows shown at once (the "more" line takes one while rows are hidden)."""
        height = self.size.height
        more = self.more_line and len(self.rows) + self.header_lines > height
        return max(1, height - self.header_lines - (1 if more else 0))

    def hidden(self) -> tuple[int, int, int]:
        """(first shown, last shown, hidden below) as row numbers from 1, for the "more" line."""
        return self._hidden(self.size.height, int(self.scroll_offset.y))

    def _hidden(self, height: int, top: int) -> tuple[int, int, int]:
        room = max(0, height - self.header_lines - 1)
        last = min(len(self.rows), top + room)
        return top + 1, last, len(self.rows) - last

    def _more(self, width: int, height: int, top: int) -> Strip | None:
        if not self.more_line or len(self.rows) + self.header_lines <= height:
            return None
        return more_strip(self._hidden(height, top), len(self.rows), width, self.base_style,
                          focusable=self.can_focus, cursor=self.cursor_rows)

    def make_line(self, key: Hashable, width: int) -> list[Segment]:
        """The segments of row ``key``: every subclass defines it.

        Returning the very list it returned last time for ``key`` says "unchanged":
        the row's strip is kept as it is (no new strip, no repaint).
        """
        raise TypeError(f"{type(self).__name__} must define make_line()")

    def component_style(self, name: str) -> Style:
        """``get_component_rich_style``, cached until the styles change (each rebuilt row needs a few)."""
        st = self._components.get(name)
        if st is None:
            st = self._components[name] = self.get_component_rich_style(name)
        return st

    def _row(self, index: int, width: int, focused: bool) -> Strip:
        """Row ``index``'s strip, built again only when its version or the width changed."""
        return self._cache.strip(self.rows[index], width, self.make_line, self.base_style)

    def _line(self, y: int, width: int, height: int, top: int, focused: bool) -> Strip:
        if y < self.header_lines:
            head = self._cache.fixed(("header", y, width, self.header_key()), lambda: self.header_line(y, width))
            return head if head is not None else Strip.blank(width)
        if y == height - 1 and (more := self._cache.fixed(("more", width, height, top, len(self.rows)),
                                                    lambda: self._more(width, height, top))) is not None:
            return more
        index = top + y - self.header_lines
        if not self.rows and self._placeholder:
            # Wrapped, so a long reason ("NVML init failed: ...") is read whole; once per text and width.
            key = ("placeholder", index, width, self._placeholder)
            strip = self._cache.fixed(key, lambda: placeholder_strip(self._placeholder, index, width, self.base_style))
            assert strip is not None
            return strip
        if index >= len(self.rows):
            return Strip.blank(width, self.base_style)
        return self._row(index, width, focused)

    def render_line(self, y: int) -> Strip:
        """Textual's Line API: build (or reuse) the row at screen line ``y``."""
        width, height = self._extent()
        strip = self._line(y, width, height, int(self.scroll_offset.y), self.has_focus)
        self._painted[y] = strip
        return strip

    def on_click(self, event: events.Click) -> None:
        """Post RowClicked for the row under the mouse (and put the cursor there)."""
        index = int(self.scroll_offset.y) + event.y - self.header_lines
        if event.y >= self.header_lines and 0 <= index < len(self.rows):
            self.post_message(self.RowClicked(self, self.rows[index]))

    def on_resize(self) -> None:
        """Width changed: rows are rebuilt at the new width."""
        self.virtual_size = Size(self.size.width, self._virtual_height())
        self._cache.clear_rows()
        self._painted.clear()


def style(color: str | None = None, bold: bool = False, dim: bool = False) -> Style:
    """A rich Style (shared helper)."""
    return Style(color=color, bold=bold, dim=dim)
