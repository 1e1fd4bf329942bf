"""Issue 31 item 9: pause is a frozen snapshot: a window key while paused recomputes the figures over the
window that ends where the pause began, and the clock stands still, though data keeps arriving."""

from __future__ import annotations

from dataclasses import replace

from gpulens.core.config import Config
from gpulens.core.events import SampleEvent
from gpulens.sources.demo import DemoSource
from gpulens.tui.app import GpulensApp
from gpulens.tui.widgets.stats import StatsBar
from tests.fakes.tui_fakes import FROZEN, settle, sync

HOSTS = 4


def _app(now: list[float]) -> tuple[GpulensApp, DemoSource]:
    source = DemoSource(seed=7, clock=lambda: now[0], live=False, backfill_s=120, hosts=HOSTS)
    return GpulensApp(source=source, cfg=Config(), clock=lambda: now[0]), source


def _stats(app: GpulensApp) -> str:
    return str(app.screen.query_one(StatsBar).render())


@sync
async def test_a_window_key_while_paused_shows_the_window_that_ends_at_the_pause() -> None:
    clean_now = [FROZEN]
    clean, _ = _app(clean_now)
    async with clean.run_test(size=(160, 45)) as pilot:
        await settle(clean, pilot)
        await pilot.press("1")
        await settle(clean, pilot)
        expected = _stats(clean)  # the 1m window ending at FROZEN, no data after it

    now = [FROZEN]
    app, source = _app(now)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        paused_at = app.store.now
        shown_clock = app.clock_text()
        await pilot.press("p")
        assert app.paused
        # 40 s of new data arrive while paused, the clock goes on. The windows are the store's 10 s columns:
        # the data starts in the column after the pause's (data in the pause's own column would be in it).
        for k in range(10, 50):
            now[0] = FROZEN + k
            for h in range(HOSTS):  # every GPU idle from then on: a window that took them in would say so
                s = source.sample(h, paused_at + k)
                idle = tuple(replace(g, utilization_percent=0.0, sm_activity_percent=0.0) for g in s.gpus)
                app.store.apply(SampleEvent(replace(s, gpus=idle)))
        app.refresh_data(force=True)
        await pilot.pause()
        assert app.clock_text() == shown_clock  # the clock stands still while paused
        await pilot.press("1")
        await pilot.pause()
        assert _stats(app) == expected  # over the minute that ends at the pause, not at the newest data
        assert app.store.now == paused_at + 49  # the data is kept, not lost: it shows on resume
        await pilot.press("p")
        await settle(app, pilot)
        assert not app.paused and app.clock_text() != shown_clock
        assert _stats(app) != expected  # resumed: the idle minute shows
