"""Per-host sparklines of GPU utilization and SM activity (overview)."""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, ClassVar

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip
from textual.widget import Widget

from gpulens.core.model import HostSample
from gpulens.core.units import pct
from gpulens.store.store import Store
from gpulens.tui.widgets._braille import time_axis
from gpulens.tui.widgets._columns import ColumnCache
from gpulens.tui.widgets._lines import LazyLines

BARS = "▁▂▃▄▅▆▇█"


def spark(values: Sequence[float], lo: float = 0.0, hi: float = 100.0) -> str:
    """One character per value; a gap (space) where the value is unknown.

    Never raises on inf or 1e308 (values or bounds): they clamp to the lowest or highest bar.
    """
    span = hi - lo
    if not span or span != span:
        span = 1.0
    out = []
    for v in values:
        x = (v - lo) / span * 7.999  # NaN for NaN (or inf - inf): never int() of inf
        if x != x:
            out.append(" ")
        else:
            out.append(BARS[0 if x <= 0 else 7 if x >= 7 else int(x)])
    return "".join(out)


class TimeAxisLine(Widget):
    """The line under an overview panel: ``-5m … now`` under its chart's columns (as a plot's time axis).

    ``text_of`` is the chart's axis, as wide as the chart (its label column
    blank), which keeps it until the window or its width changes; it is
    drawn right-aligned, so it stays under a chart narrower than its box and
    aligned to the box's right edge. A tick repaints the line only when that
    text changed (:meth:`refresh_text`): never for a new sample or column.
    """

    DEFAULT_CSS = "TimeAxisLine { height: 1; color: $text-muted; }"

    def __init__(self, text_of: Callable[[], str], *, name: str | None = None, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.text_of = text_of
        self._drawn: tuple[str, int, Strip] | None = None
        """(text, width, strip) as last drawn."""
        self.drawn = 0
        """Strips built so far (tests count them)."""

    def refresh_text(self) -> bool:
        """Repaint the line if the chart's axis changed since it was drawn; whether it did."""
        if self._drawn is not None and self.text_of() == self._drawn[0]:
            return False
        self.refresh()
        return True

    def render_line(self, y: int) -> Strip:
        """The axis, right-aligned (its strip kept while the text and width hold)."""
        text, width = self.text_of(), self.size.width
        drawn = self._drawn
        if drawn is None or drawn[0] != text or drawn[1] != width:
            style = self.rich_style
            line = text[max(0, len(text) - width):]  # too wide: the blank label column goes first
            strip = Strip([Segment(" " * (width - len(line)) + line, style)], width)
            drawn = self._drawn = (text, width, strip)
            self.drawn += 1
        return drawn[2]

    def notify_style_update(self) -> None:
        """Theme or class change: the kept strip carries the old style."""
        super().notify_style_update()
        self._drawn = None


class HostSparklines(LazyLines):
    """One line per host: ``name  util-spark  95%  SM sm-spark  80%``.

    Columns are fixed spans of absolute time: a tick reads only a row's newest
    column (and its "now"), and repaints the row only when its text changed.
    :meth:`axis_text` is the time axis under them (a :class:`TimeAxisLine`).
    """

    COMPONENT_CLASSES: ClassVar[set[str]] = {"sparklines--label", "sparklines--util", "sparklines--sm", "sparklines--na"}
    DEFAULT_CSS = """
    HostSparklines > .sparklines--label { color: $text; }
    HostSparklines > .sparklines--util { color: $success; }
    HostSparklines > .sparklines--sm { color: $accent; }
    HostSparklines > .sparklines--na { color: $text-muted; }
    """

    METRICS = ("gpu.utilization_percent", "gpu.sm_activity_percent")

    def __init__(self, store: Store, *, name: str | None = None, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.store = store
        self.window_s = 300.0
        self.header_lines = 1
        self._columns: ColumnCache[tuple[str, float]] = ColumnCache(_closed)
        self._parts: dict[tuple[str, str], tuple[tuple[object, ...], list[Segment]]] = {}
        self._memo: dict[str, tuple[int, list[list[Segment]], list[Segment]]] = {}
        self._newest: dict[str, tuple[HostSample, tuple[float, float]]] = {}
        self._axis: tuple[tuple[object, ...], str] = ((), "")
        """(window, widths, rows shown) -> the time axis under the sparklines."""

    @staticmethod
    def columns_at(width: int) -> tuple[int, bool]:
        """(columns per sparkline, both metrics shown) at ``width``."""
        body = width - 12
        both = body >= 40
        return max(4, (body - 14) // 2 if both else body - 6), both

    def invalidate(self) -> None:
        """Drop every cached row and column (the window or store changed)."""
        self._columns.clear()
        self._parts.clear()
        self._memo.clear()
        self._newest.clear()
        super().invalidate()

    def set_rows(self, rows: Sequence[Hashable], versions: Mapping[Any, object]) -> None:
        """As :meth:`LazyLines.set_rows`; a row also changes when its closed columns may have."""
        cols = self.columns_at(self.row_width)[0]
        store, w, stamp = self.store, self.window_s, self._columns.stamp
        for key, ver in versions.items():
            self._cache.versions[key] = (ver, stamp(store, str(key), w, cols), w)
        rows = rows if isinstance(rows, list) else list(rows)
        if rows != self.rows:
            self._columns.keep((h, m) for h in rows for m in self.METRICS)
            self._parts = {k: v for k, v in self._parts.items() if k[0] in versions}
            self._memo = {k: v for k, v in self._memo.items() if k in versions}
            self._newest = {k: v for k, v in self._newest.items() if k in versions}
        super().set_rows(rows, {})

    def header_line(self, y: int, width: int) -> Strip:
        st = self.component_style("sparklines--na")
        cols, both = self.columns_at(width)
        util = f"{'GPU util':<{cols}} {'now':>4}"
        sm = f"  {'SM activity':<{cols}} {'now':>4}" if both else ""
        text = f"{'host':<12}{util}{sm}"
        return Strip([Segment(text, st)]).crop_extend(0, width, self.base_style)

    def axis_text(self) -> str:
        """``-5m … now`` under each sparkline's columns, as wide as the widget (blank without rows).

        Worked out again only when the window or the width changes: the labels
        are relative, so a new sample or a new column leaves them as they are.
        """
        width, full = self.row_width, self.size.width
        key = (self.window_s, width, full, bool(self.rows))
        if self._axis[0] != key:
            self._axis = (key, sparkline_axis(self.window_s, width).ljust(full) if self.rows else "")
        return self._axis[1]

    def make_line(self, key: Hashable, width: int) -> list[Segment]:
        host = str(key)
        na = self.component_style("sparklines--na")
        cols, both = self.columns_at(width)
        parts = [self._one(host, self.METRICS[0], cols, self.component_style("sparklines--util"), na)]
        if both:
            parts.append(self._one(host, self.METRICS[1], cols, self.component_style("sparklines--sm"), na))
        memo = self._memo.get(host)
        if memo is not None and memo[0] == width and len(memo[1]) == len(parts) and all(
                a is b for a, b in zip(memo[1], parts, strict=True)):
            return memo[2]  # same text: the row is not repainted
        name = host if len(host) <= 11 else host[:10] + "…"
        segs = [Segment(f"{name:<11} ", self.component_style("sparklines--label")), *parts[0]]
        if both:
            segs += [Segment("  ", na), *parts[1]]
        self._memo[host] = (width, parts, segs)
        return segs

    def _one(self, host: str, metric: str, cols: int, st: Style, na: Style) -> list[Segment]:
        """The sparkline and "now" of one metric (the same list while they read the same)."""
        stamp, (closed, prev), last = self._columns.read(self.store, (host, metric), host, metric,
                                                         self.window_s, cols)
        known = last == last and abs(last) != math.inf
        now = self._latest(host, metric)  # the newest sample, as "now" is everywhere
        if not (now == now and abs(now) != math.inf):
            now = last if known else prev
        text = (closed, spark([last]), pct(now)) if known or prev == prev else None
        memo = self._parts.get((host, metric))
        if memo is not None and memo[0] == (stamp, text):
            return memo[1]
        if text is None:
            part = [Segment(f"{'n/a':<{cols}} {'':>4}", na)]
        else:
            part = [Segment(text[0] + text[1], st), Segment(f" {text[2]:>4}", st)]
        self._parts[(host, metric)] = ((stamp, text), part)
        return part

    def _latest(self, host: str, metric: str) -> float:
        """``metric`` (a host's mean over its GPUs) in the host's newest sample; NaN without one."""
        sample = self.store.latest(host)
        if sample is None:
            return math.nan
        hit = self._newest.get(host)
        if hit is None or hit[0] is not sample:
            hit = self._newest[host] = (sample, _gpu_means(sample))
        return hit[1][self.METRICS.index(metric)]

    def styles_changed(self) -> None:
        """Theme or focus: the memoised rows carry the old styles."""
        self._memo.clear()
        self._parts.clear()


def sparkline_axis(window_s: float, width: int) -> str:
    """The time axis of the rows :class:`HostSparklines` draws ``width`` cells wide: one under each sparkline."""
    cols, both = HostSparklines.columns_at(width)
    one = f"{time_axis(window_s, cols):<{cols}}"
    return " " * 12 + one + (" " * 7 + one if both else "")


def _closed(values: list[float]) -> tuple[str, float]:
    """The closed columns' sparkline and their newest known value (NaN if none)."""
    prev = next((v for v in reversed(values) if v == v and abs(v) != math.inf), math.nan)
    return spark(values), prev


def _gpu_means(sample: HostSample) -> tuple[float, float]:
    """The host's GPU utilization and SM activity in ``sample``: each the mean over the GPUs that report it.

    As the store's host means (:func:`gpulens.store.views.host_values_flat`), for two metrics only:
    this runs for every host's every sample.
    """
    util: list[float] = []
    sm: list[float] = []
    for g in sample.gpus:
        if (u := g.utilization_percent) is not None and (x := float(u)) == x:
            util.append(x)
        if (a := g.sm_activity_percent) is not None and (y := float(a)) == y:
            sm.append(y)
    return (sum(util) / len(util) if util else math.nan, sum(sm) / len(sm) if sm else math.nan)
