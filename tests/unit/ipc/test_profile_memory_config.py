"""``profile_memory`` without torch: the config keys Kineto is handed, the note, an honest failure.

Issue 28: ``PROFILE_MEMORY=true`` (with ``PROFILE_MEMORY_DURATION_MSECS``)
sent libkineto down its memory-snapshot loop instead of the activity trace;
every request failed with an empty ``trace_<pid>.json.tmp`` and a reason
blaming an overloaded machine. ``PROFILE_PROFILE_MEMORY`` is the key of the
trace's ``profile_memory``.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from gpulens.ipc.errors import TraceError
from gpulens.ipc.kineto.jobs import JobTable, PidTask
from gpulens.ipc.kineto.jobtext import NO_MEMORY_NOTE
from gpulens.ipc.kineto.liveness import identity
from gpulens.ipc.kineto.outputs import FileProbe, TraceOutput
from gpulens.ipc.kineto.requests import TraceRequest, TraceResult, config_text
from gpulens.ipc.kineto.steps import shows_memory_events

ME = os.getpid()
LOG = Path("/tmp/x/trace.json")


def _expected(memory: str) -> str:
    return "\n".join([
        "ACTIVITIES_LOG_FILE=/tmp/x/trace.json",
        "PROFILE_START_TIME=0",
        "ACTIVITIES_DURATION_MSECS=550",
        "ACTIVITIES_WARMUP_PERIOD_SECS=0",
        "PROFILE_REPORT_INPUT_SHAPES=false",
        f"PROFILE_PROFILE_MEMORY={memory}",
        "PROFILE_WITH_STACK=false",
        "PROFILE_WITH_FLOPS=false",
        "PROFILE_WITH_MODULES=false",
        "REQUEST_TRACE_ID=r1",
    ])


@pytest.mark.parametrize("on", [True, False])
def test_profile_memory_is_profile_profile_memory_and_nothing_else(on: bool) -> None:
    text = config_text(TraceRequest(pids=(1,), duration_ms=500, profile_memory=on), LOG, "r1")
    assert text == _expected("true" if on else "false")
    keys = [line.split("=", 1)[0] for line in text.splitlines()]
    assert "PROFILE_MEMORY" not in keys and "PROFILE_MEMORY_DURATION_MSECS" not in keys


def test_iteration_config_with_memory_has_no_snapshot_keys() -> None:
    text = config_text(TraceRequest(pids=(1,), duration_ms=None, iterations=3, profile_memory=True), LOG, "r")
    assert "PROFILE_PROFILE_MEMORY=true" in text.splitlines()
    assert "\nPROFILE_MEMORY" not in text


def _job(table: JobTable, rid: str, directory: Path, **req: Any) -> tuple[PidTask, Future[TraceResult]]:  # TraceRequest's fields
    request = TraceRequest(pids=(ME,), **req)
    out = TraceOutput(directory, (0, 0), directory / "trace.json", os.geteuid())
    task = PidTask(pid=ME, config=config_text(request, out.log, rid), output=out, ident=identity(ME))
    fut: Future[TraceResult] = Future()
    table.add(rid, request, {ME: task}, fut)
    return task, fut


def _landed(out: TraceOutput, pid: int, since: float) -> FileProbe:
    return FileProbe(path=str(out.log))


def _never(pid: int) -> str:
    raise AssertionError("no poll deadline should pass here")


@pytest.mark.parametrize(("has_memory", "noted"), [(False, True), (True, False), (None, False)])
def test_a_memory_trace_without_memory_events_says_so(has_memory: bool | None, noted: bool) -> None:
    seen: list[str] = []

    def memory(path: str, uid: int) -> bool | None:
        seen.append(path)
        return has_memory

    table = JobTable(memory=memory)
    _, fut = _job(table, "a", Path("/nowhere/a"), duration_ms=300, profile_memory=True)
    assert table.hand_over(ME) is not None
    table.tick(_never, _landed)
    res = fut.result(timeout=1)
    assert seen == ["/nowhere/a/trace.json"]
    assert (res.notes.get(ME) == NO_MEMORY_NOTE) is noted
    assert len(NO_MEMORY_NOTE) < 300  # a remote viewer keeps 300 characters of a note


def test_a_trace_without_memory_asked_is_not_scanned_for_it() -> None:
    table = JobTable(memory=lambda path, uid: pytest.fail("scanned"))
    _, fut = _job(table, "a", Path("/nowhere/a"), duration_ms=300)
    assert table.hand_over(ME) is not None
    table.tick(_never, _landed)
    assert fut.result(timeout=1).notes == {}


def test_memory_events_are_found_in_a_trace_file(tmp_path: Path) -> None:
    with_mem = tmp_path / "m.json"
    with_mem.write_text('{"traceEvents": [{"ph": "i", "name": "[memory]", "args": {"Bytes": 4}}]}')
    without = tmp_path / "n.json"
    without.write_text('{"traceEvents": [{"ph": "X", "name": "aten::mm", "args": {"memory": 1}}]}')
    assert shows_memory_events(str(with_mem), os.geteuid()) is True
    assert shows_memory_events(str(without), os.geteuid()) is False
    assert shows_memory_events(str(tmp_path / "gone.json"), os.geteuid()) is None


def test_a_config_kineto_never_traces_fails_naming_the_empty_tmp_not_overload() -> None:
    table = JobTable()
    task, fut = _job(table, "a", Path("/nowhere/a"), duration_ms=500, profile_memory=True)
    for _ in range(3):  # handed, idle after its start; handed again (twice, with more lead), idle again
        assert table.hand_over(ME) is not None
        task.start_wall = time.time() - 0.3
    failed = table.hand_over(ME)
    assert failed is not None and failed[0] == ""
    with pytest.raises(TraceError) as err:
        fut.result(timeout=1)
    msg = str(err.value)
    assert "did not start the trace" in msg and "3 times" in msg
    assert f"wrote no /nowhere/a/trace_{ME}.json" in msg and f"trace_{ME}.json.tmp" in msg
    assert "did not run the config as an activity trace" in msg and "overloaded" not in msg


def test_a_dropped_common_start_still_asks_for_a_later_one() -> None:
    table = JobTable()
    task, fut = _job(table, "a", Path("/nowhere/a"), duration_ms=500, start_time_ms=int((time.time() + 3) * 1000))
    assert table.hand_over(ME) is not None
    task.start_wall = time.time() - 0.3
    assert table.hand_over(ME) is not None
    with pytest.raises(TraceError, match=r"trace_\d+\.json\.tmp.*ask again with a later common start"):
        fut.result(timeout=1)
