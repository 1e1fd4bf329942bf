"""Drawing for :mod:`gpulens.tui.widgets.plot`: braille areas, axis labels, the time axis (pure)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip

from gpulens.core.units import duration

_LEFT = (0x40, 0x04, 0x02, 0x01)   # dots of the left column, bottom to top
_RIGHT = (0x80, 0x20, 0x10, 0x08)


def _cell(a: int, b: int) -> str:
    code = 0
    for k in range(a):
        code |= _LEFT[k]
    for k in range(b):
        code |= _RIGHT[k]
    return chr(0x2800 + code) if code else " "


_CELLS = [[_cell(a, b) for b in range(5)] for a in range(5)]
"""The character of a cell whose left and right columns fill ``a`` and ``b`` of its 4 dots."""


def braille_area(values: Sequence[float], rows: int, lo: float, hi: float) -> list[str]:
    """Rows (top first) of an area chart of ``values`` (two values per character).

    Never raises on inf, 1e308 or NaN (values or bounds): they clamp or leave a gap.
    """
    return braille_rows(dot_counts(values, rows, lo, hi), rows)


def dot_counts(values: Sequence[float], rows: int, lo: float, hi: float) -> list[int]:
    """How many of its ``4 * rows`` dots each value fills (0 for NaN; clamped): one per column.

    A column's count depends only on its value and the scale, so a chart whose
    columns shifted keeps the counts of the ones it still shows.
    """
    span = hi - lo
    if not span or span != span:
        span = 1.0
    dots = rows * 4
    # 0 for NaN (inf - inf and inf / inf are NaN; nothing here raises), clamped for anything huge.
    return [0 if (x := (v - lo) / span * dots) != x or x <= 0 else dots if x >= dots else round(x)
            for v in values]


def braille_rows(filled: Sequence[int], rows: int) -> list[str]:
    """The rows (top first) of columns filling ``filled`` dots each (:func:`dot_counts`).

    Each cell's characters, top to bottom, depend only on its two counts, so
    they are looked up (:func:`_cell_column`) and the rows come from
    transposing the cells: no Python loop per row and cell.
    """
    if not filled:
        return [""] * rows
    known = _COLUMNS.get(rows)
    if known is None or len(known) > 8192:
        known = _COLUMNS[rows] = {}
    get = known.get
    right = filled[1::2]
    if len(right) < len(filled) - len(right):
        right = [*right, 0]
    cells = []
    for key in zip(filled[0::2], right, strict=True):
        col = get(key)
        if col is None:
            col = known[key] = _cell_column(key[0], key[1], rows)
        cells.append(col)
    return ["".join(row) for row in zip(*cells, strict=True)]


_COLUMNS: dict[int, dict[tuple[int, int], tuple[str, ...]]] = {}
"""Rows -> (left dots, right dots) -> the cell's characters top to bottom (filled as seen)."""


def _cell_column(a: int, b: int, rows: int) -> tuple[str, ...]:
    """The characters, top row first, of a cell whose columns fill ``a`` and ``b`` dots of ``4 * rows``."""
    out = []
    for cy in range(rows):
        base = (rows - 1 - cy) * 4
        out.append(_CELLS[min(4, max(0, a - base))][min(4, max(0, b - base))])
    return tuple(out)


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


def ago(seconds: float) -> str:
    """``-5m``, ``-2m30s``, ``-1h``: a time-axis label, relative to now."""
    s = round(seconds)
    if s >= 3600 and s % 3600 == 0:
        return f"-{s // 3600}h"
    if s >= 60 and s % 60 == 0:
        return f"-{s // 60}m"
    return "-" + duration(s).lstrip("0")


def time_axis(window_s: float, width: int) -> str:
    """A line of ``width`` cells: ``-5m`` at the left, ``now`` at the right, ticks between.

    Labels (quarters, or only the middle one when narrow) are centred on their
    position and never overlap; the chart's columns map linearly to the window.
    """
    if width < 8 or window_s <= 0:
        return ""
    cells = [" "] * width

    def put(pos: int, label: str) -> bool:
        start = max(0, min(width - len(label), pos - len(label) // 2))
        if any(c != " " for c in cells[max(0, start - 1): start + len(label) + 1]):
            return False
        cells[start:start + len(label)] = label
        return True

    put(0, ago(window_s))
    put(width, "now")
    parts = 4 if width >= 48 else 2 if width >= 24 else 1
    for i in range(1, parts):
        put(round(width * i / parts), ago(window_s * (parts - i) / parts))
    return "".join(cells)


def runs(line: str) -> list[str]:
    """Split a chart line into runs of blanks and runs of dots."""
    return _RUNS.findall(line)


_RUNS = re.compile(r" +|[^ ]+")


Line = tuple[tuple[str, Style], ...]
"""One line of a plot: (text, style) runs, drawn as segments without Rich's Text."""


def line_strip(line: Line, width: int, base: Style) -> Strip:
    """``line`` as a strip exactly ``width`` cells wide (padded with ``base``, or cut)."""
    segments = [Segment(text, style) for text, style in line]
    used = cell_len("".join([text for text, _ in line]))  # one measure, not one per segment
    if used > width:
        return Strip(segments, used).crop(0, width)
    if used < width:
        segments.append(Segment(" " * (width - used), base))
    return Strip(segments, width)
