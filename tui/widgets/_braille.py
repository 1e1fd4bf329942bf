"""Drawing for :mod:`gpulens.tui.widgets.plot`: braille areas, axis labels, the time axis (pure)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpulens.core.units import duration

_LEFT = (0x40, 0x04, 0x02, 0x01)   # dots of the left column, bottom to top
_RIGHT = (0x80, 0x20, 0x10, 0x08)


def _dots(v: float, lo: float, span: float, dots: int) -> int:
    """How many of ``dots`` a value fills: 0 for NaN, clamped for anything huge or infinite."""
    x = (v - lo) / span * dots  # inf - inf and inf / inf are NaN; nothing here raises
    if x != x or x <= 0:
        return 0
    return dots if x >= dots else round(x)


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
    span = hi - lo
    if not span or span != span:
        span = 1.0
    dots = rows * 4
    filled = [_dots(v, lo, span, dots) for v in values]
    if len(filled) % 2:
        filled.append(0)
    left, right = filled[0::2], filled[1::2]
    lines = []
    cells = _CELLS
    for cy in range(rows):
        base = (rows - 1 - cy) * 4
        lines.append("".join([cells[0 if a <= base else 4 if a >= base + 4 else a - base]
                              [0 if b <= base else 4 if b >= base + 4 else b - base]
                              for a, b in zip(left, right, strict=True)]))
    return lines


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
