"""When Kineto starts and writes a trace, and what gpulens does about it (no torch needed).

- the start gpulens writes at hand-over (one profiler-loop tick ahead, not Kineto's two);
- a config Kineto dropped (an idle poll after the start) is handed again, or fails at once;
- the watch thread looks more often while a file is due;
- a file at the final name counts only once its JSON is closed: every prefix of real traces
  written by four generations of libkineto is refused, the whole file is taken.
"""

from __future__ import annotations

import gzip
import os
import re
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from gpulens.ipc.errors import TraceError
from gpulens.ipc.kineto import jobs, kconfig
from gpulens.ipc.kineto.jobs import DUE_TICK_S, JobTable, PidTask
from gpulens.ipc.kineto.liveness import identity
from gpulens.ipc.kineto.outputs import TraceOutput, final_paths, probe_trace_file
from gpulens.ipc.kineto.requests import (
    TraceRequest,
    TraceResult,
    TraceState,
    config_text,
    trace_complete,
)
from tests.paths import DATA

ME = os.getpid()
START = re.compile(r"^PROFILE_START_TIME=(\d+)$", re.MULTILINE)


def _start_of(text: str) -> float:
    found = START.search(text)
    assert found is not None, text
    return int(found.group(1)) / 1000


def _job(table: JobTable, rid: str, **req: Any) -> tuple[PidTask, Future[TraceResult]]:  # TraceRequest's fields
    request = TraceRequest(pids=(ME,), **req)
    out = TraceOutput(Path("/nowhere") / rid, (0, 0), Path("/nowhere") / rid / "trace.json", os.geteuid())
    task = PidTask(pid=ME, config=config_text(request, out.log, rid), output=out, ident=identity(ME))
    fut: Future[TraceResult] = Future()
    table.add(rid, request, {ME: task}, fut)
    return task, fut


# -- the start written at hand-over ---------------------------------------------------------------


def test_a_duration_config_starts_one_loop_tick_after_the_hand_over_not_kinetos_two() -> None:
    text = config_text(TraceRequest(pids=(1,), duration_ms=500), Path("/tmp/x.json"), "r")
    assert "PROFILE_START_TIME=0" in text.splitlines()  # valid as it is: Kineto's own start
    # Kineto's window opens when the target's profiler is enabled, after the start: asked a little longer.
    assert f"ACTIVITIES_DURATION_MSECS={500 + kconfig.DURATION_PAD_MS}" in text.splitlines()
    assert kconfig.DURATION_PAD_MS > 0
    now = time.time()
    for warmup in (0, 2):
        stamped, start = kconfig.stamp_start(text, now, warmup)
        assert start == _start_of(stamped)
        lead = start - now - warmup
        # Kineto's loop sees the config within one tick; its own default is two ticks after the parse.
        assert kconfig.CONTROLLER_TICK_S <= lead < kconfig.KINETO_DEFAULT_LEAD_S
        assert [x for x in stamped.splitlines() if not x.startswith("PROFILE_START_TIME=")] == [
            x for x in text.splitlines() if not x.startswith("PROFILE_START_TIME=")
        ]
    iters = config_text(TraceRequest(pids=(1,), duration_ms=None, iterations=3), Path("/tmp/x.json"), "r")
    assert kconfig.stamp_start(iters, now, 0) == (iters, None)
    common = int(now * 1000) + 5000
    fixed = config_text(TraceRequest(pids=(1,), start_time_ms=common), Path("/tmp/x.json"), "r")
    assert kconfig.stamp_start(fixed, now, 0) == (fixed, common / 1000)


def test_hand_over_writes_the_start_when_the_poll_comes() -> None:
    table = JobTable()
    _job(table, "a", duration_ms=500)
    time.sleep(0.05)  # the start follows the poll, not the request
    before = time.time()
    handed = table.hand_over(ME)
    took = time.time() - before  # the start is stamped inside: however slow the machine, within this call
    assert handed is not None and handed[1].state is TraceState.TRACING
    lead = _start_of(handed[0]) - before
    assert kconfig.PICKUP_S - 0.01 <= lead <= kconfig.PICKUP_S + took + 0.01


# -- a config Kineto dropped ----------------------------------------------------------------------


def test_an_idle_poll_after_the_start_hands_the_config_again_then_fails() -> None:
    table = JobTable()
    task, fut = _job(table, "a", duration_ms=500)
    first = table.hand_over(ME)
    assert first is not None
    assert table.hand_over(ME) is None  # idle before the start: Kineto has not activated it yet
    task.start_wall = time.time() - 0.3  # the start passed ...
    assert table.hand_over(ME, accepts=False) is None  # ... and Kineto is busy tracing: all is well
    again = table.hand_over(ME)  # ... but Kineto is idle: it dropped the config
    assert again is not None and again[0] and again[1].state is TraceState.TRACING
    assert _start_of(again[0]) >= time.time() + kconfig.CONTROLLER_TICK_S
    assert not fut.done()
    task.start_wall = time.time() - 0.3
    third = table.hand_over(ME)  # a loaded machine: once more, with more lead each time
    assert third is not None and third[0] and third[1].state is TraceState.TRACING
    assert _start_of(third[0]) >= time.time() + kconfig.PICKUP_S + 2 * jobs.REHAND_LEAD_S - 0.5
    task.start_wall = time.time() - 0.3
    failed = table.hand_over(ME)
    assert failed is not None and failed[0] == "" and failed[1].state is TraceState.FAILED
    with pytest.raises(TraceError, match="did not start the trace"):
        fut.result(timeout=1)


