"""The job screen left open does not keep old samples alive (the --demo viewer grew 82 -> 250 MB)."""

from __future__ import annotations

import gc
import tracemalloc

from gpulens.core.events import SampleEvent
from gpulens.core.model import JobInfo
from gpulens.sources.demo import DemoSource
from gpulens.store.store import Store
from tests.fakes.tui_fakes import FROZEN, demo_app, settle, sync
from tests.unit.store.test_store import feed


def _live_jobinfos() -> int:
    gc.collect()
    return sum(isinstance(o, JobInfo) for o in gc.get_objects())


def _tick(store: Store, demo: DemoSource, t: float) -> None:
    for h in range(demo.hosts):
        store.apply(SampleEvent(demo.sample(h, t)))


def test_store_views_asked_each_refresh_do_not_pile_up() -> None:
    demo = DemoSource(seed=7, clock=lambda: FROZEN, live=False, backfill_s=10)
    store = Store()
    demo.start(feed(store))
    counts = []
    for i in range(1, 121):
        _tick(store, demo, FROZEN + i)
        store.job("4711", 300.0)  # what the job screen asks per refresh (a new version each time)
        store.fleet(300.0)
        if i in (20, 120):
            counts.append(_live_jobinfos())
    per_tick = sum(len(s.jobs) for h in store.hosts() if (s := store.latest(h)) is not None)
    # Keyed by version, every refresh kept one fleet's JobViews: +100 ticks x per_tick JobInfos.
    assert counts[1] - counts[0] < per_tick, (counts, per_tick)


@sync
async def test_job_screen_memory_stays_flat_over_many_refreshes() -> None:
    app = demo_app(backfill_s=20)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        app.jump("job 4711")
        await settle(app, pilot)
        demo = app.source
        assert isinstance(demo, DemoSource)
        t = FROZEN
        sizes = []
        tracemalloc.start()
        try:
            for i in range(45):
                t += 1.0
                _tick(app.store, demo, t)
                app.refresh_data(force=True)
                await pilot.pause()
                if i in (15, 44):
                    gc.collect()
                    sizes.append((tracemalloc.get_traced_memory()[0], _live_jobinfos()))
        finally:
            tracemalloc.stop()
        (m0, j0), (m1, j1) = sizes
        assert j1 - j0 < 200, (j0, j1)  # one refresh of the demo holds ~150 job processes
        assert m1 - m0 < 3_000_000, (m0, m1)  # the old cache kept ~60 kB per refresh
