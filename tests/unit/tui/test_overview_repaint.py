"""The overview at 1 Hz repaints only what changed (issue 13, "Cost"), and the heatmap's cursor.

A tick in which one host sent a sample rebuilds and repaints only that host's
sparkline and heatmap rows; the closed columns are read once per column
(``Store.series_stamp``), the newest one per tick. Counted, not timed.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Hashable
from typing import Any

from gpulens.core.events import SampleEvent
from gpulens.core.units import pct
from gpulens.sources.demo import DemoSource
from gpulens.store.store import Store
from gpulens.tui.app import GpulensApp
from gpulens.tui.screens.gpu import GpuScreen
from gpulens.tui.widgets._columns import nice_columns, span_text
from gpulens.tui.widgets._cursor_lines import CURSOR_MARK
from gpulens.tui.widgets._lines import LazyLines
from gpulens.tui.widgets.heatmap import GLYPHS, GpuHeatmap, level
from gpulens.tui.widgets.sparklines import HostSparklines
from tests.fakes.tui_fakes import demo_app, heat_key, settle, sync

SIZE = (160, 45)


class Spy:
    """Counts a LazyLines' make_line keys and the screen lines Textual asked it to render."""

    def __init__(self, lines: LazyLines) -> None:
        self.made: Counter[Hashable] = Counter()
        self.rendered: Counter[int] = Counter()
        make, render = lines.make_line, lines.render_line

        def make_line(key: Hashable, width: int) -> Any:
            self.made[key] += 1
            return make(key, width)

        def render_line(y: int) -> Any:
            self.rendered[y] += 1
            return render(y)

        lines.make_line = make_line  # type: ignore[method-assign]
        lines.render_line = render_line  # type: ignore[method-assign]

    def clear(self) -> None:
        self.made.clear()
        self.rendered.clear()


def screen_lines(lines: LazyLines, keys: set[Hashable]) -> set[int]:
    """The screen lines showing rows ``keys``."""
    top = int(lines.scroll_offset.y)
    room = lines.size.height - lines.header_lines - (1 if lines._more(lines.size.width, lines.size.height, top)
                                                     else 0)
    return {i - top + lines.header_lines for i, k in enumerate(lines.rows)
            if k in keys and top <= i < top + room}


def flipped_sample(app: GpulensApp, host: str, dt: float) -> SampleEvent:
    """``host``'s newest sample ``dt`` seconds later, every GPU's utilization moved to the other end."""
    s = app.store.latest(host)
    assert s is not None
    gpus = tuple(dataclasses.replace(g, utilization_percent=0.0 if (g.utilization_percent or 0) >= 50 else 100.0)
                 for g in s.gpus)
    return SampleEvent(dataclasses.replace(s, time=s.time + dt, gpus=gpus))


async def tick(app: GpulensApp, pilot: Any) -> None:
    app.refresh_data()
    for _ in range(2):
        await pilot.pause()


def glyphs(lines: LazyLines, y: int) -> str:
    return str(lines.render_line(y).text)


def heat_row(store: Store, heat: GpuHeatmap, host: str, gpu: int, points: int) -> str:
    """A heatmap row's columns from a whole-window read: blank before the host's first sample, ``·`` for n/a."""
    w, m = heat.window_s, heat.metric
    values = store.series(host, m.metric, w, points, gpu=gpu, aligned=True)
    cpu = store.series(host, "cpu.total_percent", w, points, aligned=True)
    first = next((i for i, v in enumerate(cpu) if v == v), points)
    return " " * first + "".join("·" if v != v else GLYPHS[level(v, m.lo, m.hi)] for v in values[first:])


