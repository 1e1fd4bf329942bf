"""How a traced process ended, what a job says about each of its pids (issue 32 items 5, 6, 7; no torch).

- a target that dies during its trace is said to have crashed (SIGSEGV), been
  killed or exited with a status, from its zombie's status (any owner) or the
  kernel's exit events (root), else honestly as unknown;
- a pid of a common-start request still busy with another trace when the start
  comes is reported as busy and the request's free pids are traced without
  waiting for it;
- the progress of a several-pid trace names each pid handed, not the first one
  again and again.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

import pytest

from gpulens.ipc.errors import NotTraceable
from gpulens.ipc.kineto import exits
from gpulens.ipc.kineto.exits import ExitEvents
from gpulens.ipc.kineto.jobs import JobTable, PidTask
from gpulens.ipc.kineto.jobstate import start_missed
from gpulens.ipc.kineto.jobtext import ended_during_trace
from gpulens.ipc.kineto.liveness import ProcIdentity, exited, how_it_ended, identity, zombie_status
from gpulens.ipc.kineto.outputs import FileProbe, TraceOutput
from gpulens.ipc.kineto.requests import TraceRequest, TraceResult, TraceState

ME = os.getpid()
CRASH_ON_LINE = "import os, signal, sys; sys.stdin.readline(); os.kill(os.getpid(), signal.SIGSEGV)"


def _task(pid: int, name: str) -> PidTask:
    out = TraceOutput(Path("/nowhere") / name, (0, 0), Path("/nowhere") / name / "trace.json", os.geteuid())
    return PidTask(pid=pid, config=f"config-{name}", output=out, ident=identity(pid))


def _add(table: JobTable, rid: str, pids: dict[int, str], **req: object) -> Future[TraceResult]:
    fut: Future[TraceResult] = Future()
    request = TraceRequest(pids=tuple(pids), **req)  # type: ignore[arg-type]
    table.add(rid, request, {pid: _task(pid, name) for pid, name in pids.items()}, fut)
    return fut


def _landed(*names: str) -> object:
    def probe(out: TraceOutput, pid: int, since: float) -> FileProbe:
        return FileProbe(path=str(out.log)) if out.directory.name in names else FileProbe()

    return probe


def _never(pid: int) -> str:
    raise AssertionError("no poll deadline passes in these tests")


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])


def _until(cond: Callable[[], object], what: str) -> None:
    deadline = time.monotonic() + 30
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


# -- how it ended ---------------------------------------------------------------------------------


def test_an_exit_status_is_worded_as_a_crash_a_kill_an_exit_or_unknown() -> None:
    assert how_it_ended(signal.SIGSEGV) == "crashed (SIGSEGV)"
    assert how_it_ended(signal.SIGABRT | 0x80) == "crashed (SIGABRT, core dumped)"
    assert how_it_ended(signal.SIGKILL) == "was killed (SIGKILL)"
    assert how_it_ended(3 << 8) == "exited (status 3)"
    assert how_it_ended(0) == "exited (status 0)"
    assert how_it_ended(None) == "exited"
    crashed = ended_during_trace(42, signal.SIGSEGV)
    assert crashed.startswith("process 42 crashed (SIGSEGV) during the trace")
    assert "returns while an on-demand trace runs" in crashed and "docs/tracing.md" in crashed
    unseen = ended_during_trace(42, None)
    assert unseen.startswith("process 42 exited during the trace (how, only its parent knows")
    assert "SIGSEGV" in unseen  # the likely cause is named, not claimed
    assert ended_during_trace(42, signal.SIGKILL) == "process 42 was killed (SIGKILL) during the trace"


def test_a_zombie_tells_its_status_until_its_parent_reaps_it(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", CRASH_ON_LINE], stdin=subprocess.PIPE)
    ident = identity(child.pid)
    try:
        assert zombie_status(child.pid, ident) is None  # alive
        assert child.stdin is not None
        child.stdin.write(b"\n")
        child.stdin.close()
        _until(lambda: exited(child.pid, ident), "the child never died")
        status = zombie_status(child.pid, ident)
        assert status is not None and status & 0x7F == signal.SIGSEGV
        assert ident is not None and zombie_status(child.pid, ProcIdentity(child.pid, ident.start_ticks + 1)) is None
    finally:
        assert child.wait(timeout=30) == -signal.SIGSEGV
    assert zombie_status(child.pid, ident) is None  # reaped: gone, nothing left to read
    # The field as the kernel writes it (52 fields; comm may hold spaces and parentheses).
    fake = tmp_path / "4242"
    fake.mkdir()
    rest = ["Z", *["0"] * 18, "777", *["0"] * 29, "139"]  # fields 3.., start time 22, exit code 52
    (fake / "stat").write_text("4242 (py (x) y) " + " ".join(rest) + "\n")
    assert zombie_status(4242, None, tmp_path) == 139
    assert zombie_status(4242, ProcIdentity(4242, 777), tmp_path) == 139
    assert zombie_status(4242, ProcIdentity(4242, 778), tmp_path) is None  # another process under that pid
    (fake / "stat").write_text("4242 (py) " + " ".join(["S", *rest[1:]]) + "\n")
    assert zombie_status(4242, None, tmp_path) is None  # running: no status yet


def test_a_target_that_crashes_mid_trace_is_said_to_have_crashed() -> None:
    child = subprocess.Popen([sys.executable, "-c", CRASH_ON_LINE], stdin=subprocess.PIPE)
    try:
        table = JobTable()
        fut = _add(table, "a", {child.pid: "a"})
        assert table.hand_over(child.pid) is not None
        assert child.stdin is not None
        child.stdin.write(b"\n")
        child.stdin.close()
        ident = identity(child.pid)
        _until(lambda: exited(child.pid, ident), "the child never died")
        table.tick(_never, _landed())  # type: ignore[arg-type]  # before its parent (this test) reaps it
        with pytest.raises(NotTraceable, match=rf"process {child.pid} crashed \(SIGSEGV[^)]*\) during the trace"):
            fut.result(timeout=1)
    finally:
        assert child.wait(timeout=30) == -signal.SIGSEGV


def test_the_kernels_exit_events_tell_how_a_reaped_child_ended() -> None:
    events = ExitEvents.open()
    if events is None:
        pytest.skip("the kernel's process events need root (CAP_NET_ADMIN) in the initial namespaces")
    try:
        crash = subprocess.Popen([sys.executable, "-c", CRASH_ON_LINE], stdin=subprocess.DEVNULL)
        three = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
        other = subprocess.Popen([sys.executable, "-c", "pass"])
        crash.wait(timeout=30), three.wait(timeout=30), other.wait(timeout=30)  # reaped: no zombie to read
        events.drain({crash.pid, three.pid})
        assert how_it_ended(events.status(crash.pid)) == "crashed (SIGSEGV)"
        assert how_it_ended(events.status(three.pid)) == "exited (status 3)"
        assert events.status(other.pid) is None  # not asked about: not kept
        events.forget(crash.pid)
        assert events.status(crash.pid) is None
    finally:
        events.close()


def test_exit_events_are_parsed_from_the_kernels_layout_only() -> None:
    def message(pid: int, tgid: int, code: int, what: int = exits.PROC_EVENT_EXIT) -> bytes:
        event = exits._EVENT.pack(what, 0, 0) + exits._EXIT.pack(pid, tgid, code, 17) + bytes(8)
        cn = exits._CN.pack(exits.CN_IDX_PROC, exits.CN_VAL_PROC, 0, 0, len(event), 0) + event
        return exits._NLMSG.pack(exits._NLMSG.size + len(cn), exits.NLMSG_DONE, 0, 0, 0) + cn

    assert exits._exits(message(10, 10, 11)) == [(10, 11)]
    assert exits._exits(message(11, 10, 11)) == []  # a thread of process 10, not the process
    assert exits._exits(message(10, 10, 0, what=0x00000001)) == []  # a fork event
    assert exits._exits(message(10, 10, 11) + message(12, 12, 3 << 8)) == [(10, 11), (12, 3 << 8)]
    assert exits._exits(message(10, 10, 11)[:30]) == []  # cut short
    assert exits._exits(b"\xff" * 64) == []


# -- a job's ranks at the common start --------------------------------------------------------------


def test_a_rank_busy_at_the_common_start_is_reported_and_the_free_rank_is_traced() -> None:
    free = _sleeper()
    try:
        table = JobTable()
        earlier = _add(table, "earlier", {ME: "earlier"})  # another request's trace of ME runs
        assert table.hand_over(ME) is not None
        start_ms = int((time.time() + 2.5) * 1000)
        job = _add(table, "job", {ME: "job-busy", free.pid: "job-free"}, duration_ms=300, start_time_ms=start_ms)
        handed = table.hand_over(free.pid)
        assert handed is not None and handed[0] == "config-job-free"
        table.tick(_never, _landed())  # type: ignore[arg-type]
        assert not job.done()
        request = TraceRequest(pids=(ME, free.pid), duration_ms=300, start_time_ms=start_ms)
        _until(lambda: start_missed(request), "the start never came")
        table.tick(_never, _landed("job-free"))  # type: ignore[arg-type]
        res = job.result(timeout=1)  # without waiting for the earlier trace of ME
        assert res.files == {free.pid: "/nowhere/job-free/trace.json"}
        assert f"process {ME} was still busy with trace earlier" in res.missing[ME]
        assert "the other processes were" in res.missing[ME] and "common start time passed" not in res.missing[ME]
        assert not earlier.done()
        table.tick(_never, _landed("earlier"))  # type: ignore[arg-type]
        assert earlier.result(timeout=1).files  # the earlier trace is unharmed
    finally:
        free.kill()
        free.wait()


def test_a_rank_whose_profiler_stays_busy_with_someone_elses_trace_says_so() -> None:
    table = JobTable()
    start_ms = int((time.time() + 3.0) * 1000)  # well over MIN_LEAD_S ahead at the hand-over, on a slow machine too
    job = _add(table, "job", {ME: "job"}, duration_ms=300, start_time_ms=start_ms)
    said = table.hand_over(ME, accepts=False)  # the poll says its profiler is busy (not our trace)
    assert said is not None and "busy with another trace" in said[1].detail
    _until(lambda: start_missed(TraceRequest(pids=(ME,), start_time_ms=start_ms)), "the start never came")
    table.tick(_never, _landed())  # type: ignore[arg-type]
    with pytest.raises(NotTraceable, match="profiler was busy with another trace \\(not gpulens'\\) when the common"):
        job.result(timeout=1)


# -- progress of several pids ----------------------------------------------------------------------


def test_the_progress_of_several_pids_names_each_pid_handed() -> None:
    kids = [_sleeper(), _sleeper()]
    try:
        pids = [ME, *(k.pid for k in kids)]
        table = JobTable()
        _add(table, "three", {p: f"t{p}" for p in pids}, duration_ms=300)
        details = []
        for pid in reversed(pids):
            handed = table.hand_over(pid)
            assert handed is not None and handed[1].state is TraceState.TRACING
            details.append(handed[1].detail)
        assert details[0].startswith(f"config handed to process {pids[2]} (2 more wait for their poll); tracing 300 ms")
        # named in the request's order
        assert details[1].startswith(f"config handed to processes {pids[1]}, {pids[2]} (1 more waits for its poll)")
        assert details[2].startswith(f"config handed to processes {pids[0]}, {pids[1]}, {pids[2]}; tracing")
        assert len(set(details)) == 3  # each line says something new
    finally:
        for k in kids:
            k.kill()
            k.wait()
