"""Issue 31 item 10 (part): ``:host`` names match as typed, else ignoring case, else as a part of a name."""

from __future__ import annotations

from gpulens.tui.screens.host import HostScreen
from gpulens.tui.screens.jump_targets import find_host
from tests.fakes.tui_fakes import demo_app, settle, sync

HOSTS = ["gpu-node01", "GPU-Node02", "login"]


def test_exact_then_any_case_then_a_part() -> None:
    assert find_host(HOSTS, "login") == "login"
    assert find_host(HOSTS, "gpu-node02") == "GPU-Node02"
    assert find_host(HOSTS, "NODE01") == "gpu-node01"
    assert find_host(HOSTS, "node0") == "gpu-node01"  # the first that contains it
    assert find_host(HOSTS, "nothing") is None


@sync
async def test_host_jump_ignores_case() -> None:
    app = demo_app(backfill_s=20)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        app.jump("host GPU-NODE07")
        await settle(app, pilot)
        assert isinstance(app.screen, HostScreen) and app.screen.host == "gpu-node07"