@sync
async def test_a_tick_with_one_host_changed_repaints_only_that_hosts_rows() -> None:
    app = demo_app(backfill_s=120)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        heat = app.screen.query_one(GpuHeatmap)
        spark = app.screen.query_one(HostSparklines)
        store, w = app.store, app.window_s
        host = heat_key(heat.rows[0])[0]  # its GPUs are at the top of the heatmap
        points = heat.grid(heat.row_width)[0]
        cols = spark.columns_at(spark.row_width)[0]
        others = [h for h in store.hosts() if h != host]
        stamps = {h: (store.series_stamp(h, w, points), store.series_stamp(h, w, cols)) for h in others}
        spies = Spy(heat), Spy(spark)
        reads = heat._columns.full_reads, spark._columns.full_reads

        store.apply(flipped_sample(app, host, 1.0))
        # The premise: the sample lands in the newest column, no other host's columns moved.
        assert {h: (store.series_stamp(h, w, points), store.series_stamp(h, w, cols)) for h in others} == stamps
        await tick(app, pilot)

        heat_spy, spark_spy = spies
        mine = {k for k in heat.rows if heat_key(k)[0] == host}
        assert heat_spy.made and set(heat_spy.made) <= mine  # no other host's row was rebuilt
        assert set(spark_spy.made) == {host}
        assert heat_spy.rendered and set(heat_spy.rendered) <= screen_lines(heat, mine)
        assert set(spark_spy.rendered) == screen_lines(spark, {host})  # not the header, not the others
        # Only the newest column was read: the closed ones came from the cache.
        assert (heat._columns.full_reads, spark._columns.full_reads) == reads


@sync
async def test_an_unchanged_tick_repaints_nothing_and_a_new_column_shifts_the_kept_columns() -> None:
    app = demo_app(backfill_s=120)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        heat = app.screen.query_one(GpuHeatmap)
        spark = app.screen.query_one(HostSparklines)
        spies = Spy(heat), Spy(spark)
        await tick(app, pilot)  # no new data
        assert all(not s.made and not s.rendered for s in spies)

        store = app.store
        points, span = heat.grid(heat.row_width)
        host = heat_key(heat.rows[0])[0]
        before, shifted = heat._columns.full_reads, heat._columns.shifted_reads
        store.apply(flipped_sample(app, host, span))  # the next column starts, for every host
        await tick(app, pilot)
        shown = screen_lines(heat, set(heat.rows))
        # Each shown row shifted its kept columns and read only the new ones: no whole window.
        assert heat._columns.shifted_reads - shifted == len(shown)
        assert heat._columns.full_reads == before
        for y in sorted(shown)[:10]:
            h, g = heat_key(heat.rows[int(heat.scroll_offset.y) + y - heat.header_lines])
            start = heat.first_cell(heat.row_width)
            assert glyphs(heat, y)[start:start + points] == heat_row(store, heat, h, g, points)
        await tick(app, pilot)
        before = heat._columns.full_reads
        await tick(app, pilot)
        assert heat._columns.full_reads == before


@sync
async def test_heatmap_states_its_column_span() -> None:
    app = demo_app(backfill_s=120)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        heat = app.screen.query_one(GpuHeatmap)
        for key, window_s in (("2", 300), ("4", 3600), ("1", 60)):
            await pilot.press(key)
            await settle(app, pilot)
            points, span = heat.grid(heat.row_width)
            assert points * span == window_s  # the columns cover the window exactly
            legend = glyphs(heat, 0)
            assert f"1 col = {span_text(span)}" in legend
            row = glyphs(heat, 1)[heat.first_cell(heat.row_width):]
            assert len(row.rstrip()) <= points <= heat.row_width - heat.label_cells
            assert sum(row.count(c) for c in GLYPHS + "·") == points - row.count(" ")  # blank: no sample yet only


