"""A time-series plot drawn with braille dots (2 x 4 per cell): fast, and fine in tmux.

Every plot says what it covers: a summary line with the exact window
statistics from the store (now, avg, max, and how much data they are over),
a y axis with units and a floor (a flat zero reads ``idle`` on a 1kB/s
scale, not a full-scale ``1B/s``), and a time axis (``-5m … now``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from rich.style import Style
from rich.text import Text
from textual.strip import Strip
from textual.widget import Widget

from gpulens.core.units import duration
from gpulens.store.ring import resample
from gpulens.store.views import WindowStats
from gpulens.tui.widgets._braille import axis_label, braille_area, runs, time_axis
from gpulens.tui.widgets.na import na_text

__all__ = ["PlotData", "TimeSeriesPlot", "axis_label", "braille_area", "time_axis"]

Y_LABEL = 7
"""Cells of the y-axis labels (one more for the gap to the chart)."""


@dataclass(frozen=True, slots=True)
class PlotData:
    """What one plot shows: the series (NaN = gap), or why there is none, and over which window."""

    values: tuple[float | None, ...]
    """Oldest first, spanning the window; None where the store has no value."""
    reason: str | None
    window: str
    """The window's name (``5m``), shown after the figures."""
    window_s: float = 0.0
    """The window in seconds: the time axis (none when 0)."""
    stats: WindowStats | None = None
    """Exact figures for the summary line (else they come from ``values``)."""
    lines: tuple[tuple[str, tuple[float | None, ...]], ...] = ()
    """Per-series bands (``GPU0``, ...) drawn one under the other instead of ``values``."""
    note: str = ""
    """Appended to the summary line (``per GPU``, ``since 12:00:01``)."""


def plot_data(values: Sequence[float], reason: str | None, window: str, window_s: float = 0.0,
              stats: WindowStats | None = None, lines: Sequence[tuple[str, Sequence[float]]] = (),
              note: str = "") -> PlotData:
    """A :class:`PlotData` from float series (NaN becomes None, so equal data compares equal)."""
    return PlotData(_clean(values), reason, window, window_s, stats,
                    tuple((label, _clean(v)) for label, v in lines), note)


def _clean(values: Sequence[float]) -> tuple[float | None, ...]:
    return tuple(v if v == v else None for v in values)


def _styled(text: Text) -> Text:
    """``text`` with its own style applied to its spans (``Text.render`` leaves the base style out)."""
    if text.style:
        text.stylize_before(text.style)
    return text


def _known(values: Sequence[float | None]) -> list[float]:
    return [v for v in values if v is not None and math.isfinite(v)]


