"""Issue #33 item 3: TraceRequest.validate's refusals carry the field and the reason as values."""

from __future__ import annotations

import pickle
import time
from typing import Any

import pytest

from gpulens.core.errors import ConfigError, ConfigProblem
from gpulens.ipc.kineto.requests import (
    MAX_DURATION_MS,
    MAX_ITERATIONS,
    BadTraceRequest,
    TraceRequest,
)

OUT, CONFLICT = ConfigProblem.OUT_OF_RANGE, ConfigProblem.CONFLICT


@pytest.mark.parametrize(("fields", "where", "problem"), [
    ({"pids": ()}, "pids", CONFLICT),
    ({"pids": (1,), "job_id": 7}, "pids", CONFLICT),
    ({"pids": (0,)}, "pids", OUT),
    ({"pids": tuple(range(1, 1026))}, "pids", OUT),
    ({"pids": (1,), "duration_ms": None}, "duration_ms", CONFLICT),
    ({"pids": (1,), "iterations": 3}, "duration_ms", CONFLICT),
    ({"pids": (1,), "duration_ms": MAX_DURATION_MS + 1}, "duration_ms", OUT),
    ({"pids": (1,), "duration_ms": None, "iterations": MAX_ITERATIONS + 1}, "iterations", OUT),
    ({"pids": (1,), "warmup_s": -1}, "warmup_s", OUT),
    ({"pids": (1,), "timeout_s": 0}, "timeout_s", OUT),
    ({"pids": (1,), "duration_ms": None, "iterations": 2, "start_time_ms": 1}, "start_time_ms", CONFLICT),
    ({"pids": (1,), "start_time_ms": 1}, "start_time_ms", OUT),
])
def test_each_refusal_names_its_field_and_reason(fields: dict[str, object], where: str,
                                                 problem: ConfigProblem) -> None:
    args: dict[str, Any] = {"duration_ms": 500, **fields}
    with pytest.raises(BadTraceRequest) as info:
        TraceRequest(**args).validate()
    assert (info.value.where, info.value.problem) == (where, problem)
    assert isinstance(info.value, ValueError) and isinstance(info.value, ConfigError)  # callers catch either
    assert str(info.value).startswith(("give either", where))  # the sentence names the field


def test_a_valid_request_passes() -> None:
    TraceRequest(pids=(1,), duration_ms=500, start_time_ms=int(time.time() * 1000)).validate()


def test_a_refusal_pickles_as_itself() -> None:
    with pytest.raises(BadTraceRequest) as info:
        TraceRequest(pids=(1,), duration_ms=None).validate()
    again = pickle.loads(pickle.dumps(info.value))  # a worker process's error reaches the parent whole
    assert type(again) is BadTraceRequest and isinstance(again, ValueError)  # was a plain ConfigError
    assert (str(again), again.where, again.problem) == (str(info.value), "duration_ms", CONFLICT)
