"""``trace_processes`` and ``job_key``: what the agent tells a viewer about its pollers, per principal."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from gpulens.agent.requests import RequestRunner
from gpulens.ipc import stream
from gpulens.ipc.kineto.registry import PollingProcess
from gpulens.ipc.principal import peer
from tests.fakes.agent_helpers import RecordingConn
from tests.fakes.trace_service import FakeTraceService

ME = os.geteuid()
STRANGER = 424242



@pytest.fixture
def ranked() -> Iterator[subprocess.Popen[bytes]]:
    """A process of ours with a torchrun run id and a rank in its environment."""
    env = {**os.environ, "TORCHELASTIC_RUN_ID": "run7", "RANK": "3"}
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    yield proc
    proc.kill()
    proc.wait()


def _ask(runner: RequestRunner, principal: Any, kind: str, params: dict[str, Any]) -> stream.Response:
    conn = RecordingConn(peer(principal))
    runner.submit(conn, stream.Request(id=1, kind=kind, params=params))
    return conn.response(1)


def test_trace_processes_lists_what_the_principal_may_trace(ranked: subprocess.Popen[bytes]) -> None:
    now = time.monotonic()
    svc = FakeTraceService(processes=[PollingProcess(ranked.pid, (os.getpid(), 1), 0, ME, now, now, polls=3, interval_s=1.0, busy=True)])
    runner = RequestRunner(history=lambda a, b: [], hostname="h", trace_service=svc)
    assert "trace_processes" in runner.capabilities(peer(ME))
    mine = _ask(runner, ME, "trace_processes", {})
    assert mine.ok, mine.error
    [entry] = mine.result["processes"]
    assert entry == {"pid": ranked.pid, "ancestors": [os.getpid(), 1], "job_id": 0, "job_keys": ["run7"],
                     "rank": 3, "interval_s": 1.0, "busy": True}
    assert _ask(runner, STRANGER, "trace_processes", {}).result == {"processes": []}  # not theirs


def test_job_key_selects_the_job_of_that_run_id_only(ranked: subprocess.Popen[bytes]) -> None:
    now = time.monotonic()
    svc = FakeTraceService(processes=[PollingProcess(ranked.pid, (), 0, ME, now, now),
                                      PollingProcess(os.getpid(), (), 0, ME, now, now)])
    runner = RequestRunner(history=lambda a, b: [], hostname="h", trace_service=svc)
    res = _ask(runner, ME, "trace", {"job_key": "run7", "duration_ms": 100})
    assert res.ok, res.error
    assert svc.requests[-1].pids == (ranked.pid,)
    none = _ask(runner, ME, "trace", {"job_key": "other", "duration_ms": 100})
    assert not none.ok and "no process with job key 'other'" in str(none.error)
    bad = _ask(runner, ME, "trace", {"job_key": "../x", "duration_ms": 100})
    assert not bad.ok and "job_key must be" in str(bad.error)
    stranger = _ask(runner, STRANGER, "trace", {"job_key": "run7", "duration_ms": 100})
    assert not stranger.ok  # another user's job key names none of their processes