@sync
async def test_heatmap_cursor_moves_scrolls_and_enter_opens_the_gpu() -> None:
    app = demo_app(backfill_s=60)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        heat = app.screen.query_one(GpuHeatmap)
        for _ in range(4):
            if heat.has_focus:
                break
            await pilot.press("tab")
        assert heat.has_focus
        await pilot.pause()
        box = app.screen.query_one("#heatmap-box")
        accent = app.theme_variables["accent"]
        assert box.styles.border.top[1].hex.lower() == accent.lower()[:7]  # the focused panel's box says so
        assert app.screen.query_one("#sparklines-box").styles.border.top[1].hex.lower() != accent.lower()[:7]
        assert glyphs(heat, 1).startswith(CURSOR_MARK)  # the top row
        await pilot.press("down", "down")
        await pilot.pause()
        assert glyphs(heat, 3).startswith(CURSOR_MARK) and not glyphs(heat, 1).startswith(CURSOR_MARK)
        assert heat.cursor == 2
        await pilot.press("end")
        await pilot.pause()
        assert heat.cursor == len(heat.rows) - 1 and int(heat.scroll_offset.y) > 0
        last = heat.size.height - 2  # above the "rows ... · end" line
        assert glyphs(heat, last).startswith(CURSOR_MARK) and "end" in glyphs(heat, last + 1)
        await pilot.press("home", "down", "down", "down")
        await pilot.pause()
        host, gpu = heat_key(heat.rows[3])
        await pilot.press("enter")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, GpuScreen) and (screen.host, screen.index) == (host, gpu)
        # over its host's screen, as from the host table: the same breadcrumbs by either route (issue 31 item 20)
        from gpulens.tui.screens.host import HostScreen
        from gpulens.tui.widgets.header import crumb_of

        below = app.screen_stack[-2]
        assert isinstance(below, HostScreen) and below.host == host
        assert screen.crumb == f"GPU{gpu}" and [crumb_of(s) for s in app.screen_stack[-2:]] == [host, f"GPU{gpu}"]
        await pilot.press("escape", "escape")
        await pilot.pause()
        assert heat.cursor == 3  # back where it was
        heat.blur()
        await pilot.pause()
        assert not any(glyphs(heat, y).startswith(CURSOR_MARK) for y in range(heat.size.height))


@sync
async def test_box_subtitles_are_set_only_when_they_change() -> None:
    app = demo_app(backfill_s=60)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        boxes = [app.screen.query_one(s) for s in ("#hosts-box", "#jobs-box", "#sparklines-box", "#heatmap-box")]
        refreshed: Counter[str] = Counter()
        for box in boxes:  # assigning a border subtitle refreshes the whole box
            def refresh(*regions: Any, _box: Any = box, _orig: Any = box.refresh, **kw: Any) -> Any:
                if not regions:
                    refreshed[str(_box.id)] += 1
                return _orig(*regions, **kw)

            box.refresh = refresh  # type: ignore[method-assign]
        for _ in range(3):
            await tick(app, pilot)
        assert not refreshed
        await pilot.press("slash", "n", "o", "d", "e", "0", "1")
        await settle(app, pilot)
        assert refreshed["hosts-box"] >= 1 and "node01" in str(boxes[0].border_subtitle)


def test_heatmap_columns_are_round_spans_that_tile_the_window() -> None:
    store = Store()  # 1 s buckets for 5 min, then 10 s ones
    assert nice_columns(store, 300, 66) == (60, 5.0)  # 160 columns: 1 col = 5s
    assert nice_columns(store, 60, 66) == (60, 1.0)
    assert nice_columns(store, 3600, 66) == (60, 60.0)
    assert nice_columns(store, 900, 66) == (45, 20.0)  # 15 s is not a whole number of 10 s buckets
    for window_s in (60, 300, 900, 3600):
        for room in (3, 7, 40, 66, 86, 200):
            points, span = nice_columns(store, window_s, room)
            assert points <= room and abs(points * span - window_s) < 1e-6
    assert span_text(5.0) == "5s" and span_text(60.0) == "1m" and span_text(90.0) == "1.5m"


@sync
async def test_sparkline_now_is_the_newest_sample() -> None:
    app = demo_app(backfill_s=120)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        spark = app.screen.query_one(HostSparklines)
        cols = spark.columns_at(spark.row_width)[0]
        checked = 0
        for i, host in enumerate(spark.rows[: spark.size.height - 1]):
            sample = app.store.latest(str(host))
            assert sample is not None
            utils = [g.utilization_percent for g in sample.gpus if g.utilization_percent is not None]
            text = glyphs(spark, i + 1)
            assert text[12 + cols: 12 + cols + 5].strip() == pct(sum(utils) / len(utils))
            checked += 1
        assert checked >= 8


