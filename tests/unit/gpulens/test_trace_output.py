"""What ``gpulens trace`` prints and waits for (issue 32 items 5 and 6), without torch.

- each progress line once, and a failure once (as the result, not also as progress);
- no "has not stepped" warning for a process nobody has traced yet (it may well step);
- ``--wait S`` bounds the wait for a job that has not started polling, a starting
  job's ranks are waited for until their set settles, and a busy rank is named.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from gpulens.cli import build_parser, main
from gpulens.commands import trace, trace_here, trace_job
from gpulens.commands.trace_common import JOB_WAIT_S, Progress
from gpulens.core.errors import ConfigError, ConfigProblem
from gpulens.core.events import RequestParams
from gpulens.ipc.kineto.requests import TraceRequest
from gpulens.ipc.request_schema import Poller, TraceProcessesAnswer
from tests.fakes.request_source import FakeAgent
from tests.fakes.trace_service import FakeTraceService


def _trace_parser() -> argparse.ArgumentParser:
    subparsers = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser: argparse.ArgumentParser = subparsers.choices["trace"]
    return parser


def test_progress_says_each_line_once_and_leaves_a_failure_to_the_result(capsys: pytest.CaptureFixture[str]) -> None:
    show = Progress("[h] ")
    for state, detail in [("waiting for poll", "x"), ("waiting for poll", "x"), ("tracing", "y"),
                          ("failed", "1: gone"), ("tracing", "y"), ("tracing", "z")]:
        show(state, detail)
    assert capsys.readouterr().err.splitlines() == [
        "gpulens trace: [h] waiting for poll: x", "gpulens trace: [h] tracing: y", "gpulens trace: [h] tracing: z"]


def test_a_failure_is_printed_once(capsys: pytest.CaptureFixture[str]) -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                               env={k: v for k, v in os.environ.items() if not k.startswith("KINETO")})
    sock = tempfile.mkdtemp(prefix="gto", dir="/tmp")
    try:
        code = main(["trace", "--pid", str(sleeper.pid), "--ipc-socket-dir", sock, "--timeout", "5"])
    finally:
        sleeper.kill()
        sleeper.wait()
        shutil.rmtree(sock, ignore_errors=True)
    err = capsys.readouterr().err
    assert code == 1
    failed = [line for line in err.splitlines() if "failed:" in line]
    assert len(failed) == 1 and "KINETO_USE_DAEMON is not set" in failed[0], err


@pytest.mark.parametrize(("stepped", "warned"), [(None, False), (True, False), (False, True)])
def test_a_process_is_said_not_to_step_only_when_its_last_trace_showed_no_step(
    stepped: bool | None, warned: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    args = argparse.Namespace(children=False, output=None)
    req = TraceRequest(pids=(4242,), duration_ms=None, iterations=3)
    svc = FakeTraceService(files="/tmp/x.json", stepped={} if stepped is None else {4242: stepped})
    assert trace_here.trace_with(svc, args, req) == 0  # type: ignore[arg-type]  # it names LocalTraceService
    out = capsys.readouterr()
    assert ("its last trace showed no optimizer.step()" in out.err) is warned
    assert "has not seen it step" not in out.err and out.out == "4242 /tmp/x.json\n"


def test_wait_is_a_documented_flag_for_job_and_children(capsys: pytest.CaptureFixture[str]) -> None:
    text = " ".join(_trace_parser().format_help().split())  # as printed, wrapped lines joined
    assert "--wait S" in text and f"--job, default {JOB_WAIT_S:g}" in text and "--children, default 30" in text
    assert _trace_parser().parse_args(["--job", "j", "--wait", "60"]).wait == 60.0
    with pytest.raises(SystemExit):
        _trace_parser().parse_args(["--job", "j", "--wait", "-1"])
    assert main(["trace", "--pid", "1", "--wait", "5"]) == 2  # a plain --pid: the trace waits for its poll itself
    with pytest.raises(ConfigError) as info:
        trace._run(_trace_parser().parse_args(["--pid", "1", "--wait", "5"]))
    assert (info.value.where, info.value.expected, info.value.problem) == (
        "--wait", "--job or --children", ConfigProblem.CONFLICT)


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def monotonic(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def _agent(clock: _Clock, first_s: float, ranks: int, busy: int | None = None) -> FakeAgent:
    """An agent whose job processes start polling late, one rank every 2 s from ``first_s``."""

    def pollers(host: str, params: RequestParams) -> TraceProcessesAnswer:
        started = 0 if clock.t < first_s else min(ranks, 1 + int((clock.t - first_s) // 2))
        return TraceProcessesAnswer(processes=tuple(
            Poller(pid=500 + r, job_keys=("jk",), rank=r, interval_s=1.0, busy=r == busy) for r in range(started)))

    return FakeAgent({"trace_processes": pollers})


def _host(agent: FakeAgent) -> trace_job._Host:
    return trace_job._Host("h", agent, "h", lambda: None)


def test_a_late_job_is_waited_for_until_its_ranks_settle_and_no_longer(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock()
    monkeypatch.setattr(trace_job, "time", clock)
    host = _host(_agent(clock, first_s=10.0, ranks=4))
    trace_job._discover([host], "jk", 60.0)
    assert sorted(host.ranks) == [500, 501, 502, 503]  # not only the first rank that polled
    assert 16.0 <= clock.t < 16.0 + 3.5  # the 4th polled at 16 s; the set then held for SETTLE_S
    clock.t = 0.0
    host = _host(_agent(clock, first_s=10.0, ranks=4))
    trace_job._discover([host], "jk", JOB_WAIT_S)
    assert host.ranks == {} and JOB_WAIT_S <= clock.t < JOB_WAIT_S + 0.5  # the default: given up at 8 s
    clock.t = 20.0
    host = _host(_agent(clock, first_s=0.0, ranks=2, busy=1))
    trace_job._discover([host], "jk", JOB_WAIT_S)
    assert clock.t == 20.0 and host.busy == [501]  # a job polling already: no wait at all


def test_a_job_nobody_polls_for_names_the_wait(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                                tmp_path: Path) -> None:
    clock = _Clock()
    monkeypatch.setattr(trace_job, "_open", lambda args, target: _host(_agent(clock, first_s=1e9, ranks=1)))
    monkeypatch.setattr(trace_job, "time", clock)
    args = argparse.Namespace(job="jk", output=str(tmp_path / "o"), wait=2.5, start_in=None)
    assert trace_job.run_job(args, TraceRequest(pids=(1,)), ["ssh:h"]) == 1
    err = capsys.readouterr().err
    assert "no polling process of this job on h within 2.5 s" in err and "--wait S" in err


def test_the_written_ranks_are_counted_and_the_busy_one_named_with_its_rank(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpulens.sources.tracing import Received

    src = tmp_path / "dl.json"
    src.write_text('{"traceEvents": []}')
    host = _host(_agent(_Clock(), 0.0, 2))
    host.ranks = {500: 0, 501: 1}
    host.got = Received(files={"501": ("501-t.json", src)},
                        missing={"500": "process 500 was still busy with trace r (another request) ..."}, named=1)
    (tmp_path / "out").mkdir()
    assert trace_job._write([host], tmp_path / "out") == 1
    out = capsys.readouterr()
    assert out.out.startswith("h 501 ") and (tmp_path / "out" / "rank1-h-501.json").exists()
    assert "[h] process 500 (rank 0): process 500 was still busy" in out.err
    assert "1 of 2 processes traced (their files are written)" in out.err