class TimeSeriesPlot(Widget):
    """Summary line (now/avg/max over how much data), braille area chart, time axis."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"plot--title", "plot--area", "plot--alt", "plot--axis",
                                             "plot--idle"}
    DEFAULT_CSS = """
    TimeSeriesPlot { height: 100%; min-height: 4; border: round $panel; padding: 0 1;
                     text-wrap: nowrap; text-overflow: clip; }
    TimeSeriesPlot > .plot--title { color: $text; text-style: bold; }
    TimeSeriesPlot > .plot--area { color: $success; }
    TimeSeriesPlot > .plot--alt { color: $accent; }
    TimeSeriesPlot > .plot--axis { color: $text-muted; }
    TimeSeriesPlot > .plot--idle { color: $text-muted; text-style: italic; }
    """

    points = 300
    """Values asked of the store; the chart resamples them to its width."""

    def __init__(self, title: str, fmt: Callable[[float | None], str], *, lo: float = 0.0,
                 hi: float | None = 100.0, floor: float = 0.0,
                 style_of: Callable[[float], tuple[Style, str] | None] | None = None, name: str | None = None,
                 id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.title = title
        self.fmt = fmt
        self.lo = lo
        self.hi = hi
        self.floor = floor
        """The least full scale when ``hi`` is None (auto): a flat zero is not drawn full height."""
        self.style_of = style_of
        """(style, marker) of a value past a threshold (the summary's figures), or None."""
        self.data = PlotData((), None, "")
        self.border_title = title
        self._drawn: tuple[object, ...] = ()
        self._strips: list[Strip] = []

    @property
    def values(self) -> tuple[float, ...]:
        """The plotted series (NaN = gap)."""
        return tuple(math.nan if v is None else v for v in self.data.values)

    @property
    def reason(self) -> str | None:
        """Why the plot is empty (n/a), if it is."""
        return self.data.reason

    def set_data(self, values: Sequence[float] | PlotData, reason: str | None = None, window: str = "",
                 window_s: float = 0.0, stats: WindowStats | None = None) -> None:
        """New points (NaN = gap) and the n/a reason, or a :class:`PlotData`; repaints only on change."""
        data = values if isinstance(values, PlotData) else plot_data(values, reason, window, window_s, stats)
        if data != self.data:
            self.data = data
            self.refresh()

    def notify_style_update(self) -> None:
        """A theme or class change: draw the strips again."""
        super().notify_style_update()
        self._drawn = ()

    def scale(self, known: Sequence[float]) -> tuple[float, bool]:
        """(full scale, idle): the fixed ``hi``, else the data's max with headroom, at least ``floor``."""
        top = max(known) if known else 0.0
        st = self.data.stats
        if st is not None and math.isfinite(st.max):
            top = max(top, st.max)
        idle = top <= self.lo
        if self.hi is not None:
            return self.hi, idle
        return max(top * 1.1, self.floor) or 1.0, idle

    def summary(self, known: Sequence[float]) -> Text:
        """``now 75%  avg 63%  max 86%  over 4m50s of data [5m]`` (or ``idle``)."""
        d = self.data
        st = d.stats
        title = self.get_component_rich_style("plot--title")
        text = Text(no_wrap=True, overflow="crop")
        if st is not None and not st.empty:
            now, mean, top, covered = st.now, st.mean, st.max, duration(st.covered_s)
        else:
            now = known[-1] if known else math.nan
            mean, top = (sum(known) / len(known), max(known)) if known else (math.nan, math.nan)
            covered = ""
        if top == top and top <= self.lo and self.hi is None:
            text.append("idle", self.get_component_rich_style("plot--idle"))
            text.append(f"  {self.fmt(top)} throughout", title)
        else:
            for label, v in (("now", now), ("avg", mean), ("max", top)):
                past = self.style_of(v) if self.style_of is not None and v == v else None
                text.append(f"{label} ", title)
                if past is None:
                    text.append(self.fmt(v if v == v else None), title)
                else:  # the marker keeps the meaning without colour (NO_COLOR)
                    text.append(self.fmt(v) + past[1], title + past[0])
                text.append("  ", title)
        if covered:
            text.append(f"over {covered} of data ", title)
        text.append(f"[{d.window}]" + (f" {d.note}" if d.note else ""), title)
        return text

    def render(self) -> Text:
        """The whole plot as text (what :meth:`render_line` draws, line by line)."""
        return Text("\n").join(self._lines(self.content_size.width, self.content_size.height))

    def render_line(self, y: int) -> Strip:
        """Line ``y`` of the content, from strips cached until the data or the size change."""
        width, height = self.content_size.width, self.content_size.height
        key = (self.data, width, height)
        if key != self._drawn:
            base = self.rich_style
            self._strips = [Strip(list(_styled(line).render(self.app.console))).crop_extend(0, width, base)
                            for line in self._lines(width, height)]
            self._drawn = key
        if y < len(self._strips):
            return self._strips[y]
        return Strip.blank(width, self.rich_style)

    def _lines(self, width: int, height: int) -> list[Text]:
        """Summary line, the chart with a y axis, the time axis."""
        d = self.data
        axis = self.get_component_rich_style("plot--axis")
        series = [v for _, vals in d.lines for v in vals] if d.lines else d.values
        known = _known(series)
        if not known:
            return [Text.assemble(na_text(d.reason, width), style=axis)]
        hi, _ = self.scale(known)
        out = [self.summary(_known(d.values) or known)]
        show_axis = height >= 4 and d.window_s > 0
        rows = max(1, height - 1 - show_axis)
        cols = max(2, (width - Y_LABEL - 1) * 2)
        if d.lines:
            if rows < len(d.lines):
                out[0].append(f" · {rows} of {len(d.lines)} shown", axis)
            self._bands(out, rows, cols, hi, axis)
        else:
            chart = braille_area(resample(self.values, cols), rows, self.lo, hi)
            mid = self.fmt((hi + self.lo) / 2) if rows >= 5 else ""
            area = self.get_component_rich_style("plot--area")
            for i, line in enumerate(chart):
                label = self.fmt(hi) if i == 0 else self.fmt(self.lo) if i == rows - 1 else (
                    mid if i == rows // 2 else "")
                out.append(self._row(label, line, axis, area))
        if show_axis:
            out.append(Text(" " * (Y_LABEL + 1) + time_axis(d.window_s, width - Y_LABEL - 1), axis))
        return out

    def _bands(self, out: list[Text], rows: int, cols: int, hi: float, axis: Style) -> None:
        """One band per series, labelled, as tall as the rows allow; the rest counted."""
        lines = self.data.lines
        each = max(1, rows // len(lines))
        shown = lines[: max(1, rows // each)]
        styles = (self.get_component_rich_style("plot--area"), self.get_component_rich_style("plot--alt"))
        for n, (label, vals) in enumerate(shown):
            chart = braille_area(resample([math.nan if v is None else v for v in vals], cols), each, self.lo, hi)
            for i, line in enumerate(chart):
                out.append(self._row(label if i == 0 else "", line, axis, styles[n % 2]))

    @staticmethod
    def _row(label: str, line: str, axis: Style, area: Style) -> Text:
        text = Text(f"{axis_label(label, Y_LABEL):>{Y_LABEL}} ", style=axis, no_wrap=True)
        # Blank and dotted runs as separate spans: each gets its own x in SVG exports.
        for run in runs(line):
            text.append(run, style=axis if run[0] == " " else area)
        return text
