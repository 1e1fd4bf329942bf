"""py-spy sampling from the host screen: countdown, chosen duration, idle samples dropped, last graph reopened."""

from __future__ import annotations

import threading
from typing import Any

from gpulens.analysis.flame import pyspy
from gpulens.analysis.flame.model import build_from_stacks
from gpulens.core.events import SampleEvent
from gpulens.core.model import (
    CpuSample,
    HostSample,
    JobInfo,
    MemorySample,
    NetworkSample,
    StorageSample,
)
from gpulens.tui.app import GpulensApp
from gpulens.tui.profiling import NO_PYSPY_NOTE, DurationPrompt
from gpulens.tui.screens.flame import FlameScreen
from gpulens.tui.screens.help import key_rows
from gpulens.tui.screens.host import HostScreen
from gpulens.tui.widgets.profile_panel import ProfilePanel
from tests.fakes.tui_fakes import (
    FROZEN,
    FakeProfiler,
    ProfilingSource,
    StaticSource,
    frozen_clock,
    settle,
    sync,
)


def _events() -> list[SampleEvent]:
    job = JobInfo(pid=501, tree_id="slurmstepd/python", cmdline="python train.py", user="u",
                  start_time=FROZEN - 100, cpu_percent=50.0)
    sample = HostSample(host="near-host", time=FROZEN, cpu=CpuSample(total_percent=40.0),
                        memory=MemorySample(total_bytes=100, used_bytes=50),
                        network=NetworkSample(rx_bytes_per_s=1.0, tx_bytes_per_s=2.0),
                        storage=StorageSample(read_bytes_per_s=1.0, write_bytes_per_s=2.0), jobs=(job,))
    return [SampleEvent(sample)]


def _app(profiler: FakeProfiler) -> GpulensApp:
    return GpulensApp(source=ProfilingSource(_events(), profiler), clock=frozen_clock, hostname="near-host")


async def _wait_for(pilot: Any, test: Any, tries: int = 100) -> None:
    for _ in range(tries):
        if test():
            return
        await pilot.pause(0.05)


@sync
async def test_countdown_duration_idle_line_and_reopen() -> None:
    release = threading.Event()
    calls: list[tuple[list[int], float]] = []

    def fake_sample(pids: list[int], duration_s: float) -> pyspy.Sampled:
        calls.append((pids, duration_s))
        release.wait(10)
        profile = build_from_stacks([(["main", "step"], 150)], "samples", "py-spy 100 Hz x 2 s: 501")
        return pyspy.Sampled(profile, recorded=150, threads=3, ticks=200)

    app = _app(FakeProfiler(sample=fake_sample))
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        app.jump("host near-host")
        await settle(app, pilot)
        screen = app.screen
        assert isinstance(screen, HostScreen)
        keys = dict(key_rows(screen, []))
        assert any("F" in k for k in keys) and any("L" in k for k in keys)  # in the screen's ? help
        await pilot.press("L")  # nothing yet
        await pilot.pause()
        assert any("no flame graph yet" in str(n.message) for n in app._notifications)
        await pilot.press("F")
        await pilot.pause()
        assert isinstance(app.screen, DurationPrompt)
        await pilot.press("ctrl+a", *"abc", "enter")  # refused, the prompt stays
        assert isinstance(app.screen, DurationPrompt)
        await pilot.press("end", *["backspace"] * 8, "2", "enter")
        await pilot.pause()
        assert screen.profiling.duration_s == 2.0
        panel = screen.query_one(ProfilePanel)
        assert "now 2 s" in panel.note
        await pilot.press("f")
        await pilot.pause()
        assert "s left of 2 s" in panel.state  # the countdown
        # ... and a toast, which shows at any size (the panel may be below the fold at 80x24).
        assert any("with py-spy for 2 s: the flame graph opens when done" in str(n.message) for n in app._notifications)
        await _wait_for(pilot, lambda: calls)
        assert calls == [([501], 2.0)]
        release.set()
        await _wait_for(pilot, lambda: isinstance(app.screen, FlameScreen))
        flame = app.screen
        assert isinstance(flame, FlameScreen) and flame.profile.total == 150
        assert "≈450 idle thread samples dropped" in flame.title_text  # 3 threads x 200 ticks - 150
        assert "Host near-host" in flame.crumbs or "near-host" in flame.crumbs
        await pilot.press("escape")
        await pilot.pause()
        assert "≈450 idle thread samples dropped" in panel.state and "L: reopen" in panel.note
        await pilot.press("L")
        await _wait_for(pilot, lambda: isinstance(app.screen, FlameScreen))
        assert isinstance(app.screen, FlameScreen) and app.screen.profile is flame.profile


def test_idle_estimate_and_unknown() -> None:
    profile = build_from_stacks([(["a"], 10)], "samples")
    assert pyspy.Sampled(profile, 10, 2, 100).idle_dropped == 190
    assert pyspy.Sampled(profile, 10, None, 100).idle_dropped is None
    assert "unknown" in pyspy.Sampled(profile, 10, None, 100).idle_line()


@sync
async def test_without_a_local_profiler_f_and_d_say_py_spy_is_not_here() -> None:
    """A source that runs no py-spy on this machine (the TUI never runs it itself): f and d say so, nothing starts."""
    app = GpulensApp(source=StaticSource(_events()), clock=frozen_clock, hostname="near-host")
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        app.jump("host near-host")
        await settle(app, pilot)
        for key in ("f", "d"):
            await pilot.press(key)
            await pilot.pause()
        said = [str(n.message) for n in app._notifications]
        assert said.count(NO_PYSPY_NOTE) == 2, said
        assert not any(w.group and w.group.startswith("profile") for w in app.workers)
