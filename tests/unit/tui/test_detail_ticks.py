"""The host, job and GPU screens at 1 Hz: per tick only what changed is worked out, and what they show
is what a freshly opened screen shows (issue 13, the CPU of the detail screens).

A tick is one more demo sample per host, a second later (a moving clock, no
thread). After ticks that cross several column boundaries (the aligned columns
shift left), the screen on top is compared with a new screen of the same kind
opened at that moment: it reads every series whole and draws every line from
scratch, so it is an independent computation of what must be on screen.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from rich.segment import Segment
from textual import _compositor
from textual.pilot import Pilot
from textual.screen import Screen
from textual.widget import Widget

from gpulens.core.config import Config
from gpulens.core.events import SampleEvent
from gpulens.sources.demo import DemoSource
from gpulens.store.store import Store
from gpulens.tui.app import GpulensApp
from gpulens.tui.screens.gpu import GpuScreen
from gpulens.tui.screens.host import HostScreen
from gpulens.tui.screens.job import JobScreen
from gpulens.tui.widgets import plot_chart
from gpulens.tui.widgets._braille import dot_counts
from gpulens.tui.widgets.gpu_table import GpuTable
from gpulens.tui.widgets.job_table import JobTable
from gpulens.tui.widgets.plot import PlotLines, TimeSeriesPlot
from tests.fakes.tui_fakes import FROZEN, sync

SIZE = (160, 45)


class Clock:
    """The app's and the demo's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = FROZEN

    def __call__(self) -> float:
        return self.now


def live_app(clock: Clock) -> tuple[GpulensApp, DemoSource]:
    source = DemoSource(seed=7, clock=clock, live=False, backfill_s=300)
    return GpulensApp(source=source, cfg=Config(), clock=clock), source


async def tick(app: GpulensApp, source: DemoSource, clock: Clock, pilot: Pilot[Any], n: int = 1) -> None:
    """``n`` seconds of the demo fleet, the screen refreshed and drawn after each."""
    for _ in range(n):
        clock.now += 1.0
        for h in range(source.hosts):
            app.store.apply(SampleEvent(source.sample(h, clock.now)))
        app.refresh_data()
        await pilot.pause()


async def settle(pilot: Pilot[Any]) -> None:
    for _ in range(4):
        await pilot.pause()


def on_screen(screen: Screen[Any], widget: Widget) -> list[list[Segment]]:
    """The segments the compositor puts on the terminal for ``widget`` (its lines as now drawn)."""
    region = widget.region.intersection(screen.region)
    strips = screen._compositor.render_strips()  # what the terminal shows: cached lines included
    return [list(strips[y].crop(region.x, region.right)) for y in range(region.y, region.bottom)]


def plots_in_view(screen: Screen[Any]) -> dict[str, list[list[Segment]]]:
    out = {}
    for plot in screen.query(TimeSeriesPlot):
        if plot.region.overlaps(screen.region) and plot.id is not None:
            out[plot.id] = on_screen(screen, plot)
    return out


async def same_as_fresh(app: GpulensApp, pilot: Pilot[Any], fresh: Screen[Any]) -> None:
    """The plots on screen now are those of ``fresh``, opened now (and then closed)."""
    live = plots_in_view(app.screen)
    await app.push_screen(fresh)
    await settle(pilot)
    app.refresh_data(force=True)  # the job and GPU screens' first draw is before their layout
    await settle(pilot)
    again = plots_in_view(fresh)
    app.pop_screen()
    await settle(pilot)
    assert live.keys() == again.keys() and len(live) >= 6
    for key in live:
        assert live[key] == again[key], key


@contextmanager
def counted(cls: type, name: str, calls: Counter[str]) -> Iterator[None]:
    """Count calls of ``cls.name`` (by class name) while in the block."""
    orig = getattr(cls, name)

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls[f"{cls.__name__}.{name}"] += 1
        return orig(*args, **kwargs)

    setattr(cls, name, spy)
    try:
        yield
    finally:
        setattr(cls, name, orig)