def test_an_idle_poll_once_the_file_is_due_hands_nothing() -> None:
    table = JobTable()
    task, fut = _job(table, "a", duration_ms=500)
    assert table.hand_over(ME) is not None
    task.start_wall = time.time() - kconfig.file_due_wall(0, 500) - 0.05  # written; not yet noticed
    assert table.hand_over(ME) is None and not fut.done()


def test_a_dropped_common_start_fails_at_once() -> None:
    table = JobTable()
    task, fut = _job(table, "a", duration_ms=500, start_time_ms=int((time.time() + 3) * 1000))
    handed = table.hand_over(ME)
    assert handed is not None and _start_of(handed[0]) == task.start_wall
    task.start_wall = time.time() - 0.3
    failed = table.hand_over(ME)
    assert failed is not None and failed[1].state is TraceState.FAILED
    with pytest.raises(TraceError, match="ask again with a later common start"):
        fut.result(timeout=1)


def test_a_common_start_less_than_one_loop_tick_ahead_is_not_handed() -> None:
    table = JobTable()
    tick = kconfig.CONTROLLER_TICK_S
    _job(table, "a", duration_ms=500, start_time_ms=int((time.time() + tick - 0.05) * 1000))
    assert table.hand_over(ME) is None  # Kineto would drop it: its loop may see it after the start
    table2 = JobTable()
    _job(table2, "b", duration_ms=500, start_time_ms=int((time.time() + tick + 0.5) * 1000), warmup_s=1.0)
    assert table2.hand_over(ME) is None  # the warm-up must fit too
    table3 = JobTable()
    # a second above the loop's tick, so that a slow machine's pause before hand_over cannot eat the lead
    _job(table3, "c", duration_ms=500, start_time_ms=int((time.time() + tick + 1.0) * 1000))
    assert table3.hand_over(ME) is not None


def test_the_watch_looks_often_only_while_a_file_is_due() -> None:
    table = JobTable()
    task, _ = _job(table, "a", duration_ms=500)
    assert table.watch_interval(0.1) == 0.1  # nothing handed
    assert table.hand_over(ME) is not None
    assert table.watch_interval(0.1) == 0.1  # the trace has not even started
    task.start_wall = time.time() - kconfig.file_due_wall(0, 500) + 0.05  # the file lands in 50 ms
    assert table.watch_interval(0.1) == DUE_TICK_S
    task.start_wall = time.time() - 30  # long overdue: back to the normal pace
    assert table.watch_interval(0.1) == 0.1


# -- a file still being written -------------------------------------------------------------------

KINETO_TRACES = [
    "traces/ddp_gloo/rank-0.json.gz",  # torch 2.13's libkineto: written to .tmp, renamed
    "traces/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",  # 2024: displayTimeUnit, baseTimeNanoseconds last
    "traces/benchmark_result_2869224_1695835535_trace.json.gz",  # 2023: traceName last, on its own line
    "traces/mi250_minitoy_train_ROCm6_2_kineto.json.gz",  # ROCm build, 2024
]


@pytest.mark.parametrize("name", KINETO_TRACES)
def test_only_the_whole_of_a_real_trace_counts_as_complete(name: str, tmp_path: Path) -> None:
    data = gzip.decompress((DATA / name).read_bytes())
    closed = len(data.rstrip())  # the independent rule: the top-level object's last brace is there
    cuts = sorted({*range(0, len(data), max(1, len(data) // 300)), *range(max(0, len(data) - 3000), len(data) + 1)})
    path = tmp_path / "t.json"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        written = 0
        for cut in cuts:  # the file as a writer appending to the final name leaves it at each point
            os.pwrite(fd, data[written:cut], written)
            written = cut
            os.ftruncate(fd, cut)
            assert trace_complete(fd, cut) is (cut >= closed), cut
    finally:
        os.close(fd)


def test_the_probe_waits_for_a_trace_written_in_place(tmp_path: Path) -> None:
    data = gzip.decompress((DATA / KINETO_TRACES[0]).read_bytes())
    st = os.stat(tmp_path)
    out = TraceOutput(tmp_path, (st.st_dev, st.st_ino), tmp_path / "trace.json", os.geteuid())
    final = final_paths(out.log, 4242)[0]
    since = time.time()
    final.write_bytes(b"")  # older libkineto opens the final name when the trace is activated
    assert probe_trace_file(out, 4242, since).path is None
    final.write_bytes(data[: len(data) // 2])
    got = probe_trace_file(out, 4242, since)
    assert got.path is None and got.note is not None and "still being written" in got.note
    final.write_bytes(data)
    assert probe_trace_file(out, 4242, since).path == str(final)
