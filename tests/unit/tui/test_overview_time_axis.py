"""The overview's time axes: ``-5m … now`` under the sparklines and the heatmap, aligned to their columns.

The heatmap's round-span columns end at its box's right edge ("now"), columns
from before a host's first sample are blank (``·`` is a GPU that reported no
value), and a tick repaints an axis only when its labels change: a new
window or width, never a new sample or column.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from gpulens.store.store import Store
from gpulens.tui.app import GpulensApp
from gpulens.tui.widgets import heatmap as heatmap_module
from gpulens.tui.widgets import sparklines as sparklines_module
from gpulens.tui.widgets._braille import time_axis
from gpulens.tui.widgets.heatmap import GpuHeatmap
from gpulens.tui.widgets.sparklines import HostSparklines, TimeAxisLine, sparkline_axis
from tests.fakes.tui_fakes import demo_app, heat_key, settle, sync
from tests.unit.tui.test_overview_repaint import flipped_sample, glyphs, tick

WIDE = (200, 50)


def axes(app: GpulensApp) -> tuple[TimeAxisLine, TimeAxisLine]:
    return (app.screen.query_one("#sparklines-axis", TimeAxisLine),
            app.screen.query_one("#heatmap-axis", TimeAxisLine))


def screen_text(axis: TimeAxisLine) -> tuple[int, str]:
    """(screen x of the axis line, its text as drawn)."""
    return axis.region.x, str(axis.render_line(0).text)


def label_at(axis: TimeAxisLine, x: int, label: str) -> bool:
    """Whether ``label`` is drawn on ``axis`` starting at screen column ``x``."""
    left, text = screen_text(axis)
    return text[x - left: x - left + len(label)] == label


def first_sample_column(store: Store, host: str, window_s: float, points: int) -> int:
    """Where the host's data starts among the heatmap's columns (its CPU series, as the test reads it)."""
    values = store.series(host, "cpu.total_percent", window_s, points, aligned=True)
    return next(i for i, v in enumerate(values) if v == v)


@pytest.mark.parametrize(("key", "window", "spark_labels", "heat_labels"), [
    ("1", "1m", ["-1m", "-30s", "now"], ["-1m", "-45s", "-30s", "-15s", "now"]),
    ("4", "1h", ["-1h", "-30m", "now"], ["-1h", "-45m", "-30m", "-15m", "now"]),
])
@sync
async def test_axes_label_the_window_under_the_columns(key: str, window: str, spark_labels: list[str],
                                                       heat_labels: list[str]) -> None:
    app = demo_app(backfill_s=120)
    async with app.run_test(size=WIDE) as pilot:
        await settle(app, pilot)
        await pilot.press(key)
        await settle(app, pilot)
        assert app.window == window
        spark_axis, heat_axis = axes(app)
        spark = app.screen.query_one(HostSparklines)
        heat = app.screen.query_one(GpuHeatmap)

        assert screen_text(spark_axis)[1].split() == spark_labels * 2  # one under each sparkline
        cols = spark.columns_at(spark.row_width)[0]
        for start in (spark.region.x + 12, spark.region.x + 12 + cols + 7):  # each sparkline's first column
            assert label_at(spark_axis, start, spark_labels[0])
            assert label_at(spark_axis, start + cols - 3, "now")  # ends at its newest column

        assert screen_text(heat_axis)[1].split() == heat_labels
        points = heat.grid(heat.row_width)[0]
        first = heat.region.x + heat.first_cell(heat.row_width)  # the oldest column: where the data can start
        assert label_at(heat_axis, first, heat_labels[0])
        assert label_at(heat_axis, first + points - 3, "now")


@sync
async def test_heatmap_columns_end_at_the_right_edge_for_every_window() -> None:
    app = demo_app(backfill_s=120)
    async with app.run_test(size=WIDE) as pilot:
        await settle(app, pilot)
        box = app.screen.query_one("#heatmap-box")
        heat = app.screen.query_one(GpuHeatmap)
        for key, window_s in (("1", 60), ("2", 300), ("3", 900), ("4", 3600)):
            await pilot.press(key)
            await settle(app, pilot)
            points, span = heat.grid(heat.row_width)
            assert points * span == window_s  # still round spans that tile the window
            start = heat.first_cell(heat.row_width)
            assert heat.row_width == start + points  # no blank cells after "now"
            assert heat.region.right == box.content_region.right  # it fills its box
            row = glyphs(heat, 1)
            assert row[start + points - 1] != " "  # the newest column is drawn at the edge
            assert row.startswith("node01:0") or row[1:].startswith("node01:0")  # the labels at the left, every window


@sync
async def test_before_the_first_sample_is_blank_and_na_is_a_dot() -> None:
    app = demo_app(backfill_s=60)  # a minute of data in a 5-minute window
    async with app.run_test(size=WIDE) as pilot:
        await settle(app, pilot)
        heat = app.screen.query_one(GpuHeatmap)
        store, w = app.store, app.window_s
        points = heat.grid(heat.row_width)[0]
        cells = heat.first_cell(heat.row_width)
        for host, gpu in (("gpu-node01", 0), ("gpu-node11", 3)):  # node11's GPU 3 reports nothing
            first = first_sample_column(store, host, w, points)
            assert 0 < first < points
            line = "".join(s.text for s in heat.make_line((host, gpu), heat.row_width))[cells:cells + points]
            assert line[:first] == " " * first  # no data yet: blank, as the sparklines leave it
            if gpu == 3:
                assert line[first:] == "·" * (points - first)  # the GPU reported n/a
            else:
                assert "·" not in line and line[first:].strip()
        spark = app.screen.query_one(HostSparklines)
        cols = spark.columns_at(spark.row_width)[0]
        row = glyphs(spark, 1)[12:12 + cols]
        assert row.startswith(" ") and "·" not in row  # the sparklines leave the same time blank


@sync
async def test_backfilled_samples_older_than_the_first_fill_the_blank() -> None:
    """A source that sends a host's history late (a reconnecting agent, Prometheus): the blank shrinks."""
    from dataclasses import replace

    from gpulens.core.events import SampleEvent

    app = demo_app(backfill_s=60)
    async with app.run_test(size=WIDE) as pilot:
        await settle(app, pilot)
        heat = app.screen.query_one(GpuHeatmap)
        store, w, host = app.store, app.window_s, "gpu-node01"
        points, cells = heat.grid(heat.row_width)[0], heat.first_cell(heat.row_width)

        def blank() -> int:
            line = "".join(s.text for s in heat.make_line((host, 0), heat.row_width))[cells:cells + points]
            return len(line) - len(line.lstrip(" "))

        before = first_sample_column(store, host, w, points)
        assert blank() == before > 10
        newest = store.latest(host)
        assert newest is not None
        oldest = newest.time - 60
        for k in range(1, 121):  # two more minutes, older than anything the store holds for the host
            store.apply(SampleEvent(replace(newest, time=oldest - k)))
        await settle(app, pilot)
        after = first_sample_column(store, host, w, points)
        assert after < before - 10 and blank() == after


