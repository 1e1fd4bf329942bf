"""A burst of samples (one per host, sent together) is drawn in one redraw, however it is split."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from gpulens.core.events import SampleEvent
from gpulens.tui import app_data as app_module  # the app's data side schedules its redraws
from tests.fakes.tui_fakes import demo_app, settle, sync

BURST_S = 0.5
"""Longer than the app's, so a loaded machine cannot stretch the test's split past it."""


@sync
async def test_a_burst_split_by_the_main_thread_is_one_redraw(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app_module, "BURST_S", BURST_S)
    app = demo_app(backfill_s=10)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        await asyncio.sleep(app.refresh_s)  # the last redraw is long enough ago
        calls: list[bool] = []
        real = app.refresh_data

        def counted(force: bool = False) -> None:
            calls.append(force)
            real(force)

        app.refresh_data = counted  # type: ignore[method-assign]
        hosts = app.store.hosts()
        later = [SampleEvent(dataclasses.replace(s, time=s.time + 1))
                 for h in hosts if (s := app.store.latest(h)) is not None]
        app.emit(later[0])
        await asyncio.sleep(0.01)  # the main thread takes the first sample alone
        first = app.store.latest(hosts[0])
        assert first is not None and first.time == later[0].sample.time
        for e in later[1:]:
            app.emit(e)
        await asyncio.sleep(BURST_S + app.refresh_s + 0.1)
        await pilot.pause()
        assert len(calls) == 1, calls  # not one for the first and one for the rest
        latest = [app.store.latest(h) for h in hosts]
        assert all(s is not None and s.time == later[0].sample.time for s in latest)


@sync
async def test_a_timed_redraw_that_fires_while_the_app_exits_does_nothing() -> None:
    app = demo_app(backfill_s=10)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
    assert not app.screen_stack  # exited: every screen is gone
    app._timed_refresh()  # raised ScreenStackError ("No screens on stack") from a timer left behind
    assert app._timer is None
