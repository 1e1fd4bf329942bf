"""A start just after the profiler loop's next tick, learned from the last trace (issue 32 item 8; no torch).

libkineto's profiler loop wakes at a trace's window end and ticks every second
from there; a process traced before takes its next start just after its next
tick instead of a whole pickup (1.2 s) after the hand-over. A start so placed
that Kineto drops all the same is handed again with the whole pickup.
"""

from __future__ import annotations

import os
import re
import time
from concurrent.futures import Future
from pathlib import Path

import pytest

from gpulens.ipc.kineto import jobs, kconfig
from gpulens.ipc.kineto.jobs import JobTable, PidTask
from gpulens.ipc.kineto.liveness import identity
from gpulens.ipc.kineto.outputs import FileProbe, TraceOutput
from gpulens.ipc.kineto.requests import TraceRequest, TraceResult, config_text

ME = os.getpid()
START = re.compile(r"^PROFILE_START_TIME=(\d+)$", re.MULTILINE)
TICK = kconfig.CONTROLLER_TICK_S


def _start_of(text: str) -> float:
    found = START.search(text)
    assert found is not None, text
    return int(found.group(1)) / 1000


def _job(table: JobTable, rid: str, **req: object) -> tuple[PidTask, Future[TraceResult]]:
    request = TraceRequest(pids=(ME,), **req)  # type: ignore[arg-type]
    out = TraceOutput(Path("/nowhere") / rid, (0, 0), Path("/nowhere") / rid / "trace.json", os.geteuid())
    task = PidTask(pid=ME, config=config_text(request, out.log, rid), output=out, ident=identity(ME))
    fut: Future[TraceResult] = Future()
    table.add(rid, request, {ME: task}, fut)
    return task, fut


def _landed(name: str) -> object:
    def probe(out: TraceOutput, pid: int, since: float) -> FileProbe:
        return FileProbe(path=str(out.log)) if out.directory.name == name else FileProbe()

    return probe


def _never(pid: int) -> str:
    raise AssertionError("no poll deadline passes in these tests")


def _traced_once(table: JobTable) -> float:
    """One 500 ms trace of this process handed and landed; the loop tick it teaches."""
    task, fut = _job(table, "first", duration_ms=500)
    handed = table.hand_over(ME)
    assert handed is not None and not task.on_tick  # nothing known yet: a whole pickup
    table.tick(_never, _landed("first"))  # type: ignore[arg-type]
    assert fut.result(timeout=1).files
    return kconfig.window_end_wall(_start_of(handed[0]), 500)


def test_the_next_tick_is_a_whole_number_of_ticks_after_a_known_one() -> None:
    assert kconfig.loop_tick_after(100.25, 100.25) == 100.25
    assert kconfig.loop_tick_after(100.25, 100.26) == pytest.approx(101.25)
    assert kconfig.loop_tick_after(100.25, 97.0) == pytest.approx(97.25)  # a tick known in the future works too
    text = config_text(TraceRequest(pids=(1,), duration_ms=500), Path("/tmp/x.json"), "r")
    stamped, start = kconfig.stamp_start(text, 1000.0, 2, tick_wall=990.55)
    # the first tick at least ARRIVAL_S after the hand-over (1000.55), + the warm-up, + the margin
    assert start == pytest.approx(1000.55 + 2 + kconfig.TICK_MARGIN_S, abs=0.002)
    assert start == _start_of(stamped)


def test_a_process_traced_before_starts_just_after_its_next_loop_tick() -> None:
    table = JobTable()
    tick = _traced_once(table)
    ident = identity(ME)
    assert ident is not None and table.ticks[(ME, ident.start_ticks)] == pytest.approx(tick)
    task, _ = _job(table, "second", duration_ms=500)
    before = time.time()
    handed = table.hand_over(ME)
    assert handed is not None and task.on_tick
    start = _start_of(handed[0])
    after_tick = start - kconfig.TICK_MARGIN_S
    ticks = (after_tick - tick) / TICK
    assert abs(ticks - round(ticks)) < 0.002  # on the loop's phase
    # The first tick the config can reach: never sooner than ARRIVAL_S, never a whole tick later.
    assert before + kconfig.ARRIVAL_S - 0.002 <= after_tick <= time.time() + kconfig.ARRIVAL_S + TICK
    # Kineto takes it at that tick: at least the warm-up (0) before the start, and within one tick of it.
    assert 0 < start - after_tick <= TICK


def test_a_start_on_a_predicted_tick_that_kineto_drops_is_handed_with_the_whole_pickup() -> None:
    table = JobTable()
    _traced_once(table)
    task, fut = _job(table, "second", duration_ms=500)
    assert table.hand_over(ME) is not None and task.on_tick
    task.start_wall = time.time() - 0.3  # the start passed and the profiler is idle: the tick was not there
    before = time.time()
    again = table.hand_over(ME)
    took = time.time() - before  # the start is stamped inside this call
    assert again is not None and again[0]
    lead = _start_of(again[0]) - before
    assert kconfig.PICKUP_S - 0.01 <= lead <= kconfig.PICKUP_S + took + 0.01  # no extra lead: the loop was not late
    assert not task.on_tick and task.rehanded == 0 and not table.ticks  # the tick is forgotten
    assert not fut.done()


def test_without_prediction_or_for_another_process_every_start_is_a_whole_pickup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    table = JobTable()
    _traced_once(table)
    monkeypatch.setattr(jobs, "PREDICT_TICKS", False)
    task, _ = _job(table, "second", duration_ms=500)
    before = time.time()
    handed = table.hand_over(ME)
    assert handed is not None and not task.on_tick
    assert _start_of(handed[0]) - before >= kconfig.PICKUP_S - 0.01
    monkeypatch.setattr(jobs, "PREDICT_TICKS", True)
    reused = JobTable()
    ident = identity(ME)
    assert ident is not None
    reused.ticks[(ME, ident.start_ticks + 1)] = time.time()  # the same pid, an earlier process
    other, _ = _job(reused, "third", duration_ms=500)
    assert reused.hand_over(ME) is not None and not other.on_tick


def test_iterations_and_common_starts_are_not_moved_and_a_common_start_still_teaches() -> None:
    table = JobTable()
    _traced_once(table)
    iters, _ = _job(table, "iters", duration_ms=None, iterations=2)
    handed = table.hand_over(ME)
    assert handed is not None and START.search(handed[0]) is None and not iters.on_tick
    table.tick(_never, _landed("iters"))  # type: ignore[arg-type]
    common = int((time.time() + 3) * 1000)
    task, fut = _job(table, "common", duration_ms=300, start_time_ms=common)
    handed = table.hand_over(ME)
    assert handed is not None and _start_of(handed[0]) == common / 1000 and not task.on_tick
    table.tick(_never, _landed("common"))  # type: ignore[arg-type]
    assert fut.result(timeout=1).files
    ident = identity(ME)
    assert ident is not None
    assert table.ticks[(ME, ident.start_ticks)] == pytest.approx(kconfig.window_end_wall(common / 1000, 300))
