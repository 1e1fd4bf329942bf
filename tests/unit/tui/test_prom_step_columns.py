"""Issue 32 item 16: with a source that samples every 5 s (Prometheus' step), the store's columns follow the
step, so the heatmap has no empty column between two scrapes (4 s columns left every fifth one n/a)."""

from __future__ import annotations

from gpulens.core.config import Config
from gpulens.core.events import SampleEvent
from gpulens.sources.local import MultiSource, sample_step
from gpulens.tui.app import GpulensApp
from gpulens.tui.widgets.heatmap import GpuHeatmap
from tests.fakes.tui_fakes import FROZEN, StaticSource, settle, sync
from tests.unit.store.test_store import sample


class SteppedSource(StaticSource):
    """A test double of a source that samples every ``step_s`` (as PrometheusSource does)."""

    step_s = 5.0


def test_the_step_is_the_longest_a_part_samples_at() -> None:
    assert sample_step(StaticSource([]), 1.0) == 1.0
    assert sample_step(SteppedSource([]), 1.0) == 5.0
    assert sample_step(MultiSource([StaticSource([]), SteppedSource([])]), 1.0) == 5.0
    assert sample_step(SteppedSource([]), 10.0) == 10.0  # a longer interval stays


@sync
async def test_a_5s_scrape_fills_every_heatmap_column() -> None:
    events = [SampleEvent(sample(FROZEN - 300 + 5 * i, host="prom-node", util=40.0 + i % 50)) for i in range(61)]
    app = GpulensApp(source=SteppedSource(events), cfg=Config(interval_s=1.0), clock=lambda: FROZEN)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        assert app.store.resolution_s == 5.0
        heat = app.screen.query_one(GpuHeatmap)
        points, span = heat.grid(heat.row_width)
        assert span % 5 == 0
        row = "".join(s.text for s in heat.render_line(heat.header_lines))[heat.first_cell(heat.row_width):]
        cells = row[:points]
        assert "·" not in cells.strip(), cells  # no column without a value while Prometheus held them all
