"""Ways into the profiler: the job screen's o takes every host of the job; o on a host screen says what to do;
the job screen's "Open Profiler" line goes when the job ends."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpulens.core.events import SampleEvent
from gpulens.core.model import (
    CpuSample,
    HostSample,
    JobInfo,
    MemorySample,
    NetworkSample,
    StorageSample,
)
from gpulens.sources.remote_trace import RemoteTraceService
from gpulens.tui.app import GpulensApp
from gpulens.tui.screens.host import HostScreen
from gpulens.tui.screens.job import JobScreen
from gpulens.tui.screens.profiler import ProfilerScreen
from tests.fakes.tui_fakes import FROZEN, FakeRequestSource, frozen_clock, sync

SIZE = (160, 45)
TRACE = json.dumps({"traceEvents": [
    {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1, "ts": 100, "dur": 50}]})


def samples(hosts: dict[str, list[int]], polling: bool) -> list[SampleEvent]:
    out = []
    for host, pids in hosts.items():
        jobs = tuple(JobInfo(pid=p, tree_id="slurm/j7/python", cmdline="python train.py", user="alice",
                             start_time=FROZEN - 100, job_key="j7", kineto_polling=polling) for p in pids)
        out += [SampleEvent(HostSample(host=host, time=FROZEN - i, cpu=CpuSample(total_percent=10.0),
                                       memory=MemorySample(total_bytes=100, used_bytes=50),
                                       network=NetworkSample(rx_bytes_per_s=1.0, tx_bytes_per_s=1.0),
                                       storage=StorageSample(read_bytes_per_s=1.0, write_bytes_per_s=1.0),
                                       jobs=jobs)) for i in range(3)]
    return out


async def wait_for(pilot: Any, cond: Callable[[], bool], what: str, limit_s: float = 30) -> None:
    deadline = time.monotonic() + limit_s
    while not cond():
        assert time.monotonic() < deadline, f"condition not reached: {what}"
        await pilot.pause(0.05)


@pytest.mark.timeout(60)
@sync
async def test_job_screen_opens_one_profiler_for_every_host_of_the_job(tmp_path: Path) -> None:
    source = FakeRequestSource(samples({"nodeA": [11, 12], "nodeB": [21]}, True), tmp_path, TRACE)
    app = GpulensApp(source=source, clock=frozen_clock)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        app.jump("job j7")
        await wait_for(pilot, lambda: isinstance(app.screen, JobScreen)
                       and app.screen.check_action("open_profiler", ()) is True, "o offered")
        await pilot.press("o")
        await wait_for(pilot, lambda: isinstance(app.screen, ProfilerScreen), "profiler")
        prof = app.screen
        assert isinstance(prof, ProfilerScreen)
        assert [(t.host, t.pids) for t in prof.targets] == [("nodeA", (11, 12)), ("nodeB", (21,))]
        assert all(isinstance(t.service, RemoteTraceService) and t.service.host == t.host for t in prof.targets)
        await pilot.press("t")
        await wait_for(pilot, lambda: sum(k == "trace" for _, k, _ in source.requests) == 2, "a trace per host")
        traces = [(h, p) for h, k, p in source.requests if k == "trace"]
        assert sorted((h, tuple(p["pids"])) for h, p in traces) == [("nodeA", (11, 12)), ("nodeB", (21,))]
        starts = {p.get("start_time_ms") for _, p in traces}
        assert len(starts) == 1 and None not in starts  # one common start for every rank


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("polling", "said"), [(True, "open a job first"), (False, "no job on this host polls Kineto")])
@sync
async def test_o_on_a_host_screen_says_what_to_do(tmp_path: Path, polling: bool, said: str) -> None:
    source = FakeRequestSource(samples({"nodeA": [11]}, polling), tmp_path, TRACE)
    app = GpulensApp(source=source, clock=frozen_clock)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        app.open_host("nodeA")
        await wait_for(pilot, lambda: isinstance(app.screen, HostScreen), "host screen")
        await pilot.press("o")
        await wait_for(pilot, lambda: any(said in str(n.message) for n in app._notifications), said)
        assert isinstance(app.screen, HostScreen)


@pytest.mark.timeout(60)
@sync
async def test_open_profiler_line_goes_when_the_job_ends(tmp_path: Path) -> None:
    source = FakeRequestSource(samples({"nodeA": [11]}, True), tmp_path, TRACE)
    app = GpulensApp(source=source, clock=frozen_clock)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        app.jump("job j7")
        await wait_for(pilot, lambda: isinstance(app.screen, JobScreen)
                       and app.screen.check_action("open_profiler", ()) is True, "o offered")
        screen = app.screen
        assert isinstance(screen, JobScreen)
        line = screen.query_one("#profiler-action")
        assert line.display and "Open Profiler" in str(line.render())
        screen.key = "ended"  # the store no longer has the job: as when it has ended
        screen.refresh_data(force=True)
        await pilot.pause()
        assert not line.display
        assert screen.check_action("open_profiler", ()) is False
