"""Plots at 1 Hz repaint only what changed, and read only the newest aligned column per tick.

The old plot asked the store for 300 points, resampled them to its width
(so every column shifted every second) and repainted every line each tick.
Here a tick that changes only the newest value repaints the summary and the
chart rows whose glyphs changed (computed independently with braille_area),
never the time axis; the screens ask for aligned columns, exactly the
plot's width, and between column boundaries only the newest one (tail=1).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import pytest
from textual.app import App
from textual.strip import Strip
from textual.widgets import Static

from gpulens.core.events import SampleEvent
from gpulens.core.model import GpuSample
from gpulens.core.units import pct
from gpulens.store.store import Store
from gpulens.tui.screens.base import UPDATE_TAKES_LAYOUT
from gpulens.tui.screens.gpu import NOT_REPORTED, GpuScreen
from gpulens.tui.screens.host import HostScreen
from gpulens.tui.widgets._braille import braille_area
from gpulens.tui.widgets.plot import TimeSeriesPlot, plot_data
from gpulens.tui.widgets.plot_chart import Y_LABEL
from tests.fakes.tui_fakes import FROZEN, FakeContext, StaticSource, sync
from tests.unit.store.test_store import sample


class Shown(App[None]):
    """A plain app showing one screen (its context given, not the app)."""

    def __init__(self, screen: Any) -> None:
        super().__init__()
        self.first = screen

    def on_mount(self) -> None:
        self.push_screen(self.first)


def _spy_lines(plot: TimeSeriesPlot) -> list[int]:
    """The content lines the plot draws anew from now on (a line it kept is not drawn again).

    Textual asks the plot's :class:`PlotLines` for its lines, which takes each from
    ``content_line``; a line ``set_data`` found changed has no strip kept until then.
    """
    drawn: list[int] = []
    draw: Callable[[int], Strip] = plot.content_line

    def content_line(y: int) -> Strip:
        if y >= len(plot._strips) or plot._strips[y] is None:
            drawn.append(y)
        return draw(y)

    plot.content_line = content_line  # type: ignore[method-assign]
    return drawn


def _wave(n: int) -> list[float]:
    return [50 + 40 * math.sin(i / 7) for i in range(n)]


@sync
async def test_a_new_newest_value_repaints_the_summary_and_only_the_rows_whose_glyphs_changed() -> None:
    app: App[None] = App()
    plot = TimeSeriesPlot("Util", pct)  # fixed 0-100 scale
    async with app.run_test(size=(60, 14)) as pilot:
        await app.mount(plot)
        plot.styles.height = 12
        await pilot.pause()
        width, height = plot.content_size.width, plot.content_size.height
        cols = plot.points
        assert cols == 2 * (width - Y_LABEL - 1)  # two braille columns per chart cell
        values = _wave(cols)
        values[-1] = 30.0
        plot.set_data(plot_data(values, None, "5m", 300))
        await pilot.pause()
        drawn = _spy_lines(plot)

        newer = [*values[:-1], 95.0]
        plot.set_data(plot_data(newer, None, "5m", 300))
        await pilot.pause()
        rows = height - 2  # summary and time axis
        before, after = braille_area(values, rows, 0, 100), braille_area(newer, rows, 0, 100)
        changed = {1 + i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b}
        assert 0 < len(changed) < rows
        assert sorted(set(drawn)) == sorted({0} | changed), drawn  # the old plot: every line
        assert height - 1 not in drawn  # the time axis stays

        drawn.clear()
        same, other = [*values[:-1], 95.1], [*values[:-1], 94.4]
        assert braille_area(same, rows, 0, 100) == after == braille_area(other, rows, 0, 100)
        plot.set_data(plot_data(same, None, "5m", 300))  # same glyphs, same "now 95%"
        await pilot.pause()
        assert drawn == []
        plot.set_data(plot_data(other, None, "5m", 300))  # same glyphs, "now 94%"
        await pilot.pause()
        assert drawn == [0]

        drawn.clear()
        plot.set_data(plot_data([*values[:-1], 96.0], None, "1h", 3600))  # a window change: the axis too
        await pilot.pause()
        assert height - 1 in drawn and plot.render().plain.splitlines()[-1].strip().startswith("-1h")


@sync
async def test_the_incremental_chart_draws_what_a_fresh_plot_draws() -> None:
    app: App[None] = App()
    live, fresh = TimeSeriesPlot("Util", pct), TimeSeriesPlot("Util", pct)
    async with app.run_test(size=(60, 24)) as pilot:
        await app.mount(live, fresh)
        live.styles.height = fresh.styles.height = 11
        await pilot.pause()
        values = _wave(live.points)
        for step in range(40):
            if step % 5 == 4:  # a new column: everything shifts by one
                values = [*values[1:], float(step)]
            else:
                values[-1] = float((step * 37) % 100)
            data = plot_data(values, None, "5m", 300, lines=[("GPU0", values), ("GPU1", values[::-1])]
                             if step >= 20 else ())
            live.set_data(data)
            await pilot.pause()
        fresh.set_data(live.data)
        await pilot.pause()
        assert live.render().plain == fresh.render().plain
        assert [live.content_line(y).text for y in range(9)] == [fresh.content_line(y).text for y in range(9)]


def _host_ctx(seconds: int) -> FakeContext:
    events = [SampleEvent(sample(FROZEN - seconds + i, util=float(i % 97))) for i in range(seconds)]
    return FakeContext(StaticSource(events), events)


@sync
async def test_the_host_screen_reads_aligned_columns_as_wide_as_each_plot_and_then_only_the_newest() -> None:
    ctx = _host_ctx(200)
    calls: list[tuple[str, int, bool, int | None]] = []
    series = ctx.store.series

    def spy(host: str, metric: str, window_s: float, points: int, *args: Any, **kw: Any) -> list[float]:
        calls.append((metric, points, kw.get("aligned", False), kw.get("tail")))
        return series(host, metric, window_s, points, *args, **kw)

    ctx.store.series = spy  # type: ignore[method-assign]
    screen = HostScreen("h1", context=ctx)
    app = Shown(screen)
    async with app.run_test(size=(160, 45)) as pilot:
        for _ in range(3):
            await pilot.pause()
        screen.draw_plots()
        cpu = screen.query_one("#cpu", TimeSeriesPlot)
        widths = {p.points for p in screen.query(TimeSeriesPlot)}
        assert cpu.points == 2 * (cpu.content_size.width - Y_LABEL - 1)
        # The feed's cached columns plus the newest equal a fresh read of the whole window.
        fresh = Store.series(ctx.store, "h1", "cpu.total_percent", 300, cpu.points, aligned=True)
        assert [v if v == v else None for v in fresh] == list(cpu.data.values)

        calls.clear()
        screen.draw_plots()  # a tick in the same column
        assert calls and all(aligned and points in widths and tail == 1 for _, points, aligned, tail in calls)

        calls.clear()
        later = sample(FROZEN + 30, util=77.0, cpu=88.0)  # 30 s on: new columns
        ctx.store.apply(SampleEvent(later))
        screen.draw_plots()
        # New columns: the kept ones shift left, only the new ones (and the one that was filling) are read.
        assert calls and all(tail is not None and tail > 1 for *_, tail in calls), calls
        assert all(aligned for _, _, aligned, _ in calls)
        assert cpu.data.values[-1] == 88.0
        fresh = Store.series(ctx.store, "h1", "cpu.total_percent", 300, cpu.points, aligned=True)
        assert [v if v == v else None for v in fresh] == list(cpu.data.values)

        screen.action_per_gpu()  # g: one band per GPU, read the same way
        screen.draw_plots()
        calls.clear()
        screen.draw_plots()
        util = screen.query_one("#gpu-util", TimeSeriesPlot)
        assert [label for label, _ in util.data.lines] == ["GPU0"]
        assert calls and all(aligned and points in widths and tail == 1 for _, points, aligned, tail in calls)
        band = Store.series(ctx.store, "h1", "gpu.utilization_percent", 300, util.points, gpu=0, aligned=True)
        assert [v if v == v else None for v in band] == list(util.data.lines[0][1])


def _gpu_ctx(gpus: list[GpuSample]) -> FakeContext:
    events = []
    for i, g in enumerate(gpus):
        s = sample(FROZEN - len(gpus) + 1 + i)
        events.append(SampleEvent(dataclasses.replace(s, gpus=(g,))))
    return FakeContext(StaticSource(events), events)


async def _info(gpus: list[GpuSample], feed_all: bool = True) -> str:
    ctx = _gpu_ctx(gpus if feed_all else gpus[:1])
    screen = GpuScreen("h1", 0, context=ctx)
    app = Shown(screen)
    async with app.run_test(size=(160, 45)) as pilot:
        for _ in range(3):
            await pilot.pause()
        if not feed_all:  # the second sample arrives while the screen is open
            s = sample(FROZEN + 1)
            ctx.store.apply(SampleEvent(dataclasses.replace(s, gpus=(gpus[1],))))
            screen.refresh_data()
            await pilot.pause()
        return str(screen.query_one("#gpu-info").render())


@sync
async def test_the_gpu_screen_shows_tensor_activity_nvlink_total_and_energy_with_its_rate() -> None:
    only_total = "dcgm-exporter gives only received + sent together"
    base = GpuSample(index=0, name="H100", uuid="u", utilization_percent=60.0, tensor_active_percent=17.0,
                     nvlink_total_bytes_per_s=3.0e9, energy_joules=1_000.0,
                     unavailable={"nvlink_rx_bytes_per_s": only_total, "nvlink_tx_bytes_per_s": only_total})
    later = dataclasses.replace(base, energy_joules=1_300.0)  # 300 J in the 1 s between the samples
    text = await _info([base, later], feed_all=False)
    assert "tensor 17%" in text
    assert f"NVLink total 3.0GB/s (rx/tx n/a: {only_total})" in text
    assert "energy 1.30kJ total, 300J/s" in text


@sync
async def test_the_gpu_screen_says_why_tensor_nvlink_and_energy_are_missing() -> None:
    g = GpuSample(index=0, name="A100", uuid="u", utilization_percent=60.0,
                  unavailable={"tensor_active_percent": "GPM needs Hopper or newer"})
    text = await _info([g])
    assert "tensor n/a (GPM needs Hopper or newer)" in text
    assert f"NVLink total n/a ({NOT_REPORTED})" in text
    assert f"energy n/a ({NOT_REPORTED})" in text
    with_energy = dataclasses.replace(g, energy_joules=5.0)
    text = await _info([with_energy])  # one sample: a total but no rate yet
    assert "energy 5J total, n/a J/s (needs two samples in a row" in text
    nvlink = dataclasses.replace(g, nvlink_rx_bytes_per_s=1.0e9, nvlink_tx_bytes_per_s=2.0e9)
    assert "NVLink total 3.0GB/s" in await _info([nvlink])  # rx + tx where both are known


@sync
@pytest.mark.skipif(not UPDATE_TAKES_LAYOUT, reason="Textual < 8 (the floor): Static.update has no layout "
                    "argument and always lays out, so there is nothing to spare")
async def test_new_figures_in_the_gpu_info_repaint_it_without_a_layout_unless_its_shape_changes() -> None:
    g = GpuSample(index=0, name="H100", uuid="u", utilization_percent=61.0, power_w=400.0)
    ctx = _gpu_ctx([g])
    screen = GpuScreen("h1", 0, context=ctx)
    app = Shown(screen)
    async with app.run_test(size=(160, 45)) as pilot:
        for _ in range(3):
            await pilot.pause()
        info = screen.query_one("#gpu-info", Static)
        updates: list[bool] = []
        update = info.update

        def spy(content: Any = "", *, layout: bool = True) -> None:
            updates.append(layout)
            update(content, layout=layout)

        info.update = spy  # type: ignore[method-assign]
        for t, util in ((1, 62.0), (2, 62.0), (3, 9.0)):
            s = sample(FROZEN + t)
            ctx.store.apply(SampleEvent(dataclasses.replace(s, gpus=(dataclasses.replace(g, utilization_percent=util),))))
            screen.refresh_data()
            await pilot.pause()
        # 61% -> 62%: repainted in place; 62% again: nothing; 62% -> 9%: the words moved, a layout.
        assert updates == [False, True]
        assert "util 9%" in str(info.render())


@sync
async def test_the_chart_moves_one_whole_cell_every_two_columns_and_only_its_newest_cell_between() -> None:
    app: App[None] = App()
    plot = TimeSeriesPlot("Util", pct)
    async with app.run_test(size=(60, 14)) as pilot:
        await app.mount(plot)
        plot.styles.height = 12
        await pilot.pause()
        cols = plot.points
        rows = plot.content_size.height - 2  # the summary line and the time axis

        def column(c: int) -> float:
            return float(c * 37 % 100)  # every column differs from its neighbours

        def chart(newest: int) -> list[str]:
            values = [column(c) for c in range(newest - cols + 1, newest + 1)]
            plot.set_data(plot_data(values, None, "5m", 300, newest_column=newest))
            return [line[Y_LABEL + 1:] for line in plot.render().plain.splitlines()[1:1 + rows]]

        odd = chart(1001)
        assert not plot.data.newest_even
        # Odd newest column: columns 1001 - cols + 1 (even) .. 1001 fill the cells, two each.
        assert odd == braille_area([column(c) for c in range(1002 - cols, 1002)], rows, 0, 100)
        even = chart(1002)
        assert plot.data.newest_even
        # Even: one whole cell to the left, and the new cell holds only its left column.
        assert [e[:-1] for e in even] == [o[1:] for o in odd]
        assert even == braille_area([column(c) for c in range(1004 - cols, 1003)] + [math.nan], rows, 0, 100)
        await pilot.pause()  # the shift is drawn
        drawn = _spy_lines(plot)
        later = chart(1003)
        await pilot.pause()
        assert [x[:-1] for x in later] == [e[:-1] for e in even]  # only the newest cell changed
        changed = {y + 1 for y in range(rows) if later[y] != even[y]}
        assert set(drawn) <= changed | {0}  # repainted: those rows and the summary, no others


class _OnePlot(App[None]):
    def compose(self) -> Any:
        yield TimeSeriesPlot("Network", pct, id="p")


@sync
async def test_the_summary_says_how_much_data_while_it_is_less_than_the_window_and_keeps_it_past_the_mean() -> None:
    from gpulens.store.views import WindowStats

    app = _OnePlot()
    async with app.run_test(size=(120, 20)) as pilot:
        plot = app.query_one(TimeSeriesPlot)
        values = [50.0] * 10

        def head(covered: float, width: int) -> str:
            stats = WindowStats(900, 50.0, 52.0, 10.0, 90.0, 10, covered)
            plot.set_data(plot_data(values, None, "15m", 900, stats))
            return "".join(t for t, _ in plot._summary([50.0], width))

        await pilot.pause()
        assert head(900, 200).startswith("now 50%  avg 52%  min 10%  max 90%  [15m]")  # all of it: no "over"
        assert "over 7m42s of data [15m]" in head(462, 200)
        narrow = head(462, 36)  # no room for the mean and the coverage both: the coverage stays
        assert "over 7m42s" in narrow and "avg" not in narrow, narrow


def test_coverage_past_ten_minutes_reads_in_whole_minutes() -> None:
    """Issue 31 item 9: "over 14m58s" cost the mean its room at [15m] where "over 20m" left it at [1h]."""
    from gpulens.core.units import coverage

    assert coverage(462) == "7m42s" and coverage(599) == "9m59s"
    assert coverage(898) == "14m" and coverage(1200) == "20m" and coverage(3599) == "59m"
    assert len(f"over {coverage(898)}") == len(f"over {coverage(1200)}")
