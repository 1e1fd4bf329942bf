"""A time-series plot drawn with braille dots (2 x 4 per cell): fast, and fine in tmux.

Every plot says what it covers: a summary line with the exact window statistics from the store
(now, avg, max, how much data they are over while less than the window), a y axis with units and a
floor (a flat zero reads ``idle`` on 1kB/s, not a full-scale ``1B/s``), a time axis (``-5m … now``).

This module is the widget: its data, the summary line fitted to the width, the layout of the lines and
which of them repaint. The chart rows, redrawn only where they changed, are
:mod:`gpulens.tui.widgets.plot_chart`; the braille drawing is ``_braille``, the data a plot is given
``plot_data``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import ClassVar

from rich.cells import cell_len
from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.color import Color
from textual.filter import LineFilter
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

from gpulens.core.units import coverage
from gpulens.store.views import WindowStats
from gpulens.tui.widgets._braille import Line, axis_label, braille_area, line_strip, time_axis
from gpulens.tui.widgets.na import na_text
from gpulens.tui.widgets.plot_chart import Y_LABEL, BandCharts, chart_columns
from gpulens.tui.widgets.plot_data import PlotData, known, plot_data

__all__ = ["PlotData", "PlotLines", "TimeSeriesPlot", "axis_label", "braille_area", "chart_columns", "plot_data",
           "time_axis"]

_INF = math.inf
_BOLD = Style(bold=True)


class PlotLines(Widget):
    """A plot's content lines, inside its border: :meth:`TimeSeriesPlot.content_line` draws each.

    Textual draws a repainted line of a bordered widget at about twice the cost
    of one without a border (it builds the border's cells again for every line);
    the plot keeps the border and this borderless child repaints.
    """

    DEFAULT_CSS = "PlotLines { width: 1fr; height: 1fr; }"

    def __init__(self, plot: TimeSeriesPlot) -> None:
        super().__init__()
        self.plot = plot
        self._background: Color | None = None
        """The background the line filters are given, until the styles change (an ancestor walk)."""

    def notify_style_update(self) -> None:
        """A theme or class change (here or above): look the background up again."""
        super().notify_style_update()
        self._background = None

    def render_line(self, y: int) -> Strip:
        """The plot's content line ``y``."""
        return self.plot.content_line(y)

    def render_lines(self, crop: Region) -> list[Strip]:
        """Lines ``crop`` of the content, through the app's line filters, without Textual's styles cache.

        That cache frames each line in the widget's border, padding, tint and
        opacity; this widget has none, and its lines are the plot's own strips,
        already styled, the full width and kept until they change. Drawn this
        way a repainted line costs about half as much (45 us against 80, warm);
        the pictures are the same (the snapshot tests compare them).
        """
        plot = self.plot
        background = self._background
        if background is None:
            background = self._background = self.background_colors[1]
        filters = _line_filters(self)
        strips = []
        for y in crop.line_range:
            strip = plot.content_line(y)
            for line_filter in filters:
                strip = strip.apply_filter(line_filter, background)
            strips.append(strip)
        x1, x2 = crop.column_span
        if (x1, x2) != (0, self.size.width):
            strips = [strip.crop(x1, x2) for strip in strips]
        return strips


def _line_filters(widget: Widget) -> Sequence[LineFilter]:
    """The line filters Textual applies to ``widget``'s lines: ``get_line_filters`` where Textual has it."""
    get: Callable[[], Sequence[LineFilter]] | None = getattr(widget, "get_line_filters", None)
    if get is not None:
        return get()
    return [f for f in widget.app._filters if f.enabled]  # Textual 4.0, as its styles cache reads them


class TimeSeriesPlot(Widget):
    """Summary line (now/avg/max over how much data), braille area chart, time axis.

    Each line is kept as (text, style) runs and as the :class:`Strip` drawn
    from them; new data repaints only the lines whose runs changed (at 1 Hz
    with aligned columns: the summary, and the chart rows whose newest cell
    changed), through :meth:`Widget.refresh` of its :class:`PlotLines` with
    that line's region. The plot itself draws the border and title.
    """

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

    POINTS_UNSIZED = 300
    """Values asked of the store before the first layout (the chart resamples them)."""

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
        self._lines: list[Line] = []
        """The runs of each content line, as computed for ``_size``."""
        self._strips: list[Strip | None] = []
        """The strip of each line (None: draw it again from its runs)."""
        self._drawn_size: tuple[int, int] | None = None
        self._plot_styles: dict[str, Style] = {}
        self._charts = BandCharts()
        """Each band's rows as last drawn (:mod:`~gpulens.tui.widgets.plot_chart`)."""
        self._axis: tuple[tuple[float, int], Line] | None = None
        self.repainted = 0
        """Content lines marked for repaint by :meth:`set_data` (all of them on a full refresh)."""
        self.lines = PlotLines(self)
        """The child that draws the content."""

    def compose(self) -> ComposeResult:
        """The content, inside the border."""
        yield self.lines

    @property
    def points(self) -> int:
        """The columns the chart draws (two per cell): ask the store for exactly these (aligned)."""
        width = self.inner_size()[0]
        return chart_columns(width) if width else self.POINTS_UNSIZED

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
        """New points (NaN = gap) and the n/a reason, or a :class:`PlotData`; repaints only what changed.

        ``values`` spanning exactly :attr:`points` columns are drawn as they are
        (two per cell); any other length is resampled to the chart's width.
        """
        data = values if isinstance(values, PlotData) else plot_data(values, reason, window, window_s, stats)
        if data == self.data:
            return
        self.data = data
        width, height = self.inner_size()
        if not self.is_mounted or not width or self._drawn_size != (width, height):
            self._drawn_size = None
            self.repainted += height
            self.lines.refresh()
            return
        new = self._compute(width, height)
        if len(new) != len(self._lines):
            self._lines, self._strips = new, [None] * len(new)
            self.repainted += height
            self.lines.refresh()
            return
        regions: list[Region] = []
        start = -1  # consecutive changed lines are refreshed as one region
        for y, (old, line) in enumerate([*zip(self._lines, new, strict=True), ((), ())]):
            if old is not line and old != line:
                self._strips[y] = None
                self.repainted += 1
                if start < 0:
                    start = y
            elif start >= 0:
                regions.append(Region(0, start, width, y - start))
                start = -1
        if regions:
            self.lines.refresh(*regions)  # one call: each works out the widget's offsets again
        self._lines = new

    def inner_size(self) -> tuple[int, int]:
        """(width, height) of the content: :attr:`content_size` without its compositor lookup (per line)."""
        if not self.is_mounted:
            return 0, 0
        outer, gutter = self.outer_size, self.styles.gutter
        return max(0, outer.width - gutter.width), max(0, outer.height - gutter.height)

    def notify_style_update(self) -> None:
        """A theme or class change: draw the strips again."""
        super().notify_style_update()
        self._plot_styles = {}
        self._drawn_size = None
        self._charts = BandCharts()  # their lines carry the old styles
        self._axis = None

    def _style(self, name: str) -> Style:
        """A component's style (``plot--axis``), or the widget's own (``""``), cached until the styles change."""
        style = self._plot_styles.get(name)
        if style is None:
            style = self.rich_style if not name else self.get_component_rich_style(name)
            self._plot_styles[name] = style
        return style

    def scale(self, known: Sequence[float]) -> tuple[float, bool]:
        """(full scale, idle): the fixed ``hi``, else the data's max with headroom, at least ``floor``."""
        top = max(known) if known else 0.0
        st = self.data.stats
        if st is not None and math.isfinite(st.max) and not self.data.lines:  # bands: each GPU's own values
            top = max(top, st.max)
        idle = top <= self.lo
        if self.hi is not None:
            return self.hi, idle
        return max(top * 1.1, self.floor) or 1.0, idle

    def summary(self, known: Sequence[float], width: int = 1 << 16) -> Text:
        """``now 75%  avg 63%  min 12%  max 86%  over 4m50s of data [5m]`` (or ``idle``), fitted to ``width``."""
        return Text.assemble(*self._summary(known, width), no_wrap=True, overflow="crop")

    def _summary(self, known: Sequence[float], width: int = 1 << 16,
                 notes: Sequence[tuple[str, Style]] = ()) -> list[tuple[str, Style]]:
        """The summary's runs and ``notes`` after them, the longest form that fits ``width`` cells: without
        "of data", then without the min, then without the mean, then without how much data (said only
        while the data covers less than the window), before anything is cut."""
        d = self.data
        st = d.stats
        title = self._style("plot--title")
        if st is not None and not st.empty:
            now, mean, low, top = st.now, st.mean, st.min, st.max
            covered = coverage(st.covered_s) if st.covered_s < d.window_s else ""  # all of it: [5m] says so
            bound = st.combined  # several series joined: their extremes bound the joined one's
        else:
            now = known[-1] if known else math.nan
            mean, low, top = (sum(known) / len(known), min(known), max(known)) if known else (math.nan,) * 3
            covered = coverage(d.covered_s) if 0 < d.covered_s < d.window_s else ""
            bound = False
        tail = [(f"[{d.window}]" + (f" {d.note}" if d.note else ""), title), *notes]
        if top == top and top <= self.lo and self.hi is None:
            figures = [[("idle", self._style("plot--idle")), (f"  {self.fmt(top)} throughout  ", title)]] * 3
        else:
            every = (("now", now), ("avg", mean), ("min≥" if bound else "min", low), ("max≤" if bound else "max", top))
            full = self._figures(every, title)  # three runs a figure: without the min, without the mean too
            figures = [full, full[:6] + full[9:], full[:3] + full[9:]]
        over = [[(f"over {covered} of data ", title)], [(f"over {covered} ", title)], []] if covered else [[]] * 3
        for fig, cov in ((0, 0), (0, 1), (1, 1), (2, 1), (1, 2), (2, 2)):  # how much data outlasts the mean
            form = figures[fig] + over[cov] + tail
            if sum(cell_len(t) for t, _ in form) <= width:
                break
        return form

    def _figures(self, pairs: Sequence[tuple[str, float]], title: Style) -> list[tuple[str, Style]]:
        out: list[tuple[str, Style]] = []
        for label, v in pairs:
            past = self.style_of(v) if self.style_of is not None and v == v else None
            out.append((f"{label} ", title))
            if past is None:
                out.append((self.fmt(v if v == v else None), title))
            else:  # the marker keeps the meaning without colour (NO_COLOR)
                out.append((self.fmt(v) + past[1], title + past[0]))
            out.append(("  ", title))
        return out

    def render(self) -> Text:
        """The whole plot as text (what :meth:`render_line` draws, line by line)."""
        width, height = self.content_size.width, self.content_size.height
        return Text("\n").join(Text.assemble(*line) for line in self._compute(width, height))

    def render_line(self, y: int) -> Strip:
        """Blank: :class:`PlotLines` covers the content area."""
        return Strip.blank(self.inner_size()[0], self._style(""))

    def content_line(self, y: int) -> Strip:
        """Line ``y`` of the content, from strips kept until their runs (or the size) change."""
        width, height = self.inner_size()
        if self._drawn_size != (width, height):
            self._lines = self._compute(width, height)
            self._strips = [None] * len(self._lines)
            self._drawn_size = (width, height)
        if y >= len(self._lines):
            return Strip.blank(width, self._style(""))
        strip = self._strips[y]
        if strip is None:
            strip = self._strips[y] = line_strip(self._lines[y], width, self._style(""))
        return strip

    def _compute(self, width: int, height: int) -> list[Line]:
        """Summary line, the chart with a y axis, the time axis: each line's runs."""
        d = self.data
        axis = self._style("plot--axis")
        seen = self._known_values()
        if not seen:
            plain = na_text(d.reason, width).plain
            bold = min(3, len(plain))
            return [tuple(p for p in ((plain[:bold], axis + _BOLD), (plain[bold:], axis)) if p[0])]
        hi = self.hi if self.hi is not None else self.scale(seen)[0]
        out: list[Line] = [()]
        show_axis = height >= 4 and d.window_s > 0
        rows = max(1, height - 1 - show_axis)
        cols = chart_columns(width)
        if d.lines:  # the bands' own scale, and how many fit: part of the line the summary is fitted to
            notes = [(f" · each {self.fmt(self.lo)}–{self.fmt(hi)}", axis)]
            if rows < len(d.lines):
                notes.append((f" · {rows} of {len(d.lines)} shown", axis))
            head = self._summary(known(d.values) or seen, width, notes)
            self._bands(out, rows, cols, hi, axis)
        else:
            head = self._summary(seen, width, [])
            out += self._charts.rows(0, self._paired(d.values, cols), cols, self.lo, hi, self._y_labels(rows, hi),
                                     axis, axis + self._style("plot--area"))
        out[0] = tuple(head)
        if show_axis:
            out.append(self._time_axis(width, axis))
        return out

    def _known_values(self) -> Sequence[float]:
        """The finite values the scale and summary are worked out from (any one, for a fixed scale)."""
        d = self.data
        if self.hi is not None and not d.lines and d.stats is not None and not d.stats.empty:
            # A fixed scale and exact figures: the values are only looked at for whether any is known.
            return (1.0,) if any(v is not None and -_INF < v < _INF for v in d.values) else ()
        return known([v for _, vals in d.lines for v in vals] if d.lines else d.values)

    def _y_labels(self, rows: int, hi: float) -> tuple[str, ...]:
        """The y axis of one series: top, bottom, and the middle where there are 5 rows or more."""
        mid = self.fmt((hi + self.lo) / 2) if rows >= 5 else ""
        top, bottom = self.fmt(hi), self.fmt(self.lo)
        return tuple(top if i == 0 else bottom if i == rows - 1 else (mid if i == rows // 2 else "")
                     for i in range(rows))

    def _time_axis(self, width: int, axis: Style) -> Line:
        """The time axis under the chart (kept while the window and width stay)."""
        key = (self.data.window_s, width)
        if self._axis is None or self._axis[0] != key:
            self._axis = key, ((" " * (Y_LABEL + 1) + time_axis(self.data.window_s, width - Y_LABEL - 1), axis),)
        return self._axis[1]

    def _bands(self, out: list[Line], rows: int, cols: int, hi: float, axis: Style) -> None:
        """One band per series, labelled, as tall as the rows allow; the rest counted."""
        lines = self.data.lines
        each = max(1, rows // len(lines))
        shown = lines[: max(1, rows // each)]
        styles = (axis + self._style("plot--area"), axis + self._style("plot--alt"))
        for n, (label, vals) in enumerate(shown):
            labels = (label, *([""] * (each - 1)))
            out += self._charts.rows(n + 1, self._paired(vals, cols), cols, self.lo, hi, labels, axis, styles[n % 2])

    def _paired(self, values: tuple[float | None, ...], cols: int) -> tuple[float | None, ...]:
        """``values`` as the cells pair them (:attr:`PlotData.newest_even`)."""
        if self.data.newest_even and len(values) == cols:
            return (*values[1:], None)
        return values
