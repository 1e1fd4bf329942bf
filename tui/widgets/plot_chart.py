"""The chart rows of a :class:`~gpulens.tui.widgets.plot.TimeSeriesPlot`: each band's braille rows, redrawn only
where they changed.

A chart ``width`` cells wide draws :func:`chart_columns` values, two per
braille cell, after a y label of :data:`Y_LABEL` cells. :class:`BandCharts`
keeps, per band, what it drew last: when only the newest column changed it
draws the last cell again; when the columns shifted (aligned columns move
left as time passes) it keeps the dot counts of those that stayed and works
out only the new ones; a row whose text is the same keeps its runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rich.style import Style

from gpulens.store.resample import resample
from gpulens.tui.widgets._braille import Line, axis_label, braille_rows, dot_counts, runs

Y_LABEL = 7
"""Cells of the y-axis labels (one more for the gap to the chart)."""


def chart_columns(width: int) -> int:
    """The values a chart ``width`` cells wide (y labels included) draws: two per braille cell."""
    return max(2, (width - Y_LABEL - 1) * 2)


class BandCharts:
    """The rows each band of one plot drew last, and the drawing that reuses them."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: dict[int, tuple[tuple[object, ...], tuple[float | None, ...], list[str], list[Line],
                                    list[int]]] = {}
        """Band -> (geometry, scale and labels; values; braille rows; their lines; dots per column) last
        drawn: a new newest column redraws one cell of each row, shifted columns keep their dot counts,
        and only the rows whose text changed are built again."""

    def rows(self, band: int, values: tuple[float | None, ...], cols: int, lo: float, hi: float,
             labels: tuple[str, ...], axis: Style, area: Style) -> list[Line]:
        """The rows of one series (one per label) from ``lo`` to ``hi``, built again only where their text changed.

        When only the newest column changed, only the last cell is drawn; when
        the columns shifted (aligned columns move left as time passes), the dot
        counts of the kept ones are reused and only the new ones are worked out.
        """
        rows = len(labels)
        key = (cols, lo, hi, labels, axis, area)
        prev = self._last.get(band)
        if prev is not None and prev[0] == key and len(values) == cols and len(prev[1]) == cols:
            old = prev[1]
            if values[:-2] == old[:-2]:
                if values[-2:] == old[-2:]:
                    return prev[3]
                cell = dot_counts(_fit(values[-2:], 2), rows, lo, hi)
                filled = [*prev[4][:-2], *cell]
                chart = [line[:-1] + c for line, c in zip(prev[2], braille_rows(cell, rows), strict=True)]
            else:
                kept = _kept(old, values)
                if kept is None:
                    filled = dot_counts(_fit(values, cols), rows, lo, hi)
                else:
                    start, count = kept
                    filled = [*prev[4][start:start + count], *dot_counts(_fit(values[count:], cols - count), rows, lo, hi)]
                chart = braille_rows(filled, rows)
            made = [old_line if line == was else _row(label, line, axis, area)
                    for label, line, was, old_line in zip(labels, chart, prev[2], prev[3], strict=True)]
        else:
            filled = dot_counts(_fit(values, cols), rows, lo, hi)
            chart = braille_rows(filled, rows)
            made = [_row(label, line, axis, area) for label, line in zip(labels, chart, strict=True)]
        self._last[band] = (key, values, chart, made, filled)
        return made


def _kept(old: tuple[float | None, ...], new: tuple[float | None, ...]) -> tuple[int, int] | None:
    """(start, count): ``new`` begins with ``old[start:start + count]``, the columns that shifted left
    (the newest of ``old`` may have filled further, so it is not counted); None when none did."""
    n = len(new)
    for shift in range(1, min(8, n - 2)):
        count = n - shift - 1
        if new[:count] == old[shift:shift + count]:
            return shift, count
    return None


def _fit(values: Sequence[float | None], cols: int) -> list[float]:
    """``values`` as the chart's columns: as they are when they number ``cols``, else resampled."""
    vals = [math.nan if v is None else v for v in values]
    return vals if len(vals) == cols else resample(vals, cols)


def _row(label: str, line: str, axis: Style, area: Style) -> Line:
    """A chart row: the y label, then blank and dotted runs (each its own span, as SVG exports want)."""
    head = (f"{axis_label(label, Y_LABEL):>{Y_LABEL}} ", axis)
    return (head, *((run, axis if run[0] == " " else area) for run in runs(line)))
