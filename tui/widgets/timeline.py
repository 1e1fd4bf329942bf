"""An in-terminal trace timeline: one lane per thread or stream (per rank), nested events in rows.

The view stays inside the trace (zoom and pan stop at its start and end);
the ruler has one unit; a lane's rows past the eighth fold into one that says
how many deeper rows it holds, and ``z`` shows them all (up / down scroll).

Keys:

=================  ==================================================
left / right, h l  previous / next event in the row (the view follows)
up / down, k j     row above / below
pgup / pgdn        a screenful of rows up / down (deep stacks scroll)
+ / -              zoom in / out around the selected event
[ / ]              pan left / right by a quarter of the view
0                  fit the whole trace
f                  zoom to the selected event
z                  unfold deep stacks (every row) / fold them again
enter              show the selected event's name, duration and args
=================  ==================================================
"""

from __future__ import annotations

import zlib
from typing import Any, ClassVar

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding, BindingType
from textual.color import Color
from textual.message import Message
from textual.strip import Strip
from textual.widget import Widget

from gpulens.analysis.trace.report import fmt_us
from gpulens.analysis.trace.timeline import (
    Row,
    Span,
    Timeline,
    axis_unit,
    clamp_view,
    fold_rows,
    paint_row,
    ticks,
)

GUTTER_MIN, GUTTER_MAX = 18, 34
"""Lane titles take their longest title's width, within these bounds (18: "  +NN deeper rows" fits)."""
FOLD_ROWS = 8
"""Rows per lane before deeper ones fold into one that says how many it holds."""