@sync
async def test_the_host_screen_after_ticks_shows_what_a_fresh_one_shows() -> None:
    clock = Clock()
    app, source = live_app(clock)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.jump("host gpu-node05")
        await settle(pilot)
        await tick(app, source, clock, pilot, 9)  # 300 s over ~136 columns: a shift every ~2 s
        await same_as_fresh(app, pilot, HostScreen("gpu-node05"))
        await tick(app, source, clock, pilot, 4)
        assert isinstance(app.screen, HostScreen)
        app.screen.action_per_gpu()  # a band per GPU, incrementally drawn too
        await tick(app, source, clock, pilot, 7)
        fresh = HostScreen("gpu-node05")
        fresh.per_gpu = True
        await same_as_fresh(app, pilot, fresh)


@sync
async def test_the_job_screen_after_ticks_shows_what_a_fresh_one_shows_and_combines_only_new_columns() -> None:
    clock = Clock()
    app, source = live_app(clock)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.jump("job 4711")  # 4 hosts, 32 GPUs: SM activity is the mean of 32 series
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, JobScreen) and screen.view is not None and len(screen.view.gpus) == 32
        await tick(app, source, clock, pilot, 2)
        before = screen.figures.feed.combined_columns
        ticks = 12
        stamps: Counter[str] = Counter()
        with counted(Store, "series_stamp", stamps):
            await tick(app, source, clock, pilot, ticks)
        combined = screen.figures.feed.combined_columns - before
        # Each host's stamp is asked once per tick and plot width (two widths, side by side), directly
        # and through the job's stamp: not once per series (32 GPUs, 4 hosts x 2 metrics x 2 plots ...).
        widths = {p.points for p in screen.query(TimeSeriesPlot)}
        assert 0 < stamps["Store.series_stamp"] <= ticks * 2 * 4 * len(widths), stamps
        width = screen.query_one("#job-sm", TimeSeriesPlot).points
        # Three combined plots (SM over the GPUs, network and storage over the hosts): a few new
        # columns each per tick, where combining every column would be 3 * width per tick.
        assert 0 < combined <= ticks * 3 * 3, combined
        assert ticks * 3 * width > 20 * combined
        await same_as_fresh(app, pilot, JobScreen("4711"))


@sync
async def test_the_gpu_screen_after_ticks_shows_what_a_fresh_one_shows() -> None:
    clock = Clock()
    app, source = live_app(clock)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.push_screen(GpuScreen("gpu-node05", 2))
        await settle(pilot)
        await tick(app, source, clock, pilot, 11)
        await same_as_fresh(app, pilot, GpuScreen("gpu-node05", 2))


@sync
async def test_a_plot_works_out_only_its_new_columns_when_they_shift_and_refreshes_once_per_tick() -> None:
    clock = Clock()
    app, source = live_app(clock)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.push_screen(GpuScreen("gpu-node05", 2))
        await settle(pilot)
        await tick(app, source, clock, pilot, 2)
        plots = list(app.screen.query(TimeSeriesPlot))
        columns: list[int] = []

        def spy(values: Any, *args: Any) -> list[int]:
            columns.append(len(values))
            return dot_counts(values, *args)

        refreshes: Counter[str] = Counter()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(plot_chart, "dot_counts", spy)
            with counted(PlotLines, "refresh", refreshes):
                ticks = 10
                await tick(app, source, clock, pilot, ticks)
        width = plots[0].points
        # Ticks in a column redraw its last cell (2 columns); a shift, the new columns and the one that
        # was filling. Drawing every column would be width per plot per tick.
        assert sum(columns) <= ticks * len(plots) * 4, (sum(columns), columns)
        assert ticks * len(plots) * width > 20 * sum(columns)
        # One refresh per plot per tick at most (each call works out the widget's offsets again).
        assert 0 < refreshes["PlotLines.refresh"] <= ticks * len(plots)


