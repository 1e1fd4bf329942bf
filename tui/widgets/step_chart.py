"""The Analyze screen's charts, drawn by plotext: step times, step time per rank, top ops, kernel durations.

Pure drawings (data in, a Rich ``Text`` out, never raising):

- :func:`step_chart`: one bar per step (ms), the mean as a line across the bars and in the title;
- :func:`rank_chart`: one bar per rank, its mean step time; the spread in the title;
- :func:`ops_chart`: the top ops by self time, as horizontal bars;
- :func:`kernel_histogram`: how many kernels took 1-10 us, 10-100 us, ... (decades).

``ChartView`` is the widget: it draws each
(chart, size, colour) once and keeps the text: a refresh or a repaint of the
same analysis at the same size never runs plotext again.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import math
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

from rich.text import Text
from textual.widget import Widget

_log = logging.getLogger("gpulens.tui.widgets.step_chart")

CHART_ROWS = 10
"""Title, frame, six rows of bars, frame, step numbers."""

_MIN_WIDTH = 20
_MIN_ROWS = 5
_MAX_BARS = 120

# plotext 6 draws on one module-level figure, so two charts must not be built at once.
_figure_lock = threading.Lock()


def _clean(step_ms: Sequence[float]) -> list[float]:
    """Durations plotext can draw: a NaN, an infinity or a negative one becomes 0."""
    out: list[float] = []
    for v in step_ms:
        x = float(v)
        out.append(x if math.isfinite(x) and x > 0 else 0.0)
    return out


def _steps(n: int) -> str:
    return f"{n} step{'s' if n != 1 else ''}"


def _ms(v: float) -> str:
    return f"{v:,.2f} ms" if v < 1e6 else f"{v:.3g} ms"


def _short(v: float) -> str:
    """A bar's value under it: three or four digits."""
    return f"{v:.2f}" if v < 10 else f"{v:.1f}" if v < 1000 else f"{v:,.0f}" if v < 1e6 else f"{v:.2g}"


def _title(values: list[float], mean: float, width: int, grouped: str = "") -> str:
    """The longest of a few titles that fits: plotext drops a title wider than the chart."""
    steps, mean_ms, max_ms = _steps(len(values)) + grouped, f"mean {_ms(mean)}", f"max {_ms(max(values))}"
    for title in (f"step time (ms) · {steps} · {mean_ms} (── line) · {max_ms}",
                  f"{steps} · {mean_ms} (──) · {max_ms}", f"{mean_ms} (──)"):
        if len(title) <= width:
            return title
    return ""


def _group(values: list[float], most: int) -> tuple[list[int], list[float], int]:
    """At most ``most`` bars: consecutive steps share a bar (their mean) when there are more.

    Returns the first step number of each bar, the bar heights and the steps per bar.
    """
    per = max(1, math.ceil(len(values) / max(1, most)))
    firsts = list(range(1, len(values) + 1, per))
    heights = [sum(v / len(chunk) for v in chunk) for chunk in (values[i - 1:i - 1 + per] for i in firsts)]
    return firsts, heights, per


def _start(width: int, rows: int, color: bool, title: str) -> object:
    """plotext's one figure, cleared and sized (the caller holds :data:`_figure_lock`)."""
    import plotext

    # Its size is otherwise clipped to the real terminal's, which a Textual app is not.
    plotext.terminal.limit(False, False)
    fig = plotext.figure
    fig.clear()
    fig.interactive(False)
    fig.plot_size(width, rows)
    # "simple": bars coloured, frame and labels left to the terminal's colours.
    fig.theme("simple" if color else "colorless")
    fig.title(title)
    return fig


def _as_text(drawn: str, color: bool) -> Text:
    text = Text.from_ansi(drawn.rstrip("\n")) if color else Text(drawn.rstrip("\n"))
    text.no_wrap = True
    text.overflow = "crop"
    return text


