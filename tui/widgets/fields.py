"""A screen's info line (``job 4711   user alice   runtime 3h55m ...``), cheap to show every tick.

A ``Static`` given new text each tick costs Textual its whole text pipeline
(parse, wrap, format, style every span) and, unless told otherwise, a layout
of the screen: on a job screen whose runtime ticks every second that was a
fifth of a percent of a core, more than the screen's plots. ``FieldsLine``
wraps the text itself (as ``Static`` does: at spaces, over-long words folded,
the spaces at a break dropped), keeps one strip per line, repaints only the
lines whose text or styles changed, and asks for a layout only when the
number of lines does. A text of the same shape as the last (the same styles
over the same ranges, each changed character as wide as the one it replaces
and a space only where a space was: ``runtime 1m33s`` -> ``1m34s``) breaks
where it broke: its lines are the old ones with the new characters, not
wrapped again.
"""

from __future__ import annotations

import re

from rich.cells import cell_len, get_character_cell_size
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Size
from textual.strip import Strip
from textual.widget import Widget

__all__ = ["NBSP", "FieldsLine", "same_shape", "wrap_offsets"]

NBSP = "\u00a0"
"""A space a line never breaks at (``GPU mem 230GiB`` stays on one line): where FieldsLine parts from Static."""
_WORD = re.compile(r"[^\S\u00a0]*[\S\u00a0]+[^\S\u00a0]*")
_SPACE = re.compile(r"[^\S\u00a0]")


def same_shape(old: Text, new: Text) -> bool:
    """True when ``new`` wraps where ``old`` wraps at every width, into lines with the same styles:
    equal length, spans and style, and each changed character as wide as the old one and a space
    (or a line break) exactly where the old one was."""
    a, b = old.plain, new.plain
    if len(a) != len(b) or old.spans != new.spans or old.style != new.style:
        return False
    for x, y in zip(a, b, strict=True):
        if x != y and ("\n" in (x, y) or NBSP in (x, y) or bool(_SPACE.match(x)) != bool(_SPACE.match(y))
                       or get_character_cell_size(x) != get_character_cell_size(y)):
            return False
    return True


def wrap_offsets(plain: str, width: int) -> list[int]:
    """Where ``plain`` breaks into lines of at most ``width`` cells, as Textual's ``Static`` breaks it:
    before a word (its leading and trailing spaces included) whose letters do not fit what is left
    of the line; a word wider than a line is folded, cell by cell. A no-break space (:data:`NBSP`)
    is part of its word."""
    breaks: list[int] = []
    used = 0
    for m in _WORD.finditer(plain):
        start, word = m.start(), m.group(0)
        need = cell_len(word.rstrip())
        if width - used >= need:
            used += cell_len(word)
        elif need > width:  # on no line: fold it
            if start:
                breaks.append(start)
            used = 0
            for i, ch in enumerate(word, start):
                cw = get_character_cell_size(ch)
                if used + cw > width and used:
                    breaks.append(i)
                    used = 0
                used += cw
        elif used and start:
            breaks.append(start)
            used = cell_len(word)
    return breaks


class FieldsLine(Widget):
    """Styled text wrapped to the widget's width; a changed text repaints, and lays out only when its
    line count changes."""

    DEFAULT_CSS = "FieldsLine { height: auto; }"

    def __init__(self, text: Text | str = "", *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._text = Text(text) if isinstance(text, str) else text
        self._lines: list[Text] = []
        """The text's lines at ``_width``."""
        self._starts: list[int] = []
        """Where each of ``_lines`` starts in the text's plain string."""
        self._strips: list[Strip | None] = []
        self._width = -1
        self._base: Style | None = None

    @property
    def text(self) -> Text:
        """What the widget shows."""
        return self._text

    def show(self, text: Text | str) -> None:
        """Show ``text``; only the lines that differ are repainted."""
        text = Text(text) if isinstance(text, str) else text
        if text == self._text:
            return
        shaped = self._width >= 0 and same_shape(self._text, text)
        self._text = text
        if self._width < 0:
            self.refresh(layout=True)
            return
        old = self._lines
        self._lines = self._refilled(text.plain) if shaped else self._wrap(self._width)
        if len(old) != len(self._lines):
            self._strips = [None] * len(self._lines)
            self.refresh(layout=True)
            return
        changed = False
        for y, (was, now) in enumerate(zip(old, self._lines, strict=True)):
            if was != now:
                self._strips[y], changed = None, True
        if changed:
            self.refresh()  # a repaint: the unchanged lines come back from their kept strips

    def notify_style_update(self) -> None:
        """A theme or class change: the strips are styled again."""
        super().notify_style_update()
        self._base = None
        self._strips = [None] * len(self._lines)

    def get_content_width(self, container: Size, viewport: Size) -> int:
        """The widest line unwrapped (used only where the width is auto)."""
        return max((cell_len(line) for line in self._text.plain.split("\n")), default=0)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        """How many lines the text wraps to at ``width``."""
        self._lay_out(width)
        return len(self._lines)

    def _lay_out(self, width: int) -> None:
        if width != self._width:
            self._width = width
            self._lines = self._wrap(width)
            self._strips = [None] * len(self._lines)

    def _wrap(self, width: int) -> list[Text]:
        """The text's lines at ``width`` (Rich's ``split`` and ``divide``), the spaces before a break dropped."""
        text = self._text
        self._starts = []
        if width <= 0 or not text.plain:
            self._starts = [0] if text.plain == "" else []
            return [Text()] if text.plain == "" else []
        out: list[Text] = []
        at = 0
        for part in text.split("\n", allow_blank=True):
            breaks = wrap_offsets(part.plain, width)
            pieces = part.divide(breaks)
            for piece in pieces[:-1]:
                piece.rstrip()  # a line that breaks: its trailing spaces go
            self._starts += [at, *(at + b for b in breaks)]
            out.extend(pieces)
            at += len(part.plain) + 1
        return out

    def _refilled(self, plain: str) -> list[Text]:
        """The lines of a text of the same shape as the last (:func:`same_shape`): each old line with
        the new characters in its place (the same spans: the same ranges were styled)."""
        out: list[Text] = []
        for line, start in zip(self._lines, self._starts, strict=True):
            chars = plain[start:start + len(line.plain)]
            if chars != line.plain:
                line = line.copy()
                line.plain = chars
            out.append(line)
        return out

    def render_line(self, y: int) -> Strip:
        """Content line ``y``: its runs on the widget's style, padded to the width."""
        width = self.size.width
        self._lay_out(width)
        base = self._base
        if base is None:
            base = self._base = self.rich_style
        if y >= len(self._lines):
            return Strip.blank(width, Style.from_color(bgcolor=base.bgcolor))
        strip = self._strips[y]
        if strip is None:
            line, console = self._lines[y], self.app.console
            own = base + console.get_style(line.style) if line.style else base  # Text.render leaves it out
            segments = [Segment(seg.text, own + seg.style if seg.style else own) for seg in line.render(console)]
            used = line.cell_len
            if used < width:  # the rest in the background alone, as Textual pads a line
                segments.append(Segment(" " * (width - used), Style.from_color(bgcolor=base.bgcolor)))
            strip = self._strips[y] = Strip(segments, max(used, width)).crop(0, width)
        return strip
