"""Bar chart of a trace's step times (its ``ProfilerStep#N`` spans), drawn by plotext.

``step_chart`` is the pure drawing: step durations in ms in, a Rich ``Text``
out, one bar per step, the mean as a line across the bars and in the title.
``StepChart`` is the widget the Analyze screen shows; it redraws at its own
width whenever it is resized.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Sequence

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

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
    # Imported here, not at the top: plotext (and the PIL it loads) costs ~0.15 s, paid on the first chart.
    import plotext

    with _figure_lock:
        # Its size is otherwise clipped to the real terminal's, which a Textual app is not.
        plotext.terminal.limit(False, False)
        fig = plotext.figure
        fig.clear()
        fig.interactive(False)
        fig.plot_size(width, rows)
        # "simple": bars coloured, frame and labels left to the terminal's colours.
        fig.theme("simple" if color else "colorless")
        fig.title(title)
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
    try:
        drawn = _draw(values, width, rows, color)
    except Exception as err:  # a third-party drawing on odd data must not take the screen down
        return Text(f"step chart unavailable: {type(err).__name__}: {err}"[:width], style="dim")
    text = Text.from_ansi(drawn.rstrip("\n")) if color else Text(drawn.rstrip("\n"))
    text.no_wrap = True
    text.overflow = "crop"
    return text


def color_wanted(app_no_color: bool) -> bool:
    """False under NO_COLOR (Textual removes it from the environment and sets ``App.no_color``)."""
    return not app_no_color and "NO_COLOR" not in os.environ


class StepChart(Widget):
    """The step times of one process as a bar chart, redrawn at the widget's width."""

    DEFAULT_CSS = f"""
    StepChart {{ height: {CHART_ROWS}; }}
    """

    steps_ms: reactive[tuple[float, ...]] = reactive((), layout=False)
    """Duration of each step in ms, in step order; empty draws one dim "no step markers" line."""

    def render(self) -> Text:
        return step_chart(self.steps_ms, self.size.width, self.size.height, color=color_wanted(self.app.no_color))