def test_sparkline_now_equals_the_stores_host_mean_with_gpus_missing() -> None:
    from gpulens.store.views import HOST_METRICS, gpu_block_values, host_values_flat
    from gpulens.tui.widgets.sparklines import _gpu_means

    app = demo_app(backfill_s=5)
    src = app.source
    assert isinstance(src, DemoSource)
    base = src.sample(4, 1_780_000_000.0)  # node05: throttled GPU, noisy utilization
    lost = src.sample(10, 1_780_000_000.0)  # node11: GPU 3 reports nothing
    g0 = base.gpus[0]
    odd = dataclasses.replace(base, gpus=(
        dataclasses.replace(g0, utilization_percent=float("nan")), dataclasses.replace(g0, sm_activity_percent=None),
        *base.gpus[2:]))
    none = dataclasses.replace(base, gpus=())
    for sample in (base, lost, odd, none):
        values = host_values_flat(sample, gpu_block_values(sample.gpus))
        want = [values[HOST_METRICS.index(m)] for m in HostSparklines.METRICS]
        got = list(_gpu_means(sample))
        assert [repr(v) for v in got] == [repr(v) for v in want], (got, want)  # equal, NaN for NaN


@sync
async def test_rows_equal_a_full_read_at_every_tick_across_column_boundaries_and_a_late_sample() -> None:
    """Kept, shifted and newest columns together draw what a whole-window read draws, tick after tick."""
    from gpulens.tui.widgets.sparklines import spark
    from tests.fakes.tui_fakes import FROZEN

    app = demo_app(backfill_s=120)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        heat = app.screen.query_one(GpuHeatmap)
        spk = app.screen.query_one(HostSparklines)
        store, w, src = app.store, app.window_s, app.source
        assert isinstance(src, DemoSource)
        points = heat.grid(heat.row_width)[0]
        cols = spk.columns_at(spk.row_width)[0]
        shifted = heat._columns.shifted_reads + spk._columns.shifted_reads
        hosts = store.hosts()
        for k in range(1, 26):  # crosses several 5 s heatmap and ~11 s sparkline columns
            t = FROZEN + k
            for h in range(len(hosts)):
                if k == 17 and h == 2:
                    continue  # node03 lags one tick, and its sample arrives late at tick 18
                store.apply(SampleEvent(src.sample(h, t)))
            if k == 18:
                store.apply(SampleEvent(src.sample(2, t - 1)))
            await tick(app, pilot)
            top = int(heat.scroll_offset.y)
            for y in range(heat.header_lines, heat.size.height - 1):
                host, g = heat_key(heat.rows[top + y - heat.header_lines])
                start = heat.first_cell(heat.row_width)
                assert glyphs(heat, y)[start:start + points] == heat_row(store, heat, host, g, points), (k, host, g)
            for i, key in enumerate(spk.rows[: spk.size.height - 1]):
                values = store.series(str(key), HostSparklines.METRICS[0], w, cols, aligned=True)
                assert glyphs(spk, i + 1)[12:12 + cols] == spark(values), (k, key)
        assert heat._columns.shifted_reads + spk._columns.shifted_reads > shifted  # the shift path ran


@sync
async def test_the_heatmap_legend_reads_the_same_at_every_width() -> None:
    """Issue 31 item 20: it was reworded by width ("u:util …" wide, "col 4s" narrow)."""
    from rich.segment import Segment as Seg

    app = demo_app(backfill_s=60)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        heat = app.screen.query_one(GpuHeatmap)
        legends = {w: "".join(s.text for s in heat.header_line(0, w) if isinstance(s, Seg)) for w in (60, 90, 160)}
        wide = legends[160].rstrip()
        assert "1 col = " in wide and wide.endswith("keys u a m w t")
        def words(text: str) -> str:  # the column span follows the width it is given; the words do not
            return re.sub(r"1 col = [0-9.]+[smh]", "1 col = S", text.rstrip())

        for w, text in legends.items():
            assert len(text) == w
            assert words(wide).startswith(words(text)), (w, text)  # the same words, cut at the end at most