def _draw(values: list[float], width: int, rows: int, color: bool) -> str:
    """plotext's rendering, ANSI-coloured unless ``color`` is false."""
    n = len(values)
    # v / n, not sum / n: a sum of huge durations overflows to inf.
    mean = sum(v / n for v in values)
    # Two cells a bar at least; plotext also slows down past a few hundred bars.
    firsts, heights, per = _group(values, min(_MAX_BARS, width // 2))
    top = max(heights)
    lo, hi = 1 - per / 2, firsts[-1] + per / 2
    title = _title(values, mean, width) if per == 1 else _title(values, mean, width, f" · {per} per bar")
    with _figure_lock:
        # plotext (and the PIL it loads) is imported on the first chart, not with this module: ~0.15 s.
        fig: Any = _start(width, rows, color, title)
        if top > 0:  # drawn first, so it shows between and above the bars, not across them
            fig.draw(fig.segment((lo, hi), (mean, mean), marker="─"))
        fig.draw(fig.bar(firsts, heights))
        labels = [f"#{i} {_short(v)}" for i, v in enumerate(values, 1)]
        if per == 1 and max(map(len, labels)) + 2 <= (width - 8) / n:
            # Room under every bar: its value there, the row height being coarse.
            fig.ruler("x").ticks(firsts, labels)
        fig.ruler("x").lim(lo, hi)
        fig.ruler("y").lim(0, top if top > 0 else 1.0)
        return str(fig.build().string(colorless=not color))


def step_chart(step_ms: Sequence[float], width: int, rows: int = CHART_ROWS, *, color: bool = True) -> Text:
    """One bar per step (ms), ``width`` cells wide and ``rows`` tall; never raises.

    No steps give one dim line; a chart that does not fit, or data plotext
    cannot draw, give one dim line saying so.
    """
    values = _clean(step_ms)
    if not values:
        return Text("no step markers", style="dim")
    if width < _MIN_WIDTH or rows < _MIN_ROWS:
        return Text(f"{_steps(len(values))}: too little room for the step chart", style="dim")
    return _guarded(lambda: _draw(values, width, rows, color), width, color, "step chart")


def _guarded(draw: Callable[[], str], width: int, color: bool, what: str) -> Text:
    try:
        return _as_text(draw(), color)
    except Exception as err:  # plotext (third-party) on odd data, whatever it raises, must not take the screen down
        _log.debug("%s not drawn", what, exc_info=True)
        return Text(f"{what} unavailable: {type(err).__name__}: {err}"[:width], style="dim")


def rank_chart(labels: Sequence[str], mean_ms: Sequence[float], width: int, rows: int = CHART_ROWS, *,
               color: bool = True) -> Text:
    """One bar per rank: its mean step time (ms); the fastest, slowest and spread in the title."""
    pairs = [(str(label), v) for label, v in zip(labels, _clean(mean_ms), strict=False)]
    if not pairs:
        return Text("no rank has step markers", style="dim")
    if width < _MIN_WIDTH or rows < _MIN_ROWS:
        return Text(f"{len(pairs)} ranks: too little room for the chart", style="dim")
    values = [v for _, v in pairs]
    lo, hi = min(values), max(values)
    spread = f"spread {100 * (hi - lo) / hi:.1f}%" if hi > 0 else "spread n/a"
    title = next((t for t in (f"mean step time per rank (ms) · {len(pairs)} ranks · {spread}",
                              f"step ms per rank · {spread}", spread) if len(t) <= width), "")

    def draw() -> str:
        xs = list(range(1, len(pairs) + 1))
        with _figure_lock:
            fig: Any = _start(width, rows, color, title)
            fig.draw(fig.bar(xs, values, width=0.6))
            if max(map(len, (lb for lb, _ in pairs))) + 1 <= (width - 8) / len(pairs):
                fig.ruler("x").ticks(xs, [lb for lb, _ in pairs])
            fig.ruler("x").lim(0.5, len(pairs) + 0.5)
            fig.ruler("y").lim(0, hi if hi > 0 else 1.0)
            return str(fig.build().string(colorless=not color))

    return _guarded(draw, width, color, "rank chart")


def ops_chart(names: Sequence[str], values_ms: Sequence[float], width: int, rows: int = CHART_ROWS, *,
              color: bool = True, what: str = "self CPU") -> Text:
    """The top ops as horizontal bars (longest at the top), ``what`` in ms."""
    # One plot row per bar: the title, two frame rows and the tick labels take four.
    pairs = [(str(n), v) for n, v in zip(names, _clean(values_ms), strict=False) if v > 0][: max(rows - 4, 1)]
    if not pairs:
        return Text(f"no op with {what} time", style="dim")
    if width < 2 * _MIN_WIDTH or rows < _MIN_ROWS:
        return Text("too little room for the op chart", style="dim")
    label_w = max(8, min(28, width // 3))
    labels = [n if len(n) <= label_w else n[: label_w - 1] + "…" for n, _ in pairs]
    top = max(v for _, v in pairs)
    title = next((t for t in (f"top {len(pairs)} ops by {what} (ms)", f"top ops ({what} ms)") if len(t) <= width), "")

    def draw() -> str:
        ys = list(range(len(pairs), 0, -1))  # the longest at the top
        with _figure_lock:
            fig: Any = _start(width, rows, color, title)
            fig.draw(fig.bar(ys, [v for _, v in pairs], orientation="horizontal", width=0.6))
            fig.ruler("y").ticks(ys, labels)
            fig.ruler("y").lim(0.5, len(pairs) + 0.5)
            fig.ruler("x").lim(0, top)
            return str(fig.build().string(colorless=not color))

    return _guarded(draw, width, color, "op chart")


DECADES_US = (0.1, 1.0, 10.0, 100.0, 1e3, 1e4, 1e5, 1e6, 1e7)


def _us(v: float) -> str:
    return f"{v:g}us" if v < 1e3 else f"{v / 1e3:g}ms" if v < 1e6 else f"{v / 1e6:g}s"


def duration_bins(durations_us: Sequence[float]) -> list[tuple[str, int]]:
    """Kernel counts per decade of duration (``<1us``, ``1us-10us``, ...), from the first to the last non-empty."""
    edges = DECADES_US
    counts = [0] * (len(edges) + 1)
    for d in _clean(durations_us):
        counts[bisect.bisect_right(edges, d)] += 1
    names = [f"<{_us(edges[0])}"] + [f"{_us(a)}-{_us(b)}" for a, b in itertools.pairwise(edges)] + [f">{_us(edges[-1])}"]
    used = [i for i, c in enumerate(counts) if c]
    if not used:
        return []
    return [(names[i], counts[i]) for i in range(used[0], used[-1] + 1)]


def kernel_histogram(durations_us: Sequence[float], width: int, rows: int = CHART_ROWS, *, color: bool = True) -> Text:
    """How many kernels fall in each decade of duration; the count and median in the title."""
    bins = duration_bins(durations_us)
    if not bins:
        return Text("no GPU kernels in this trace", style="dim")
    if width < _MIN_WIDTH or rows < _MIN_ROWS:
        return Text("too little room for the kernel histogram", style="dim")
    values = sorted(_clean(durations_us))
    n, median = len(values), values[len(values) // 2]
    title = next((t for t in (f"kernel durations · {n:,} kernels · median {_us(round(median, 1))}",
                              f"kernels by duration · {n:,}", f"{n:,} kernels") if len(t) <= width), "")

    def draw() -> str:
        xs = list(range(1, len(bins) + 1))
        with _figure_lock:
            fig: Any = _start(width, rows, color, title)
            fig.draw(fig.bar(xs, [c for _, c in bins]))
            if max(len(b) for b, _ in bins) + 1 <= (width - 8) / len(bins):
                fig.ruler("x").ticks(xs, [b for b, _ in bins])
            fig.ruler("x").lim(0.5, len(bins) + 0.5)
            fig.ruler("y").lim(0, max(c for _, c in bins))
            return str(fig.build().string(colorless=not color))

    return _guarded(draw, width, color, "kernel histogram")


def color_wanted(app_no_color: bool) -> bool:
    """False under NO_COLOR (Textual removes it from the environment and sets ``App.no_color``)."""
    return not app_no_color and "NO_COLOR" not in os.environ


Draw = Callable[[int, int, bool], Text]
"""A chart at (width, rows, colour)."""


class ChartView(Widget):
    """One chart of an analysis, drawn once per size: ``show(key, draw)`` sets what it draws.

    ``key`` names the chart and its data (e.g. ``("ops", rank)``); the text of
    each (key, width, height, colour) is kept, so repaints never run plotext.
    """

    DEFAULT_CSS = f"""
    ChartView {{ height: {CHART_ROWS}; }}
    """

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._key: object = None
        self._draw: Draw | None = None
        self._cache: dict[tuple[object, int, int, bool], Text] = {}
        self.draws = 0
        """How many times plotext ran for this view (what the cache saves)."""

    def show(self, key: object, draw: Draw) -> None:
        """Draw ``draw``'s chart (cached under ``key``, which must change with the data)."""
        if key != self._key:
            self._key, self._draw = key, draw
            self.refresh()

    def render(self) -> Text:
        if self._draw is None:
            return Text("")
        color = color_wanted(self.app.no_color)
        slot = (self._key, self.size.width, self.size.height, color)
        text = self._cache.get(slot)
        if text is None:
            if len(self._cache) >= 64:
                self._cache.clear()
            text = self._cache[slot] = self._draw(self.size.width, self.size.height, color)
            self.draws += 1
        return text
