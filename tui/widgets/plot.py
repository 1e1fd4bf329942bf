"""A time-series plot drawn with braille dots (2 x 4 per cell): fast, and fine in tmux."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import ClassVar

from rich.text import Text
from textual.widget import Widget

from gpulens.store.ring import resample
from gpulens.tui.widgets.na import na_text

_LEFT = (0x40, 0x04, 0x02, 0x01)   # dots of the left column, bottom to top
_RIGHT = (0x80, 0x20, 0x10, 0x08)


def _dots(v: float, lo: float, span: float, dots: int) -> int:
    """How many of ``dots`` a value fills: 0 for NaN, clamped for anything huge or infinite."""
    x = (v - lo) / span * dots  # inf - inf and inf / inf are NaN; nothing here raises
    if x != x or x <= 0:
        return 0
    return dots if x >= dots else round(x)


def braille_area(values: Sequence[float], rows: int, lo: float, hi: float) -> list[str]:
    """Rows (top first) of an area chart of ``values`` (two values per character).

    Never raises on inf, 1e308 or NaN (values or bounds): they clamp or leave a gap.
    """
    span = hi - lo
    if not span or span != span:
        span = 1.0
    dots = rows * 4
    filled = [_dots(v, lo, span, dots) for v in values]
    if len(filled) % 2:
        filled.append(0)
    lines = []
    for cy in range(rows):
        base = (rows - 1 - cy) * 4
        chars = []
        for i in range(0, len(filled), 2):
            a, b = filled[i] - base, filled[i + 1] - base
            code = 0
            for k in range(max(0, min(4, a))):
                code |= _LEFT[k]
            for k in range(max(0, min(4, b))):
                code |= _RIGHT[k]
            chars.append(chr(0x2800 + code) if code else " ")
        lines.append("".join(chars))
    return lines


class TimeSeriesPlot(Widget):
    """Title with now/avg/max, then a braille area chart; n/a and the reason when empty."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"plot--title", "plot--area", "plot--axis"}
    DEFAULT_CSS = """
    TimeSeriesPlot { height: 6; border: round $panel; padding: 0 1; }
    TimeSeriesPlot > .plot--title { color: $text; text-style: bold; }
    TimeSeriesPlot > .plot--area { color: $success; }
    TimeSeriesPlot > .plot--axis { color: $text-muted; }
    """

    def __init__(self, title: str, fmt: Callable[[float | None], str], *, lo: float = 0.0,
                 hi: float | None = 100.0, name: str | None = None, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.title = title
        self.fmt = fmt
        self.lo = lo
        self.hi = hi
        self.values: tuple[float, ...] = ()
        self.reason: str | None = None
        self.window = ""
        self.border_title = title

    def set_data(self, values: Sequence[float], reason: str | None, window: str) -> None:
        """New points (NaN = gap) and the n/a reason; repaints only when they differ."""
        vals = tuple(values)
        if vals == self.values and reason == self.reason and window == self.window:
            return
        if len(vals) == len(self.values) and all(
            (a == b) or (a != a and b != b) for a, b in zip(vals, self.values, strict=True)
        ) and reason == self.reason and window == self.window:
            return
        self.values, self.reason, self.window = vals, reason, window
        self.refresh()

    points = 300
    """Values asked of the store; the chart resamples them to its width."""

    def render(self) -> Text:
        """Summary line, then the chart with a y-axis label."""
        width, height = self.content_size.width, self.content_size.height
        known = [v for v in self.values if math.isfinite(v)]
        title = self.get_component_rich_style("plot--title")
        axis = self.get_component_rich_style("plot--axis")
        if not known:
            return Text.assemble(na_text(self.reason), style=axis)
        now = next(v for v in reversed(self.values) if math.isfinite(v))
        hi = self.hi if self.hi is not None else max(known) * 1.1 or 1.0
        text = Text(no_wrap=True, overflow="crop")
        text.append(f"now {self.fmt(now)}  avg {self.fmt(sum(known) / len(known))}  "
                    f"max {self.fmt(max(known))}  [{self.window}]", style=title)
        rows = max(1, height - 1)
        area = self.get_component_rich_style("plot--area")
        chart = braille_area(resample(self.values, max(2, (width - 8) * 2)), rows, self.lo, hi)
        for i, line in enumerate(chart):
            label = self.fmt(hi) if i == 0 else (self.fmt(self.lo) if i == rows - 1 else "")
            text.append("\n")
            text.append(f"{axis_label(label):>7} ", style=axis)
            # Blank and dotted runs as separate spans: each gets its own x in SVG exports.
            for run in _runs(line):
                text.append(run, style=axis if run[0] == " " else area)
        return text


def axis_label(text: str, width: int = 7) -> str:
    """``18GB/s`` for ``18.0GB/s``: the y-axis label kept whole, units included."""
    if len(text) <= width:
        return text
    m = re.match(r"(-?\d+(?:\.\d+)?)(.*)", text)
    if m:
        short = f"{float(m.group(1)):.0f}{m.group(2)}"
        if len(short) <= width:
            return short
    return text[: width - 1] + "…"


def _runs(line: str) -> list[str]:
    """Split a chart line into runs of blanks and runs of dots."""
    runs: list[str] = []
    for ch in line:
        if runs and (runs[-1][0] == " ") == (ch == " "):
            runs[-1] += ch
        else:
            runs.append(ch)
    return runs
