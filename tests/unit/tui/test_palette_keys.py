"""Issue 31 items 10 and 11: the palette lists every key of the screen, and ``:home`` ends a pile of jumps."""

from __future__ import annotations

import time
from typing import Any

from textual.app import App, SystemCommand

from gpulens.tui.screens.host import HostScreen
from gpulens.tui.screens.job import JobScreen
from gpulens.tui.screens.overview import OverviewScreen
from gpulens.tui.screens.processes import ProcessesView
from tests.fakes.tui_fakes import demo_app, settle, sync


def _titles(app: App[Any]) -> dict[str, SystemCommand]:
    return {c.title: c for c in app.get_system_commands(app.screen)}


@sync
async def test_every_key_of_the_screen_is_in_the_palette_and_runs_from_there() -> None:
    app = demo_app(backfill_s=30)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        app.push_screen(HostScreen("gpu-node01", context=app))
        await settle(app, pilot)
        titles = _titles(app)
        for key_title in ("Per GPU", "Profile", "Quick look", "Processes", "Open Profiler", "Overview"):
            assert key_title in titles, sorted(titles)
        titles["Processes"].callback()
        await settle(app, pilot)
        assert isinstance(app.screen, ProcessesView) and app.screen.host == "gpu-node01"
        job = app.store.jobs(app.window_s)[0].key
        app.push_screen(JobScreen(job, context=app))
        await settle(app, pilot)
        assert "Open Profiler" in _titles(app)  # the job screen's o


@sync
async def test_home_closes_every_jump_back_to_the_overview() -> None:
    app = demo_app(backfill_s=30)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        for command in ("host gpu-node01", "ps", "proc 1", "job 4711", "gpus"):
            app.jump(command)
            await settle(app, pilot)
        assert len(app.screen_stack) > 4
        app.jump("home")
        await settle(app, pilot)
        assert isinstance(app.screen, OverviewScreen) and len(app.screen_stack) == 2
        _titles(app)["Overview"].callback()  # again: nothing to close, no error
        await settle(app, pilot)
        assert isinstance(app.screen, OverviewScreen)


@sync
async def test_no_entry_twice() -> None:
    app = demo_app(backfill_s=30)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        for command in ("", "host gpu-node01", "jobs", "ps gpu-node02"):
            if command:
                app.jump(command)
                await settle(app, pilot)
            titles = [c.title for c in app.get_system_commands(app.screen)]
            twice = {t for t in titles if titles.count(t) > 1}
            assert not twice, (command, twice)


@sync
async def test_the_prompt_completes_commands_and_host_names() -> None:
    from textual.widgets import Input

    from gpulens.tui.screens.host import HostScreen as Host
    from gpulens.tui.screens.jump import JumpScreen

    app = demo_app(backfill_s=30)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        await pilot.press("colon", *"host gpu-node1")
        await pilot.pause()
        assert isinstance(app.screen, JumpScreen)
        box = app.screen.query_one(Input)
        deadline = time.monotonic() + 10  # the suggester runs when the app gets to it (later when loaded)
        while not box._suggestion and time.monotonic() < deadline:
            await pilot.pause(0.05)
        assert box._suggestion == "host gpu-node10"  # the first host that completes it
        await pilot.press("right", "enter")  # → takes it, as in a shell
        await settle(app, pilot)
        assert isinstance(app.screen, Host) and app.screen.host == "gpu-node10"
