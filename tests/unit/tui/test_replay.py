"""A replay you can scrub: starts at the beginning, plays, pauses, seeks, changes speed, reaches every job."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpulens.core.errors import ConfigError, ConfigProblem
from gpulens.core.events import SampleEvent
from gpulens.core.model import (
    CpuSample,
    HostSample,
    JobInfo,
    MemorySample,
    NetworkSample,
    StorageSample,
)
from gpulens.sources.local import Recorder
from gpulens.sources.replay import ReplaySource
from gpulens.tui.app import GpulensApp
from gpulens.tui.replay import SEEK_STEP_S, ReplayBar
from gpulens.tui.screens.host import HostScreen
from gpulens.tui.screens.job import JobScreen
from tests.fakes.tui_fakes import FROZEN, settle, sync
from tests.paths import ROOT

T0 = FROZEN - 10_000
SECONDS = 200
JOB_FROM, JOB_TO = 30, 170
"""Job 4711 runs on node-a from T0+30 to T0+170: most of the recording, not its start or end."""


def sample(host: str, t: float, cpu: float, with_job: bool) -> SampleEvent:
    jobs = (JobInfo(pid=4711, tree_id="systemd/slurmstepd/python3", cmdline="python train.py", user="alice",
                    start_time=T0 + JOB_FROM, job_key="4711"),) if with_job else ()
    return SampleEvent(HostSample(host=host, time=t, cpu=CpuSample(total_percent=cpu),
                                  memory=MemorySample(total_bytes=100, used_bytes=50),
                                  network=NetworkSample(rx_bytes_per_s=1.0, tx_bytes_per_s=2.0),
                                  storage=StorageSample(read_bytes_per_s=1.0, write_bytes_per_s=2.0),
                                  jobs=jobs))


def record(path: Path) -> Path:
    rec = Recorder(str(path), "test")
    for k in range(SECONDS + 1):
        t = T0 + k
        rec.write(sample("node-a", t, float(k % 100), JOB_FROM <= k <= JOB_TO))
        if k >= 50:  # node-b joins late
            rec.write(sample("node-b", t, 1.0, False))
    rec.close()
    return path


async def ready(app: GpulensApp, pilot: Any) -> None:
    for _ in range(200):
        await pilot.pause()
        if app.replay is not None and app.replay.ready:
            break
        await asyncio.sleep(0.02)
    assert app.replay is not None and app.replay.ready
    await settle(app, pilot)


async def until(pilot: Any, cond: Any) -> None:
    for _ in range(200):
        await pilot.pause()
        if cond():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not reached")


@sync
async def test_replay_starts_at_the_beginning_on_its_own_clock(tmp_path: Path) -> None:
    path = record(tmp_path / "r.gpulens")
    app = GpulensApp(source=ReplaySource(str(path)))
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        control = app.replay
        assert control is not None
        assert control.index.start == T0 and control.index.end == T0 + SECONDS
        assert control.position < T0 + 5  # the beginning, not the final state
        assert app.store.hosts() == ["node-a"]  # node-b reports from T0+50 only
        assert app.clock() == control.position  # the recording's clock, not the wall clock
        bar = app.screen.query_one(ReplayBar)
        text = bar.render().plain
        assert app.clock_text(T0) in text and app.clock_text(T0 + SECONDS) in text
        assert control.playing and "▶ 1x" in text


@sync
async def test_space_pauses_arrows_seek_and_brackets_change_speed(tmp_path: Path) -> None:
    path = record(tmp_path / "r.gpulens")
    app = GpulensApp(source=ReplaySource(str(path)))
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        control = app.replay
        assert control is not None
        await pilot.press("space")
        assert not control.playing
        at = control.position
        await pilot.pause()
        await asyncio.sleep(0.6)  # a playback tick passes: paused, it stays
        assert control.position == at
        await pilot.press("shift+right", "shift+right")  # ahead 2 min
        await until(pilot, lambda: not control.seeking and control.position > at + 100)
        assert control.position == pytest.approx(at + 12 * SEEK_STEP_S)
        assert app.store.now == pytest.approx(control.position, abs=1)
        assert "node-b" in app.store.hosts()
        await pilot.press("left", "left", "left")  # back 30 s: a fresh store, nothing newer than the position
        await until(pilot, lambda: not control.seeking and control.position < at + 100)
        assert control.position == pytest.approx(at + 9 * SEEK_STEP_S)
        assert app.store.now <= control.position
        await pilot.press("right_square_bracket", "right_square_bracket")
        assert control.speed == 4.0
        await pilot.press("left_square_bracket")
        assert control.speed == 2.0
        await pilot.press("space")
        start = control.position
        await until(pilot, lambda: control.position >= start + 1.5)
        assert "▶ 2x" in app.screen.query_one(ReplayBar).render().plain


@sync
async def test_a_job_and_a_host_not_on_screen_now_are_reachable(tmp_path: Path) -> None:
    path = record(tmp_path / "r.gpulens")
    app = GpulensApp(source=ReplaySource(str(path)))
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        control = app.replay
        assert control is not None
        await pilot.press("space")  # paused at the start: job 4711 has not started yet
        assert app.store.find_job("4711", app.window_s) is None
        assert "Job 4711 (in the recording)" in [c.title for c in app.get_system_commands(app.screen)]
        app.jump("job 4711")
        await until(pilot, lambda: isinstance(app.screen, JobScreen))
        job_screen = app.screen
        assert isinstance(job_screen, JobScreen) and job_screen.key == "4711"
        assert T0 + JOB_FROM <= control.position <= T0 + JOB_TO
        assert app.store.find_job("4711", app.window_s) is not None
        await pilot.press("escape")
        await pilot.pause()
        control.seek_to(T0 + SECONDS)  # the end: the job has finished
        await until(pilot, lambda: not control.seeking and control.position == T0 + SECONDS)
        assert app.store.find_job("4711", app.window_s) is None
        app.jump("job 4711")  # by pid too: the index knows every pid
        await until(pilot, lambda: isinstance(app.screen, JobScreen))
        assert control.position == pytest.approx(T0 + JOB_TO)
        await pilot.press("escape")
        control.seek_to(T0)
        await until(pilot, lambda: not control.seeking and control.position == T0)
        app.jump("host node-b")  # reports from T0+50 only
        await until(pilot, lambda: isinstance(app.screen, HostScreen))
        assert control.position == pytest.approx(T0 + 50)


def test_replay_of_a_directory_or_garbage_fails_in_one_line_before_the_ui(tmp_path: Path) -> None:
    record(tmp_path / "one.gpulens")
    with pytest.raises(ConfigError) as err:
        ReplaySource(str(tmp_path))
    assert (err.value.got, err.value.problem) == (str(tmp_path), ConfigProblem.NOT_REGULAR)
    assert "one.gpulens" in (err.value.detail or "")  # the recordings in it are named
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(os.urandom(4096))
    with pytest.raises(ConfigError) as err:
        ReplaySource(str(garbage))
    assert (err.value.got, err.value.problem) == (str(garbage), ConfigProblem.NOT_A_RECORDING)
    for target in (tmp_path, garbage):
        run = subprocess.run([sys.executable, "-m", "gpulens", "--replay", str(target)], cwd=ROOT,
                             capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        lines = [ln for ln in run.stderr.splitlines() if ln.strip()]
        assert run.returncode != 0 and len(lines) == 1, run.stderr
        assert "Traceback" not in run.stderr and str(target) in lines[0]
        assert "\x1b[" not in run.stdout  # the TUI never opened