@sync
async def test_the_host_screen_leaves_tables_out_of_view_alone_until_they_are_scrolled_to() -> None:
    clock = Clock()
    app, source = live_app(clock)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.jump("host gpu-node05")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, HostScreen)
        gpus, jobs = screen.query_one(GpuTable), screen.query_one(JobTable)
        assert not gpus.region.overlaps(screen.region) and not jobs.region.overlaps(screen.region)
        await tick(app, source, clock, pilot, 2)
        calls: Counter[str] = Counter()
        maps: list[bool] = []
        arrange = _compositor.Compositor._arrange_root

        def spy_arrange(self: Any, root: Widget, size: Any, visible_only: bool = True) -> Any:
            maps.append(visible_only)
            return arrange(self, root, size, visible_only)

        _compositor.Compositor._arrange_root = spy_arrange  # type: ignore[method-assign]
        try:
            with counted(GpuTable, "show", calls), counted(JobTable, "show", calls), \
                    counted(Store, "jobs", calls):
                await tick(app, source, clock, pilot, 5)
        finally:
            _compositor.Compositor._arrange_root = arrange  # type: ignore[method-assign]
        # Tables out of view are not filled, and no widget off screen is repainted: Textual does not
        # map the whole screen again each tick (it did, ~1 ms, for the two tables below the plots).
        assert calls == Counter(), calls
        assert False not in maps, maps

        screen.query_one("#body").scroll_end(animate=False)
        await settle(pilot)
        assert gpus.region.overlaps(screen.region) and jobs.region.overlaps(screen.region)
        latest = app.store.latest("gpu-node05")
        assert latest is not None
        assert gpus.order == [str(g.index) for g in latest.gpus]
        assert all(gpus._cells[str(g.index)] == GpuTable.cells(g, gpus.thresholds) for g in latest.gpus)
        shown_jobs = [j.key for j in app.store.jobs(app.window_s) if "gpu-node05" in j.hosts]
        assert sorted(jobs.order) == sorted(shown_jobs) and shown_jobs
        await tick(app, source, clock, pilot, 2)  # in view: filled each tick
        latest = app.store.latest("gpu-node05")
        assert latest is not None
        assert all(gpus._cells[str(g.index)] == GpuTable.cells(g, gpus.thresholds) for g in latest.gpus)


def test_dot_counts_and_rows_draw_what_braille_area_drew() -> None:
    """The braille area now looks cells up by their dot counts: the same glyphs as drawing each dot."""
    from gpulens.tui.widgets._braille import _CELLS, braille_area

    def reference(values: list[float], rows: int, lo: float, hi: float) -> list[str]:
        span = hi - lo if hi - lo and hi - lo == hi - lo else 1.0
        filled = []
        for v in values:
            x = (v - lo) / span * rows * 4
            filled.append(0 if x != x or x <= 0 else rows * 4 if x >= rows * 4 else round(x))
        if len(filled) % 2:
            filled.append(0)
        out = []
        for cy in range(rows):
            base = (rows - 1 - cy) * 4
            out.append("".join(_CELLS[min(4, max(0, a - base))][min(4, max(0, b - base))]
                               for a, b in zip(filled[0::2], filled[1::2], strict=True)))
        return out

    specials = [math.nan, math.inf, -math.inf, 1e308, -1e308, 0.0, 100.0, 50.0, -5.0, 12.5]
    cases: list[tuple[list[float], int, float, float]] = []
    for n in (0, 1, 2, 7, 40):
        for rows in (1, 3, 6, 14):
            vals = [specials[(i * 7 + n) % len(specials)] if i % 3 == 0 else (i * 37 % 130) - 10.0
                    for i in range(n)]
            for lo, hi in ((0.0, 100.0), (0.0, math.nan), (5.0, 5.0), (0.0, math.inf), (-1e308, 1e308),
                           (10.0, 0.0), (0.0, 33.3)):
                cases.append((vals, rows, lo, hi))
    for vals, rows, lo, hi in cases:
        assert braille_area(vals, rows, lo, hi) == reference(vals, rows, lo, hi), (vals, rows, lo, hi)
