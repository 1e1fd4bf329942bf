"""A burst of samples (one per host, sent together) is drawn in one redraw, however it is split."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.timer import Timer

from gpulens.core.events import SampleEvent
from gpulens.tui import app_data as app_module  # the app's data side schedules its redraws
from gpulens.tui.app import GpulensApp
from gpulens.tui.screens.job import JobScreen
from tests.fakes.tui_fakes import demo_app, settle, sync

BURST_S = 3600.0
"""So long that the burst's timer never fires by itself: the test fires it, however slow the machine."""


@sync
async def test_a_burst_split_by_the_main_thread_is_one_redraw(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app_module, "BURST_S", BURST_S)
    app = demo_app(backfill_s=10)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        if (startup := app._timer) is not None:  # the history's own redraw, not part of this burst
            startup.stop()
            app._timed_refresh()
            await pilot.pause()
        calls: list[bool] = []
        timers: list[float] = []
        real = app.refresh_data
        real_timer = app.set_timer

        def counted(force: bool = False) -> None:
            calls.append(force)
            real(force)

        def counted_timer(delay: float, callback: Any) -> Timer:
            timers.append(delay)
            return real_timer(delay, callback)

        app.refresh_data = counted  # type: ignore[method-assign]
        app.set_timer = counted_timer  # type: ignore[method-assign,assignment]
        hosts = app.store.hosts()
        later = [SampleEvent(dataclasses.replace(s, time=s.time + 1))
                 for h in hosts if (s := app.store.latest(h)) is not None]
        app.emit(later[0])
        await until(pilot, lambda: stamp(app, hosts[0]) == later[0].sample.time)  # the first sample, alone
        assert timers == [BURST_S] and calls == []  # the redraw waits for the rest of the burst
        for e in later[1:]:
            app.emit(e)
        await until(pilot, lambda: all(stamp(app, h) == later[0].sample.time for h in hosts))
        assert timers == [BURST_S] and calls == []  # the rest joined the first one's redraw
        timer = app._timer
        assert timer is not None
        timer.stop()
        app._timed_refresh()  # what the timer does when it fires
        await pilot.pause()
        assert len(calls) == 1, calls  # not one for the first and one for the rest


def stamp(app: GpulensApp, host: str) -> float | None:
    """The time of ``host``'s latest sample in the app's store."""
    s = app.store.latest(host)
    return None if s is None else s.time


async def until(pilot: Pilot[Any], done: Callable[[], bool]) -> None:
    """Let the app run until ``done`` (a bounded wait: the test fails, never hangs)."""
    for _ in range(500):
        if done():
            return
        await pilot.pause(0.01)
    assert done(), "the app did not take the samples"


@sync
async def test_a_timed_redraw_that_fires_while_the_app_exits_does_nothing() -> None:
    app = demo_app(backfill_s=10)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
    assert not app.screen_stack  # exited: every screen is gone
    app._timed_refresh()  # raised ScreenStackError ("No screens on stack") from a timer left behind
    assert app._timer is None


@sync
async def test_a_timed_redraw_between_a_push_and_the_screens_mount_waits_for_the_mount() -> None:
    app = demo_app(backfill_s=10)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        key = app.store.jobs(300)[0].key
        app.push_screen(JobScreen(key))
        screen = app.screen
        assert isinstance(screen, JobScreen) and not screen.is_mounted  # on the stack, not composed yet
        app._timed_refresh()  # raised NoMatches (no ProfilePanel yet) and ended the app, as CI saw
        app.refresh_bar()  # a replay's tick: the header is not there yet either
        await pilot.pause()
        assert app.screen is screen and screen.is_mounted
        assert screen.view is not None and screen.view.key == key  # drawn by its own mount


@sync
async def test_a_window_change_while_paused_waits_for_a_pushed_screens_mount() -> None:
    app = demo_app(backfill_s=10)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        app.action_pause()
        key = app.store.jobs(300)[0].key
        app.push_screen(JobScreen(key))
        screen = app.screen
        assert isinstance(screen, JobScreen) and not screen.is_mounted
        app.action_window("5m")  # redrew the paused screen at once: its widgets were not there yet
        await pilot.pause()
        assert app.screen is screen and screen.is_mounted and app.paused
        assert screen.view is not None and screen.view.key == key
