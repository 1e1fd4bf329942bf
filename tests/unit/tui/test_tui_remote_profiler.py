"""Open Profiler for a job on another host: through its agent's ``trace`` / ``trace_status`` requests.

The Pilot tests use a fake request source; the last test runs a real
``gpulens agent`` serving a per-test Kineto socket dir, a real PyTorch loop
polling it, and the app on a StreamSource connected to the agent.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import DataTable

from gpulens.core.events import SampleEvent
from gpulens.core.model import (
    CpuSample,
    HostSample,
    JobInfo,
    MemorySample,
    NetworkSample,
    StorageSample,
)
from gpulens.ipc.kineto.untraceable import UntraceableKind
from gpulens.ipc.request_schema import TraceDiagnoseParams
from gpulens.ipc.serialize import from_dict, to_dict
from gpulens.sources.ask import ask
from gpulens.sources.remote_trace import RemoteTraceService
from gpulens.tui.app import GpulensApp
from gpulens.tui.screens.job import JobScreen
from gpulens.tui.screens.profiler import ProfilerScreen
from gpulens.tui.screens.profiler_views import AnalyzeScreen
from tests.fakes.tui_fakes import FROZEN, FakeRequestSource, frozen_clock, sync
from tests.paths import KINETO_WORKLOAD

SIZE = (160, 45)
WORKLOAD = KINETO_WORKLOAD
TRACE = json.dumps({"traceEvents": [
    {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 4242, "tid": 1, "ts": 100, "dur": 50},
    {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 4242, "tid": 1, "ts": 200, "dur": 20},
]})


async def _wait_for(pilot: Any, cond: Callable[[], bool], limit_s: float = 30, what: str = "") -> None:
    deadline = time.monotonic() + limit_s
    while not cond():
        assert time.monotonic() < deadline, f"condition not reached: {what}"
        await pilot.pause(0.05)


def _samples(polling: bool, host: str = "remotebox") -> list[SampleEvent]:
    job = JobInfo(pid=4242, tree_id="systemd/bash/python3", cmdline="python train.py", user="alice",
                  start_time=FROZEN - 100, job_key="rt1", kineto_polling=polling)
    return [SampleEvent(HostSample(
        host=host, time=FROZEN - i, cpu=CpuSample(total_percent=10.0),
        memory=MemorySample(total_bytes=100, used_bytes=50),
        network=NetworkSample(rx_bytes_per_s=1.0, tx_bytes_per_s=1.0),
        storage=StorageSample(read_bytes_per_s=1.0, write_bytes_per_s=1.0), jobs=(job,))) for i in range(5)]


def _cell(table: DataTable[Any], col: int) -> str:
    return str(table.get_row_at(0)[col])


def test_kineto_polling_round_trips_and_defaults_false() -> None:
    job = JobInfo(pid=1, tree_id="t", cmdline="c", user="u", start_time=0.0, kineto_polling=True)
    assert from_dict(JobInfo, to_dict(job)).kineto_polling is True
    old = {k: v for k, v in to_dict(job).items() if k != "kineto_polling"}  # an older agent's sample
    assert from_dict(JobInfo, old).kineto_polling is False


@pytest.mark.timeout(60)
@sync
async def test_remote_job_opens_profiler_and_traces_through_the_agent(tmp_path: Path) -> None:
    source = FakeRequestSource(_samples(True), tmp_path, TRACE,
                               status=(("requested", "request received"), ("waiting for poll", "config handed")))
    app = GpulensApp(source=source, clock=frozen_clock)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        app.jump("job rt1")
        await _wait_for(pilot, lambda: isinstance(app.screen, JobScreen), what="job screen")
        screen = app.screen
        assert isinstance(screen, JobScreen)
        await _wait_for(pilot, lambda: screen.check_action("open_profiler", ()) is True, what="o offered")
        assert screen.remote_polling() == ("remotebox", (4242,))
        assert "agent on remotebox" in str(screen.query_one("#profiler-action").render())
        await pilot.press("o")
        await _wait_for(pilot, lambda: isinstance(app.screen, ProfilerScreen), what="profiler screen")
        prof = app.screen
        assert isinstance(prof, ProfilerScreen) and isinstance(prof.service, RemoteTraceService)
        assert prof.host == "remotebox" and prof.pids == [4242]
        assert "pid 4242: ready" in str(prof.query_one("#pf-status").render())
        await pilot.press("t")
        table = prof.query_one("#pf-jobs", DataTable)
        await _wait_for(pilot, lambda: table.row_count == 1 and "done" in _cell(table, 0), what="trace done")
        trace_req = next(p for h, k, p in source.requests if k == "trace")
        assert trace_req["pids"] == [4242] and trace_req["duration_ms"] == 500
        assert any(k == "trace_status" and p["tag"] == trace_req["tag"] for _, k, p in source.requests)
        assert all(h == "remotebox" for h, _, _ in source.requests)
        await pilot.press("a")
        await _wait_for(pilot, lambda: isinstance(app.screen, AnalyzeScreen), what="analyze screen")
        ops = app.screen.query_one(DataTable)
        assert {str(ops.get_row_at(i)[0]) for i in range(ops.row_count)} == {"aten::addmm", "aten::relu"}
        # Leaving and re-entering keeps the trace list (one service per app and host).
        await pilot.press("escape", "escape")
        await _wait_for(pilot, lambda: isinstance(app.screen, JobScreen), what="back to the job")
        await pilot.press("o")
        await _wait_for(pilot, lambda: isinstance(app.screen, ProfilerScreen), what="profiler again")
        assert app.screen.query_one("#pf-jobs", DataTable).row_count == 1


@pytest.mark.timeout(60)
@sync
async def test_remote_trace_failure_shows_agent_reason(tmp_path: Path) -> None:
    why = "trace failed: 4242: socket-dir mismatch: the program uses /tmp/a, gpulens serves /tmp/b"
    source = FakeRequestSource(_samples(True), tmp_path, TRACE, fail=why)
    app = GpulensApp(source=source, clock=frozen_clock)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        app.jump("job rt1")
        await _wait_for(pilot, lambda: isinstance(app.screen, JobScreen) and app.screen.check_action(
            "open_profiler", ()) is True, what="o offered")
        await pilot.press("o")
        await _wait_for(pilot, lambda: isinstance(app.screen, ProfilerScreen), what="profiler screen")
        table = app.screen.query_one("#pf-jobs", DataTable)
        await pilot.press("t")
        await _wait_for(pilot, lambda: table.row_count == 1 and "failed" in _cell(table, 0), what="failed")
        assert "socket-dir mismatch" in _cell(table, 1)


@pytest.mark.timeout(60)
@sync
async def test_no_open_profiler_when_not_polling_or_no_requests(tmp_path: Path) -> None:
    from tests.fakes.tui_fakes import StaticSource

    for source in (FakeRequestSource(_samples(False), tmp_path, TRACE), StaticSource(_samples(True))):
        await _check_no_open_profiler(GpulensApp(source=source, clock=frozen_clock))


async def _check_no_open_profiler(app: GpulensApp) -> None:
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        app.jump("job rt1")
        await _wait_for(pilot, lambda: isinstance(app.screen, JobScreen), what="job screen")
        screen = app.screen
        assert isinstance(screen, JobScreen)
        await pilot.pause()
        screen.refresh_data(force=True)
        assert screen.remote_polling() is None
        assert screen.check_action("open_profiler", ()) is False
        await pilot.press("o")
        await pilot.pause()
        assert isinstance(app.screen, JobScreen)


@pytest.mark.timeout(60)
@sync
async def test_remote_job_that_does_not_poll_says_why(tmp_path: Path) -> None:
    why = "KINETO_USE_DAEMON is not set in its environment; start it with KINETO_USE_DAEMON=1"
    source = FakeRequestSource(_samples(False), tmp_path, TRACE, reasons={4242: why})
    app = GpulensApp(source=source, clock=frozen_clock)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        app.jump("job rt1")
        await _wait_for(pilot, lambda: isinstance(app.screen, JobScreen) and bool(app.screen.query("#profiler-action")),
                        what="job screen")
        line = app.screen.query_one("#profiler-action")
        await _wait_for(pilot, lambda: why in str(line.render()), 10, "the agent's reason")
        assert "Open Profiler unavailable: remotebox pid 4242" in str(line.render())
        assert ("remotebox", "trace_diagnose", {"pids": [4242]}) in source.requests


def test_diagnose_and_failure_reason_without_ui() -> None:
    polling: set[int] = {7}
    svc = RemoteTraceService(FakeRequestSource([], Path("/nonexistent"), TRACE, fail="process 8 does not exist"),
                             "remotebox", lambda: polling)
    assert svc.diagnose(7) is None and svc.address == "the agent on remotebox"
    why = svc.diagnose(8)
    assert why is not None and why.kind is UntraceableKind.NOT_POLLING_AGENT and why.host == "remotebox"
    from gpulens.ipc.kineto.requests import TraceRequest

    fut = svc.request_trace(TraceRequest(pids=(8,)))
    with pytest.raises(Exception, match="does not exist"):
        fut.result(timeout=10)
    why = svc.diagnose(8)
    assert why is not None and why.kind is UntraceableKind.AGENT_FAILED and "process 8 does not exist" in why.detail
    assert [j.state.value for j in svc.jobs()] == ["failed"]


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.timeout(120)
@sync
async def test_real_agent_and_pytorch_over_the_stream(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="needs the PyTorch CPU build")
    from gpulens.sources.stream.source import LinkOptions, StreamSource, parse_connect
    from tests.fakes.agent_helpers import AgentProc

    exe = Path(sys.executable).parent / "gpulens"
    if not exe.exists():
        pytest.skip(f"gpulens is not installed next to {sys.executable}")
    # libkineto's client socket names must fit in sun_path (108 bytes): keep the dir short.
    short = Path(tempfile.mkdtemp(prefix="gr", dir="/tmp"))
    sock_dir = short / "s"
    sock_dir.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KINETO")}
    env.update(KINETO_IPC_SOCKET_DIR=str(sock_dir), HOME=str(tmp_path))
    conf = short / "k.conf"
    conf.write_text("ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS=1\n")
    job_key = f"rtui{os.getpid()}"
    agent = AgentProc(str(exe), tmp_path, "remotebox", trace=True, token=True, env=env,
                      extra=["--interval", "0.5", "--pattern", r"python[0-9.]*$"])
    work = subprocess.Popen(
        [sys.executable, str(WORKLOAD), "--seconds", "100"],
        env={**env, "KINETO_USE_DAEMON": "1", "KINETO_CONFIG": str(conf), "SLURM_JOB_ID": job_key},
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    source = StreamSource(parse_connect(agent.address), LinkOptions(download_dir=tmp_path / "dl", token=agent.token))
    app = GpulensApp(source=source)
    try:
        assert work.stdout is not None and work.stdout.readline().strip() == "READY"

        def polling_job() -> str | None:
            sample = app.store.latest("remotebox")
            jobs = sample.jobs if sample is not None else ()
            return next((j.job_key for j in jobs if j.pid == work.pid and j.kineto_polling and j.job_key), None)

        async with app.run_test(size=SIZE) as pilot:
            try:
                await _wait_for(pilot, lambda: polling_job() is not None, 40, "the agent marks the loop as polling")
            except AssertionError:
                sample = app.store.latest("remotebox")
                jobs = [(j.pid, j.tree_id, j.job_key, j.kineto_polling) for j in sample.jobs] if sample else None
                raise AssertionError(f"loop pid {work.pid}; hosts {app.store.hosts()}; jobs {jobs}; "
                                     f"agent log: {agent.log.read_text()[-1500:]}") from None
            app.push_screen(JobScreen(str(polling_job())))
            await _wait_for(pilot, lambda: isinstance(app.screen, JobScreen), what="job screen")
            screen = app.screen
            assert isinstance(screen, JobScreen)
            await _wait_for(pilot, lambda: screen.check_action("open_profiler", ()) is True, 10, "o offered")
            assert screen.remote_polling() == ("remotebox", (work.pid,))
            diag = ask(source, "remotebox", TraceDiagnoseParams(pids=(work.pid, os.getpid())), 10)
            reasons = diag.result(timeout=15).answer.reasons
            assert reasons[str(work.pid)] is None and reasons[str(os.getpid())]  # pytest does not poll
            await pilot.press("o")
            await _wait_for(pilot, lambda: isinstance(app.screen, ProfilerScreen), what="profiler screen")
            prof = app.screen
            assert isinstance(prof, ProfilerScreen)
            await pilot.press("t")
            table = prof.query_one("#pf-jobs", DataTable)
            await _wait_for(pilot, lambda: table.row_count == 1 and ("done" in _cell(table, 0)
                                                                       or "failed" in _cell(table, 0)), 60, "trace")
            assert "done" in _cell(table, 0), _cell(table, 1)
            row = prof._cursor_row()  # the one traced process's row, selected as the newest
            assert row is not None and row.path is not None
            assert Path(row.path).is_relative_to(tmp_path / "dl")
            await pilot.press("a")
            await _wait_for(pilot, lambda: isinstance(app.screen, AnalyzeScreen), 30, "analyze screen")
            ops = app.screen.query_one(DataTable)
            assert any(str(ops.get_row_at(i)[0]).startswith("aten::") for i in range(ops.row_count))
    finally:
        app.stop_source()
        work.kill()
        work.wait()
        agent.stop()
        shutil.rmtree(short, ignore_errors=True)


@pytest.mark.timeout(60)
@sync
async def test_f_on_this_machine_seen_through_its_own_agent_samples_through_that_agent(tmp_path: Path) -> None:
    """``--connect`` to this machine's own agent: its source runs no py-spy here, so ``f`` asks that agent."""
    source = FakeRequestSource(_samples(False, host="thisbox"), tmp_path, TRACE)
    app = GpulensApp(source=source, clock=frozen_clock, hostname="thisbox")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.3)
        app.jump("host thisbox")
        await pilot.pause(0.3)
        await pilot.press("f")
        await _wait_for(pilot, lambda: any(k == "profile" for _, k, _ in source.requests), 10, "a profile request")
        host, _, params = next(r for r in source.requests if r[1] == "profile")
        assert host == "thisbox" and params["pids"] == [4242]
        said = [str(n.message) for n in app._notifications]
        assert not any("py-spy is not available here" in s for s in said), said
