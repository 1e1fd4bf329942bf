"""``trace_processes`` and ``job_key`` traces read the configured ``job_key_env``, not a fixed list."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpulens.agent.agent import Agent
from gpulens.ipc import stream
from gpulens.ipc.kineto.registry import PollingProcess
from gpulens.ipc.principal import peer
from tests.fakes.agent_helpers import RecordingConn
from tests.fakes.trace_service import FakeTraceService

ME = os.geteuid()



@pytest.fixture
def keyed() -> Iterator[subprocess.Popen[bytes]]:
    """A process whose job is named by a site-specific variable (and also a Slurm one, listed second)."""
    env = {**os.environ, "GL_SITE_RUN": "site-run-9", "SLURM_JOB_ID": "4242"}
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    deadline = time.monotonic() + 10  # until exec: a forked child shows its parent's environment
    while b"GL_SITE_RUN=" not in Path(f"/proc/{proc.pid}/environ").read_bytes() and time.monotonic() < deadline:
        time.sleep(0.02)
    yield proc
    proc.kill()
    proc.wait()


class _NoSampler:
    def sample(self) -> Any:
        raise RuntimeError("no samples here")

    def close(self) -> None:
        pass


def _agent(job_key_env: tuple[str, ...] | None, pid: int) -> Agent:
    agent = Agent(_NoSampler(), hostname="h", job_key_env=job_key_env)
    now = time.monotonic()
    agent.requests.trace_service = FakeTraceService(processes=[PollingProcess(pid, (1,), 0, ME, now, now, polls=2, interval_s=1.0)])
    return agent


def _ask(agent: Agent, kind: str, params: dict[str, Any]) -> stream.Response:
    conn = RecordingConn(peer(ME))
    agent.requests.submit(conn, stream.Request(id=1, kind=kind, params=params))
    return conn.response(1)


def test_trace_processes_reports_the_configured_variables_in_their_order(keyed: subprocess.Popen[bytes]) -> None:
    configured = _ask(_agent(("GL_SITE_RUN", "SLURM_JOB_ID"), keyed.pid), "trace_processes", {})
    assert configured.ok, configured.error
    assert configured.result["processes"][0]["job_keys"] == ["site-run-9", "4242"]
    only_site = _ask(_agent(("GL_SITE_RUN",), keyed.pid), "trace_processes", {})
    assert only_site.result["processes"][0]["job_keys"] == ["site-run-9"]
    default = _ask(_agent(None, keyed.pid), "trace_processes", {})  # the built-in list knows only Slurm's
    assert default.result["processes"][0]["job_keys"] == ["4242"]


def test_a_job_key_trace_finds_the_process_by_the_configured_variable(keyed: subprocess.Popen[bytes]) -> None:
    agent = _agent(("GL_SITE_RUN",), keyed.pid)
    res = _ask(agent, "trace", {"job_key": "site-run-9", "duration_ms": 100})
    assert res.ok, res.error
    svc = agent.requests.trace_service
    assert isinstance(svc, FakeTraceService) and svc.requests[0].pids == (keyed.pid,)
    # The same key under the default list is unknown, and the refusal names the variables read.
    other = _ask(_agent(None, keyed.pid), "trace", {"job_key": "site-run-9", "duration_ms": 100})
    assert not other.ok and "no process with job key 'site-run-9'" in other.error and "SLURM_JOB_ID" in other.error
