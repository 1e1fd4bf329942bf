"""The trace job table without torch: one trace per pid at a time, busy polls, exits, honest labels.

Pids are real processes (this one, or a child started here) so the /proc
liveness checks see what they would in production; files are faked by the
probe the table is given.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from concurrent.futures import Future
from pathlib import Path

import pytest

from gpulens.ipc.errors import NotTraceable
from gpulens.ipc.kineto.diagnose import diagnose_pid
from gpulens.ipc.kineto.jobs import MAX_QUEUED_PER_PID, JobTable, PidTask
from gpulens.ipc.kineto.liveness import exited, identity
from gpulens.ipc.kineto.outputs import FileProbe, TraceOutput
from gpulens.ipc.kineto.registry import PollingProcess, Registry
from gpulens.ipc.kineto.requests import (
    TraceRequest,
    TraceResult,
    TraceState,
    config_text,
)
from gpulens.ipc.kineto.untraceable import Untraceable, UntraceableKind

ME = os.getpid()


def _task(pid: int, name: str) -> PidTask:
    out = TraceOutput(Path("/nowhere") / name, (0, 0), Path("/nowhere") / name / "trace.json", os.geteuid())
    return PidTask(pid=pid, config=f"config-{name}", output=out, ident=identity(pid))


def _add(table: JobTable, rid: str, pid: int = ME, **req: object) -> Future[TraceResult]:
    fut: Future[TraceResult] = Future()
    table.add(rid, TraceRequest(pids=(pid,), **req), {pid: _task(pid, rid)}, fut)  # type: ignore[arg-type]
    return fut


def _landed(*names: str) -> object:
    def probe(out: TraceOutput, pid: int, since: float) -> FileProbe:
        return FileProbe(path=str(out.log)) if out.directory.name in names else FileProbe()

    return probe


def _never(pid: int) -> str:
    raise AssertionError("no poll deadline should pass in these tests")


def test_a_second_request_is_queued_never_handed_while_the_first_runs() -> None:
    table = JobTable()
    first, second = _add(table, "a"), _add(table, "b")
    states = {j.request_id: j for j in table.snapshots()}
    assert states["a"].state is TraceState.WAITING_FOR_POLL
    assert states["b"].state is TraceState.QUEUED and "behind trace a" in states["b"].detail
    handed = table.hand_over(ME)
    assert handed is not None and handed[0] == "config-a"
    assert table.hand_over(ME) is None  # the next poll gets nothing: b waits for a's file
    table.tick(_never, _landed())  # type: ignore[arg-type]
    assert table.hand_over(ME) is None
    table.tick(_never, _landed("a"))  # type: ignore[arg-type]
    assert first.result(timeout=1).files == {ME: "/nowhere/a/trace.json"}
    assert not second.done()
    assert {j.request_id: j.state for j in table.snapshots()}["b"] is TraceState.WAITING_FOR_POLL
    handed = table.hand_over(ME)
    assert handed is not None and handed[0] == "config-b"
    table.tick(_never, _landed("b"))  # type: ignore[arg-type]
    assert second.result(timeout=1).files == {ME: "/nowhere/b/trace.json"}


def test_queue_is_bounded_and_the_extra_request_is_refused_at_once() -> None:
    table = JobTable()
    futs = [_add(table, f"r{i}") for i in range(MAX_QUEUED_PER_PID + 2)]
    assert all(not f.done() for f in futs[:-1])
    with pytest.raises(NotTraceable, match=f"already has a trace running and {MAX_QUEUED_PER_PID} queued"):
        futs[-1].result(timeout=1)


def test_a_busy_poll_keeps_the_config_pending_and_says_why() -> None:
    table = JobTable()
    _add(table, "a")
    said = table.hand_over(ME, accepts=False)
    assert said is not None and said[0] == ""  # nothing handed
    assert "profiler is busy with another trace" in said[1].detail
    assert table.hand_over(ME, accepts=False) is None  # said once
    handed = table.hand_over(ME, accepts=True)
    assert handed is not None and handed[0] == "config-a"


def test_a_target_that_exits_fails_its_trace_at_the_next_tick() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        table = JobTable()
        fut = _add(table, "a", pid=child.pid)
        assert table.hand_over(child.pid) is not None
        table.tick(_never, _landed())  # type: ignore[arg-type]
        assert not fut.done()
    finally:
        child.kill()
        child.wait()
    table.tick(_never, _landed())  # type: ignore[arg-type]
    with pytest.raises(NotTraceable, match=f"process {child.pid} exited during the trace"):
        fut.result(timeout=1)


def test_a_reused_pid_counts_as_exited() -> None:
    me = identity(ME)
    assert me is not None and not exited(ME, me)
    assert exited(ME, type(me)(ME, me.start_ticks + 1))
    assert exited(1 << 22, None)


def test_an_iterations_trace_without_optimizer_steps_is_labelled() -> None:
    table = JobTable(inspect=lambda path, uid: False)
    fut = _add(table, "a", duration_ms=None, iterations=3)
    handed = table.hand_over(ME)
    assert handed is not None and "tracing 3 iterations if it steps an optimizer, else 500 ms" in handed[1].detail
    table.tick(_never, _landed("a"))  # type: ignore[arg-type]
    res = fut.result(timeout=1)
    assert "Kineto traced 500 ms, not 3 iterations" in res.notes[ME]
    assert table.stepped[ME] is False
    stepped = JobTable(inspect=lambda path, uid: True)
    fut = _add(stepped, "b", duration_ms=None, iterations=3)
    stepped.hand_over(ME)
    stepped.tick(_never, _landed("b"))  # type: ignore[arg-type]
    assert fut.result(timeout=1).notes == {} and stepped.stepped[ME] is True


def test_iteration_config_names_its_fallback_and_a_common_start_is_kept() -> None:
    text = config_text(TraceRequest(pids=(1,), duration_ms=None, iterations=2), Path("/tmp/x.json"), "r")
    assert "ACTIVITIES_ITERATIONS=2" in text and "ACTIVITIES_DURATION_MSECS=500" in text
    start = int(time.time() * 1000) + 3000
    text = config_text(TraceRequest(pids=(1,), start_time_ms=start), Path("/tmp/x.json"), "r")
    assert f"PROFILE_START_TIME={start}" in text
    with pytest.raises(ValueError, match="start_time_ms"):
        TraceRequest(pids=(1,), start_time_ms=1).validate()


def test_registry_records_a_busy_profiler_from_the_poll() -> None:
    reg = Registry()
    entry = reg.record_poll((ME,), 0, 0, 3)
    assert entry is not None and entry.busy is False
    entry = reg.record_poll((ME,), 0, 0, 1)
    assert entry is not None and entry.busy is True  # ACTIVITIES bit clear


def test_a_wrapper_is_told_its_polling_descendants() -> None:
    now = time.monotonic()
    pollers = [PollingProcess(4242, (ME, 1), 0, os.geteuid(), now, now),
               PollingProcess(4243, (4242, ME, 1), 0, os.geteuid(), now, now)]
    why = diagnose_pid(ME, polling=False, serving_dir=None, requester_uid=os.geteuid(), pollers=pollers)
    assert why == Untraceable(UntraceableKind.DESCENDANTS_POLL, ME, pids=(4242, 4243))


def test_a_common_start_that_passes_while_waiting_fails_with_the_reason() -> None:
    table = JobTable()
    fut = _add(table, "a", start_time_ms=int(time.time() * 1000) + 200)
    assert table.hand_over(ME) is None  # too late for Kineto's profiler loop: never handed
    table.tick(_never, _landed())  # type: ignore[arg-type]
    with pytest.raises(NotTraceable, match="common start time passed before process"):
        fut.result(timeout=1)