@sync
async def test_a_tick_without_a_new_column_does_not_redraw_the_axes(monkeypatch: pytest.MonkeyPatch) -> None:
    computed: Counter[str] = Counter()

    def counting(module: Any, name: str) -> None:
        def axis(window_s: float, width: int) -> str:
            computed[name] += 1
            return time_axis(window_s, width)

        monkeypatch.setattr(module, "time_axis", axis)

    counting(sparklines_module, "spark")
    counting(heatmap_module, "heat")
    app = demo_app(backfill_s=120)
    async with app.run_test(size=WIDE) as pilot:
        await settle(app, pilot)
        heat = app.screen.query_one(GpuHeatmap)
        spark = app.screen.query_one(HostSparklines)
        rendered: Counter[str] = Counter()
        for axis in axes(app):
            def render_line(y: int, _axis: TimeAxisLine = axis, _orig: Any = axis.render_line) -> Any:
                rendered[str(_axis.id)] += 1
                return _orig(y)

            axis.render_line = render_line  # type: ignore[method-assign]
        layouts: list[object] = []
        orig_refresh = heat.refresh

        def refresh(*regions: Any, **kw: Any) -> Any:
            if kw.get("layout"):
                layouts.append(kw)
            return orig_refresh(*regions, **kw)

        heat.refresh = refresh  # type: ignore[method-assign]
        store, w = app.store, app.window_s
        points, span = heat.grid(heat.row_width)
        cols = spark.columns_at(spark.row_width)[0]
        newest = store.newest_column(w, points), store.newest_column(w, cols)
        done = dict(computed)

        host = heat_key(heat.rows[0])[0]
        store.apply(flipped_sample(app, host, 0.2))
        assert (store.newest_column(w, points), store.newest_column(w, cols)) == newest  # the premise
        await tick(app, pilot)
        assert heat.make_line((host, 0), heat.row_width)  # the host's rows were rebuilt
        assert not rendered and dict(computed) == done and not layouts

        store.apply(flipped_sample(app, host, span))  # a new column: the labels are relative, they stay
        assert store.newest_column(w, points) != newest[0]
        await tick(app, pilot)
        assert not rendered and dict(computed) == done and not layouts

        await pilot.press("1")  # a new window: each axis is worked out again (the heatmap's at its new width too)
        await settle(app, pilot)
        assert rendered == Counter({"sparklines-axis": 1, "heatmap-axis": 1})  # and drawn once
        assert computed["spark"] == done["spark"] + 1 and done["heat"] < computed["heat"] <= done["heat"] + 2
        assert layouts  # the heatmap's width follows its new columns
        laid_out = len(layouts)
        for _ in range(3):
            await tick(app, pilot)
        assert len(layouts) == laid_out and sum(rendered.values()) == 2


def test_sparkline_axis_is_one_axis_under_each_sparkline() -> None:
    width = 98
    cols, both = HostSparklines.columns_at(width)
    assert both and cols == 36
    line = sparkline_axis(300, width)
    one = time_axis(300, cols)
    assert line == " " * 12 + one + " " * 7 + one
    assert line.split() == ["-5m", "-2m30s", "now"] * 2
    narrow = sparkline_axis(900, 50)  # one sparkline
    assert narrow.split() == ["-15m", "-7m30s", "now"] and narrow.index("-15m") == 12
    assert not sparkline_axis(3600, 12).strip()  # too narrow for labels: blank, not cut
    assert len(sparkline_axis(60, 160)) == 12 + 2 * HostSparklines.columns_at(160)[0] + 7
