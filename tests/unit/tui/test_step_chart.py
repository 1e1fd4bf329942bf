"""The step-time bar chart (plotext) and where the Analyze screen shows it."""

from __future__ import annotations

import math

import pytest
from rich.text import Text
from textual.app import App

from gpulens.analysis.trace.analyze import analyze_file
from gpulens.tui.screens.profiler_views import AnalyzeScreen
from gpulens.tui.widgets.step_chart import ChartView, color_wanted, step_chart
from tests.fakes.tui_fakes import sync
from tests.paths import DATA

BAR = "█"
TRACES = DATA / "traces"


def plot_rows(text: Text) -> list[str]:
    """The rows between the frame's top and bottom edges, without the y labels."""
    lines = text.plain.splitlines()
    top = next(i for i, line in enumerate(lines) if "┌" in line)
    bottom = next(i for i, line in enumerate(lines) if "└" in line)
    return [line[line.index("┤") + 1 if "┤" in line else line.index("│") + 1:] for line in lines[top + 1:bottom]]


def bar_runs(row: str) -> list[tuple[int, int]]:
    """(start, end) columns of each run of bar cells in one row."""
    runs: list[tuple[int, int]] = []
    start: int | None = None
    for col, ch in enumerate(row + " "):
        if ch == BAR and start is None:
            start = col
        elif ch != BAR and start is not None:
            runs.append((start, col))
            start = None
    return runs


def column_heights(text: Text) -> list[int]:
    """For each bar (a run in the bottom row), how many rows its middle column fills."""
    rows = plot_rows(text)
    return [sum(row[(a + b) // 2] == BAR for row in rows) for a, b in bar_runs(rows[-1])]


def test_one_bar_per_step_tallest_where_the_longest_step_is() -> None:
    chart = step_chart([10.0, 20.0, 40.0, 80.0], 60, 9, color=False)
    lines = chart.plain.splitlines()
    assert len(lines) == 9 and all(len(line) == 60 for line in lines)
    heights = column_heights(chart)
    assert len(heights) == 4
    assert heights == sorted(heights) and heights[-1] == len(plot_rows(chart))  # the 80 ms bar is full height
    assert heights[0] < heights[-1]
    assert "4 steps" in lines[0] and "mean 37.50 ms" in lines[0]
    assert "─" * 3 in "".join(plot_rows(chart))  # the mean line
    assert "#1 10.0" in lines[-1] and "#4 80.0" in lines[-1]  # each bar's value under it


def test_bars_follow_the_widget_width() -> None:
    narrow, wide = step_chart([5.0, 6.0], 40, 9, color=False), step_chart([5.0, 6.0], 160, 9, color=False)
    assert {len(line) for line in narrow.plain.splitlines()} == {40}
    assert {len(line) for line in wide.plain.splitlines()} == {160}
    assert sum(b - a for a, b in bar_runs(plot_rows(wide)[-1])) > 3 * sum(b - a for a, b in bar_runs(plot_rows(narrow)[-1]))


def test_no_steps_is_one_dim_line() -> None:
    chart = step_chart([], 80, 9)
    assert chart.plain == "no step markers"
    assert "dim" in str(chart.style)


def test_one_step_is_one_full_bar() -> None:
    chart = step_chart([210.11], 60, 9, color=False)
    assert column_heights(chart) == [len(plot_rows(chart))]
    assert "1 step " in chart.plain and "mean 210.11 ms" in chart.plain


def test_no_color_draws_glyphs_only() -> None:
    coloured = step_chart([1.0, 2.0, 3.0], 60, 9, color=True)
    plain = step_chart([1.0, 2.0, 3.0], 60, 9, color=False)
    assert any(span.style for span in coloured.spans)
    assert not plain.spans and "\x1b" not in plain.plain
    assert column_heights(plain) == column_heights(coloured)


def test_no_color_env_and_app_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert color_wanted(False)
    assert not color_wanted(True)
    monkeypatch.setenv("NO_COLOR", "1")
    assert not color_wanted(False)


@pytest.mark.parametrize("steps", [
    [0.0], [0.0, 0.0, 0.0], [math.nan, 2.0], [math.inf, 3.0], [-5.0, 1.0],
    [1e308, 1e308], [1e-300, 1e-9], [5e-324],
])
def test_odd_durations_never_raise(steps: list[float]) -> None:
    chart = step_chart(steps, 60, 9, color=False)
    assert isinstance(chart, Text) and chart.plain


@pytest.mark.parametrize(("width", "rows"), [(0, 0), (1, 9), (19, 9), (60, 1), (60, 4)])
def test_too_small_is_one_dim_line(width: int, rows: int) -> None:
    chart = step_chart([1.0, 2.0], width, rows)
    assert chart.plain == "2 steps: too little room for the step chart"


def test_smallest_chart_fits() -> None:
    chart = step_chart([1.0, 2.0], 20, 5, color=False)
    assert [len(line) for line in chart.plain.splitlines()] == [20] * 5
    assert len(column_heights(chart)) == 2


def test_many_steps_share_bars() -> None:
    """More steps than two cells each: consecutive steps share a bar (their mean)."""
    chart = step_chart([float(i % 7 + 1) for i in range(2000)], 100, 9, color=False)
    assert "2000 steps · 40 per bar" in chart.plain
    assert {len(line) for line in chart.plain.splitlines()} == {100}


class AnalyzeHost(App[None]):
    def __init__(self, trace: str) -> None:
        super().__init__()
        self.trace = trace

    def on_mount(self) -> None:
        self.push_screen(AnalyzeScreen(analyze_file(self.trace), "t"))


@pytest.mark.timeout(60)
@sync
async def test_analyze_charts_the_steps_or_says_there_are_none() -> None:
    with_steps = AnalyzeHost(str(TRACES / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"))  # 2 steps
    async with with_steps.run_test(size=(200, 40)) as pilot:
        await pilot.pause()
        view = with_steps.screen.query_one("#an-chart-steps", ChartView)
        drawn = view.render()
        assert isinstance(drawn, Text) and len(column_heights(drawn)) == 2
    without = AnalyzeHost(str(TRACES / "benchmark_result_2869224_1695835535_trace.json.gz"))  # no ProfilerStep#
    async with without.run_test(size=(200, 40)) as pilot:
        await pilot.pause()
        drawn = without.screen.query_one("#an-chart-steps", ChartView).render()
        assert isinstance(drawn, Text) and drawn.plain == "no step markers"