class TraceTimeline(Widget, can_focus=True):
    """Timeline of a :class:`Timeline` drawn line by line (see the module docstring)."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"timeline--ruler", "timeline--status", "timeline--gutter", "timeline--selected", "timeline--empty"}

    DEFAULT_CSS = """
    TraceTimeline { height: 1fr; width: 1fr; }
    TraceTimeline > .timeline--ruler { background: $panel; color: $foreground-muted; }
    TraceTimeline > .timeline--status { background: $panel; color: $foreground; }
    TraceTimeline > .timeline--gutter { color: $foreground-muted; }
    TraceTimeline > .timeline--selected { text-style: bold reverse; }
    TraceTimeline > .timeline--empty { background: $background; }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("left,h", "step(-1)", "Prev event", show=False),
        Binding("right,l", "step(1)", "Next event", show=False),
        Binding("up,k", "row(-1)", "Row up", show=False),
        Binding("down,j", "row(1)", "Row down", show=False),
        Binding("pageup", "scroll_rows(-1)", "Rows up", show=False),
        Binding("pagedown", "scroll_rows(1)", "Rows down", show=False),
        Binding("plus,equals_sign", "zoom(0.5)", "Zoom in"),
        Binding("minus", "zoom(2.0)", "Zoom out"),
        Binding("left_square_bracket", "pan(-0.25)", "Pan left", show=False),
        Binding("right_square_bracket", "pan(0.25)", "Pan right", show=False),
        Binding("0", "fit", "Fit"),
        Binding("f", "focus_event", "Zoom to event"),
        Binding("z", "unfold", "Unfold"),
        Binding("enter", "select", "Details"),
    ]

    class EventSelected(Message):
        """The user asked for the details (name, duration, args) of an event."""

        def __init__(self, timeline: TraceTimeline, details: dict[str, Any]) -> None:
            super().__init__()
            self.timeline = timeline
            self.details = details

        @property
        def control(self) -> TraceTimeline:
            """The timeline that sent the message."""
            return self.timeline

    def __init__(self, timeline: Timeline, *, fold: int = FOLD_ROWS, name: str | None = None,
                 id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.timeline = timeline
        self.fold = fold
        """Rows shown per lane before the rest fold into one (``z`` unfolds); 0 shows every row."""
        self.rows = fold_rows(timeline.rows, fold)
        self.t0, self.t1 = clamp_view(timeline.start_us, timeline.end_us, timeline.start_us, timeline.end_us)
        self.row = 0
        self.span_index: int | None = 0 if self.rows and self.rows[0].spans else None
        self._row_offset = 0
        self._palette: list[Style] = []
        self._palette_theme = ""
        self._gutter_want = max(GUTTER_MIN, min(GUTTER_MAX, max(map(len, timeline.lanes), default=0) + 2))
        self.lane_cols = self._gutter_want
        """Columns of lane titles: the longest title's, at most a third of the width."""

    # ---- state ----------------------------------------------------------
    @property
    def selected(self) -> Span | None:
        """The selected span, if any."""
        if not self.rows or self.span_index is None:
            return None
        spans = self.rows[self.row].spans
        return spans[self.span_index] if 0 <= self.span_index < len(spans) else None

    def _set_view(self, t0: float, t1: float) -> None:
        """Show ``[t0, t1]``, kept inside the trace (never before its start or after its end)."""
        self.t0, self.t1 = clamp_view(t0, t1, self.timeline.start_us, self.timeline.end_us)
        self.refresh()

    def _follow(self) -> None:
        """Pan so the selected span is visible (keeping the zoom)."""
        span = self.selected
        if span is None:
            return
        width = self.t1 - self.t0
        if span.start_us < self.t0 or span.start_us > self.t1:
            self._set_view(span.start_us - width * 0.1, span.start_us + width * 0.9)

    def action_step(self, delta: int) -> None:
        """Select the previous / next event in the row."""
        if not self.rows or not self.rows[self.row].spans:
            return
        n = len(self.rows[self.row].spans)
        self.span_index = max(0, min(n - 1, (self.span_index or 0) + delta))
        self._follow()
        self.refresh()

    def action_row(self, delta: int) -> None:
        """Move to the row above / below, to the event nearest the current time."""
        if not self.rows:
            return
        span = self.selected
        t = span.start_us if span is not None else (self.t0 + self.t1) / 2
        self.row = max(0, min(len(self.rows) - 1, self.row + delta))
        self.span_index = self.rows[self.row].index_at(t)
        self._follow()
        self.refresh()

    def action_scroll_rows(self, direction: int) -> None:
        """Scroll a screenful of rows (the selection moves with them)."""
        self.action_row(direction * max(self.size.height - 3, 1))

    def action_zoom(self, factor: float) -> None:
        """Zoom around the selected event (or the view's centre)."""
        span = self.selected
        centre = span.start_us + span.dur_us / 2 if span is not None else (self.t0 + self.t1) / 2
        half = (self.t1 - self.t0) * factor / 2
        self._set_view(centre - half, centre + half)

    def action_pan(self, fraction: float) -> None:
        """Shift the view by ``fraction`` of its width (it stops at the trace's ends)."""
        shift = (self.t1 - self.t0) * fraction
        self._set_view(self.t0 + shift, self.t1 + shift)

    def action_fit(self) -> None:
        """Show the whole trace."""
        self._set_view(self.timeline.start_us, self.timeline.end_us)

    def action_focus_event(self) -> None:
        """Zoom so the selected event fills most of the view."""
        span = self.selected
        if span is None:
            return
        pad = max(span.dur_us * 0.1, 0.5)
        self._set_view(span.start_us - pad, span.end_us + pad)

    def action_unfold(self) -> None:
        """Show every row of deep stacks (scroll with up / down), or fold them again."""
        span = self.selected
        lane = self.rows[self.row].lane if self.rows else 0
        self.fold = 0 if self.fold else FOLD_ROWS
        self.rows = fold_rows(self.timeline.rows, self.fold)
        self.row = next((i for i, r in enumerate(self.rows) if span is not None and span in r.spans),
                        next((i for i, r in enumerate(self.rows) if r.lane == lane), 0))
        spans = self.rows[self.row].spans if self.rows else []
        self.span_index = spans.index(span) if span is not None and span in spans else (0 if spans else None)
        self.refresh()

    def action_select(self) -> None:
        """Post the selected event's details."""
        span = self.selected
        if span is not None:
            self.post_message(self.EventSelected(self, self.timeline.details(span)))

    # ---- drawing ----------------------------------------------------------
    def _styles(self) -> list[Style]:
        theme = self.app.current_theme
        if self._palette_theme != theme.name:
            lightness = 0.72 if not theme.dark else 0.36
            self._palette = []
            for hue in (0, 30, 55, 90, 140, 175, 200, 225, 255, 285, 315, 340):
                c = Color.from_hsl(hue / 360, 0.5, lightness)
                self._palette.append(Style(bgcolor=c.rich_color, color=c.get_contrast_text().rich_color))
            self._palette_theme = theme.name
        return self._palette

    def _ruler(self, width: int) -> Strip:
        """Tick marks in one unit (times since the trace's start), the unit named in the gutter."""
        style = self.get_component_rich_style("timeline--ruler")
        body = max(width - self.lane_cols, 0)
        unit, marks = ticks(self.t0, self.t1, self.timeline.start_us, body)
        line = list(f"time ({unit})"[: self.lane_cols - 1].ljust(self.lane_cols) + " " * body)
        end = 0
        for col, label in marks:
            x = self.lane_cols + col
            text = "|" + label
            if x < end or x + len(text) > width:
                continue
            line[x : x + len(text)] = text
            end = x + len(text) + 1
        return Strip([Segment("".join(line)[:width].ljust(width), style)], width)

    def _status(self, width: int, body_h: int) -> Strip:
        span = self.selected
        unit, size = axis_unit(self.t1 - self.t0)
        if span is None:
            text = "no events" if not self.rows else "no event selected"
        else:
            text = (f"{span.name}  ·  {fmt_us(span.dur_us)}  ·  at +{(span.start_us - self.timeline.start_us) / size:.3f} "
                    f"{unit}  ·  {span.cat}  ·  enter: details")
        last = min(self._row_offset + body_h, len(self.rows))
        right = f"  view {(self.t1 - self.t0) / size:.3f} {unit} · rows {self._row_offset + 1}-{last} of {len(self.rows)}"
        if width - len(right) >= 24:  # the event is cut first: where the view is matters while scrolling
            text = text[: width - len(right)].ljust(width - len(right)) + right
        style = self.get_component_rich_style("timeline--status")
        return Strip([Segment(text[:width].ljust(width), style)], width)

    def render_line(self, y: int) -> Strip:
        width, height = self.size.width, self.size.height
        self.lane_cols = max(8, min(self._gutter_want, width // 3))
        body_h = max(height - 2, 1)
        if self.row < self._row_offset:
            self._row_offset = self.row
        elif self.row >= self._row_offset + body_h:
            self._row_offset = self.row - body_h + 1
        if y == 0:
            return self._ruler(width)
        if y == height - 1:
            return self._status(width, body_h)
        index = self._row_offset + y - 1
        empty = self.get_component_rich_style("timeline--empty")
        if index >= len(self.rows):
            return Strip([Segment(" " * width, empty)], width)
        return self._row_strip(self.rows[index], index, width, empty)

    def _row_strip(self, row: Row, index: int, width: int, empty: Style) -> Strip:
        gutter_style = self.get_component_rich_style("timeline--gutter")
        title = row.title or ("  " + "·" * min(row.depth, 6))
        if row.folded:
            title = f"  +{row.folded} deeper row{'s' if row.folded != 1 else ''}"
        segments = [Segment(title[: self.lane_cols - 1].ljust(self.lane_cols), gutter_style)]
        cells = paint_row(row, self.t0, self.t1, max(width - self.lane_cols, 0))
        palette = self._styles()
        selected = self.selected if index == self.row else None
        if selected is not None and cells and selected not in cells and selected.end_us >= self.t0 and selected.start_us <= self.t1:
            # A short event shares its column with a longer one, which wins the paint:
            # claim the column anyway so the selection is always visible.
            col = int((selected.start_us - self.t0) * len(cells) / (self.t1 - self.t0))
            cells[max(0, min(len(cells) - 1, col))] = selected
        sel_style = self.get_component_rich_style("timeline--selected")
        x = 0
        while x < len(cells):
            span = cells[x]
            end = x + 1
            while end < len(cells) and cells[end] is span:
                end += 1
            if span is None:
                segments.append(Segment(" " * (end - x), empty))
            else:
                style = palette[zlib.crc32(span.name.encode()) % len(palette)]
                if selected is not None and span is selected:
                    style = style + sel_style
                segments.append(Segment(span.name[: end - x].ljust(end - x), style))
            x = end
        return Strip(segments, width)
