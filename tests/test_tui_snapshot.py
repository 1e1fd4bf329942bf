"""Snapshots of every screen at 80x24 and 200x50 (demo fleet, fixed seed, frozen clock).

Update the baselines with ``pytest tests/test_tui_snapshot.py --snapshot-update``;
scripts/make_screenshots.py writes the same renders to screenshots/.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes.tui_fakes import (
    demo_app,
    utc,  # noqa: F401 - a fixture, used by name below
)

pytestmark = pytest.mark.usefixtures("utc")

SIZES = [(80, 24), (200, 50)]


async def _open(pilot: Any, keys: tuple[str, ...], jump: str | None) -> None:
    for _ in range(3):
        await pilot.pause()
    if jump:
        pilot.app.jump(jump)
    for k in keys:
        await pilot.press(k)
    for _ in range(3):
        await pilot.pause()
    pilot.app.refresh_data(force=True)
    await pilot.pause()


SCREENS: dict[str, tuple[tuple[str, ...], str | None]] = {
    "overview": ((), None),
    "host": ((), "host gpu-node05"),
    "job": ((), "job 4711"),
    "help": (("question_mark",), None),
    "gpus": ((), "gpus"),  # the :gpus view: every GPU of the fleet
    "ps": ((), "ps gpu-node05"),  # every process of a host (issue 31 item 7)
}


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("screen", list(SCREENS))
def test_screen(snap_compare: Any, screen: str, size: tuple[int, int]) -> None:
    keys, jump = SCREENS[screen]
    app = demo_app()

    async def run_before(pilot: Any) -> None:
        await _open(pilot, keys, jump)

    assert snap_compare(app, terminal_size=size, run_before=run_before)


DETAIL_SCREENS = ("gpu", "process")


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("screen", DETAIL_SCREENS)
def test_detail_screen(snap_compare: Any, screen: str, size: tuple[int, int]) -> None:
    """The GPU screen (node05 GPU 2: hot, throttled) and a process screen, pushed from the host screen."""
    app = demo_app()

    async def run_before(pilot: Any) -> None:
        await open_detail(pilot, screen)

    assert snap_compare(app, terminal_size=size, run_before=run_before)


async def open_detail(pilot: Any, screen: str) -> None:
    """Open detail screen ``screen`` (of :data:`DETAIL_SCREENS`) from node05's host screen."""
    from gpulens.tui.screens.gpu import GpuScreen
    from gpulens.tui.screens.process import ProcessScreen

    app = pilot.app
    await _open(pilot, (), "host gpu-node05")
    if screen == "gpu":
        app.push_screen(GpuScreen("gpu-node05", 2, context=app))
    else:
        sample = app.store.latest("gpu-node05")
        app.push_screen(ProcessScreen("gpu-node05", sample.jobs[0].pid, context=app))
    await _open(pilot, (), None)
