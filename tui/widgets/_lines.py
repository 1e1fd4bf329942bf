"""A scrollable list of one-line rows drawn lazily: only visible rows are built.

Rows are cached by key and rebuilt only when their version changes. A tick
repaints only the screen lines whose strip differs from the one last painted
there (:meth:`LazyLines.repaint_changed`), never the whole widget: in Textual
each repainted line costs ~0.2 ms, so an unchanged row must not be repainted
even when it was rebuilt.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

CURSOR_MARK = "▶"
"""Marks the cursor row where colour is off (NO_COLOR) as well as where it is on."""


class LazyLines(ScrollView, can_focus=False):
    """Base: subclasses implement :meth:`make_line`; callers use :meth:`set_rows`.

    With ``cursor_rows`` (the heatmap) a focused widget shows a row cursor
    that :meth:`move_cursor` moves (scrolling to keep it shown), and
    :meth:`choose` posts :class:`RowChosen` for the row under it.
    """

    DEFAULT_CSS = """
    LazyLines { height: 1fr; overflow-x: hidden; scrollbar-size-vertical: 1; }
    """

    cursor_rows = False
    """Subclasses set True for a row cursor while focused."""
    label_cells = 11
    """Cells of a row's label (the cursor highlights them and marks the first)."""

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
        self._versions: dict[Hashable, object] = {}
        self._unknown: object = object()
        """The version of a row the last :meth:`set_rows` gave none (it is built again after each)."""
        self._cache: dict[Hashable, tuple[object, int, Strip, list[Segment]]] = {}
        self._painted: dict[int, Strip] = {}
        """Screen line -> the strip last handed to Textual for it."""
        self._fixed_lines: dict[tuple[Hashable, ...], tuple[tuple[Hashable, ...], Strip | None]] = {}
        """Header and "more" lines by slot: the key they were built for, and the strip."""
        self.header_lines = 0
        self._placeholder = ""
        self._base: Style | None = None
        self._components: dict[str, Style] = {}
        self.more_line = False
        """Keep the last line for ``rows 1-18 of 128 · 110 more ↓`` while rows are hidden."""
        self.cursor: int | None = None
        """Index of the cursor row in :attr:`rows` (None until focused)."""
        self._cursor_key: Hashable | None = None

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
        self._fixed_lines.clear()
        self.styles_changed()
        super().notify_style_update()

    def styles_changed(self) -> None:
        """Override: drop what a subclass keeps that carries styles."""

    def set_rows(self, rows: Sequence[Hashable], versions: Mapping[Any, object]) -> None:
        """Show ``rows``; a row whose version differs is rebuilt, and repainted if it now reads differently."""
        self._versions.update(versions)
        self._unknown = object()  # a row without a version is built again after every tick
        rows = list(rows)
        if rows != self.rows:
            self.rows = rows
            keep = set(rows)
            for gone in [k for k in self._cache if k not in keep]:
                del self._cache[gone]
                self._versions.pop(gone, None)
            self._follow_cursor()
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
        self._fixed_lines.clear()
        self.refresh()

    def header_line(self, y: int, width: int) -> Strip:
        """Fixed line ``y`` above the rows (override with ``header_lines``)."""
        return Strip.blank(width)

    def header_key(self) -> Hashable:
        """What the header lines depend on besides the width (override: rebuilt only when it changes)."""
        return None

    def _fixed(self, key: tuple[Hashable, ...], make: Callable[[], Strip | None]) -> Strip | None:
        """A header or "more" line, built once per ``key`` (a tick compares every line)."""
        slot = key[:2]  # ("header", y) or ("more", width)
        hit = self._fixed_lines.get(slot)
        if hit is None or hit[0] != key:
            hit = self._fixed_lines[slot] = (key, make())
        return hit[1]

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
        first, last, below = self._hidden(height, top)
        text = f" rows {first}–{last} of {len(self.rows)}"
        text += f" · {below} more ↓" if below else " · end"
        if self.can_focus:
            hint = "  (tab here, ↑↓ pgup pgdn; or the mouse wheel)"
            if self.cursor_rows:
                hint = "  (tab here, ↑↓ pgup pgdn, enter opens the GPU; or the mouse wheel)"
            text += hint if width >= len(text) + len(hint) else ""
        return Strip([Segment(text, self.base_style + Style(bold=True))]).crop_extend(0, width, self.base_style)

    def make_line(self, key: Hashable, width: int) -> list[Segment]:
        """The segments of row ``key``: every subclass defines it.

        Returning the very list it returned last time for ``key`` says "unchanged":
        the row's strip is kept as it is (no new strip, no repaint).
        """
        raise TypeError(f"{type(self).__name__} must define make_line()")

    def cursor_style(self) -> Style:
        """The cursor row's label style (override for a theme colour)."""
        return Style(reverse=True, bold=True)

    def component_style(self, name: str) -> Style:
        """``get_component_rich_style``, cached until the styles change (each rebuilt row needs a few)."""
        st = self._components.get(name)
        if st is None:
            st = self._components[name] = self.get_component_rich_style(name)
        return st

    def _row(self, index: int, width: int, focused: bool) -> Strip:
        key = self.rows[index]
        ver = self._versions.get(key, self._unknown)
        hit = self._cache.get(key)
        if hit is None or hit[0] != ver or hit[1] != width:
            segs = self.make_line(key, width)
            if hit is not None and hit[1] == width and segs is hit[3]:
                hit = self._cache[key] = (ver, width, hit[2], segs)  # "unchanged": the strip stays
            else:
                hit = self._cache[key] = (ver, width, fit(segs, width, self.base_style), segs)
        strip = hit[2]
        if index == self.cursor and focused and self.cursor_rows:
            n = self.label_cells
            st = self.cursor_style()
            strip = Strip.join([Strip([Segment(CURSOR_MARK, st)]), strip.crop(0, n - 1).apply_style(st),
                                strip.crop(n)])
        return strip

    def _line(self, y: int, width: int, height: int, top: int, focused: bool) -> Strip:
        if y < self.header_lines:
            head = self._fixed(("header", y, width, self.header_key()), lambda: self.header_line(y, width))
            return head if head is not None else Strip.blank(width)
        if y == height - 1 and (more := self._fixed(("more", width, height, top, len(self.rows)),
                                                    lambda: self._more(width, height, top))) is not None:
            return more
        index = top + y - self.header_lines
        if not self.rows and self._placeholder:
            # Wrapped, so a long reason ("NVML init failed: ...") is read whole; once per text and width.
            key = ("placeholder", index, width, self._placeholder)
            strip = self._fixed(key, lambda: self._placeholder_line(index, width))
            assert strip is not None
            return strip
        if index >= len(self.rows):
            return Strip.blank(width, self.base_style)
        return self._row(index, width, focused)

    def _placeholder_line(self, index: int, width: int) -> Strip:
        lines = textwrap.wrap(self._placeholder, max(10, width - 2)) or [""]
        text = lines[index] if 0 <= index < len(lines) else ""
        return Strip([Segment(" " + text, self.base_style)]).crop_extend(0, width, self.base_style)

    def render_line(self, y: int) -> Strip:
        """Textual's Line API: build (or reuse) the row at screen line ``y``."""
        width, height = self._extent()
        strip = self._line(y, width, height, int(self.scroll_offset.y), self.has_focus)
        self._painted[y] = strip
        return strip

    # ---- the row cursor -----------------------------------------------------
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
        if self.cursor_rows and self.cursor is None and self.rows:
            self.set_cursor(int(self.scroll_offset.y))
        self.repaint_changed()

    def on_blur(self) -> None:
        """Unfocused: the cursor row reads as the others."""
        self.repaint_changed()

    def on_click(self, event: events.Click) -> None:
        """Post RowClicked for the row under the mouse (and put the cursor there)."""
        index = int(self.scroll_offset.y) + event.y - self.header_lines
        if event.y >= self.header_lines and 0 <= index < len(self.rows):
            if self.cursor_rows:
                self.cursor, self._cursor_key = index, self.rows[index]
            self.post_message(self.RowClicked(self, self.rows[index]))

    def on_resize(self) -> None:
        """Width changed: rows are rebuilt at the new width."""
        self.virtual_size = Size(self.size.width, self._virtual_height())
        self._cache.clear()
        self._painted.clear()


def fit(segs: list[Segment], width: int, base: Style) -> Strip:
    """``Strip(segs).crop_extend(0, width, base)``, in half the time when the row is not too wide (the usual case)."""
    used = sum(cell_len(s.text) for s in segs)
    if used > width:
        return Strip(segs).crop_extend(0, width, base)
    return Strip([*segs, Segment(" " * (width - used), base)] if used < width else segs, width)


def style(color: str | None = None, bold: bool = False, dim: bool = False) -> Style:
    """A rich Style (shared helper)."""
    return Style(color=color, bold=bold, dim=dim)
