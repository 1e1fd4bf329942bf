"""Why a task not handed over yet fails, as a value (ipc/kineto/jobwatch.py): code reads ``kind``,
the task's error is ``str(failure)``, the sentence it always was."""

from __future__ import annotations

import time

from gpulens.ipc.kineto.jobstate import PidTask
from gpulens.ipc.kineto.jobtext import ended_before_pickup, missed_common_start
from gpulens.ipc.kineto.jobwatch import Looked, PickupFailure, PickupKind, pickup_failure
from gpulens.ipc.kineto.requests import TraceRequest

PID = 4242


def _looked(gone: dict[int, int | None] | None = None, reasons: dict[int, str] | None = None) -> Looked:
    return Looked(gone or {}, reasons or {}, {}, {}, {})


def test_each_reason_has_its_kind_and_sentence() -> None:
    req = TraceRequest(pids=(PID,), duration_ms=500, timeout_s=30.0)
    now = time.monotonic()
    task = PidTask(pid=PID, config="")

    ended = pickup_failure(task, req, now, _looked(gone={PID: 9}))
    assert ended == PickupFailure(PickupKind.ENDED, PID, status=9)
    assert str(ended) == ended_before_pickup(PID, 9)

    late = pickup_failure(task, req, now, _looked(reasons={PID: f"process {PID} did not poll in time"}))
    assert late is not None and late.kind is PickupKind.NOT_POLLED
    assert str(late) == f"process {PID} did not poll in time"

    common = TraceRequest(pids=(PID,), duration_ms=500, start_time_ms=1)  # a common start long past
    missed = pickup_failure(task, common, now, _looked())
    assert missed is not None and missed.kind is PickupKind.START_MISSED
    assert str(missed) == missed_common_start(task, None)

    task.busy_since_s = now - 31.0
    busy = pickup_failure(task, req, now, _looked())
    assert busy is not None and busy.kind is PickupKind.STAYED_BUSY
    assert str(busy) == (f"process {PID}'s profiler stayed busy with another trace for 30 s; "
                         "the request was never handed over")


def test_a_task_that_may_still_be_picked_up_has_no_failure() -> None:
    task = PidTask(pid=PID, config="", busy_since_s=time.monotonic())
    assert pickup_failure(task, TraceRequest(pids=(PID,), duration_ms=500), time.monotonic(), _looked()) is None
