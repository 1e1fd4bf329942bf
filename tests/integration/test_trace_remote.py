"""``gpulens trace`` through an agent: ``--host`` over TCP, and the local agent that holds the Kineto name.

One real PyTorch training loop (``kineto_workload.py``, KINETO_USE_DAEMON=1,
a per-module KINETO_IPC_SOCKET_DIR, 1 s polls) and one real ``gpulens
agent --listen 127.0.0.1:0 --token-file F`` serving that socket dir are
shared by the tests of this module (torch takes seconds to start on a shared
machine). Over TCP a trace needs the token (docs/security.md).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpulens.ipc.errors import StreamError, StreamProblem
from gpulens.ipc.request_schema import TraceParams, TraceStatusParams
from gpulens.sources.ask import ask
from tests.fakes.agent_helpers import AgentProc
from tests.paths import KINETO_WORKLOAD

pytestmark = [pytest.mark.slow, pytest.mark.torch, pytest.mark.timeout(240)]
WORKLOAD = KINETO_WORKLOAD


@dataclass
class Setup:
    exe: str
    agent: AgentProc
    work: subprocess.Popen[str]
    sock_dir: Path
    env: dict[str, str]
    home: Path


def _env(socket_dir: Path, home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KINETO")}
    env["KINETO_IPC_SOCKET_DIR"] = str(socket_dir)
    env["HOME"] = str(home)  # downloads land under ~/.cache/gpulens/traces
    env.update(extra or {})
    return env


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    pytest.importorskip("torch", reason="needs the PyTorch CPU build")
    exe = Path(sys.executable).parent / "gpulens"
    if not exe.exists():
        pytest.skip(f"gpulens is not installed next to {sys.executable}")
    tmp = tmp_path_factory.mktemp("trace_remote")
    # libkineto's client socket names must fit in sun_path (108 bytes): keep the dir short.
    short = Path(tempfile.mkdtemp(prefix="gt", dir="/tmp"))
    sock_dir = short / "s"
    sock_dir.mkdir()
    env = _env(sock_dir, tmp)
    agent = AgentProc(str(exe), tmp, "tracer", extra=["--interval", "0.5", "--simulated-gpus", "0"],
                      trace=True, env=env, token=True)
    cfg = tmp / "kineto.conf"
    cfg.write_text("ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS=1\n")
    work = subprocess.Popen(
        [sys.executable, str(WORKLOAD), "--seconds", "200"],
        env=_env(sock_dir, tmp, {"KINETO_USE_DAEMON": "1", "KINETO_CONFIG": str(cfg)}),
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        assert work.stdout is not None and work.stdout.readline().strip() == "READY"
        yield Setup(str(exe), agent, work, sock_dir, env, tmp)
    finally:
        work.kill()
        work.wait()
        agent.stop()
        shutil.rmtree(short, ignore_errors=True)


def _trace(s: Setup, *args: str) -> subprocess.CompletedProcess[str]:
    tcp = "--host" in args and not args[args.index("--host") + 1].startswith("ssh:")
    token = ["--token-file", str(s.agent.token_file)] if tcp else []
    return subprocess.run(
        [s.exe, "trace", "--pid", str(s.work.pid), "--duration-ms", "500", "--timeout", "60", *token, *args],
        env=s.env, capture_output=True, text=True, timeout=180,
    )


def _cpu_ops(raw: bytes, pid: int) -> list[dict[str, object]]:
    doc = json.loads(raw)
    return [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op" and e.get("pid") == pid]


def test_trace_through_remote_agent_saves_gzip(setup: Setup, tmp_path: Path) -> None:
    out = tmp_path / "out.json.gz"
    proc = _trace(setup, "--host", setup.agent.address, "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(setup.work.pid), str(out.resolve())]
    raw = out.read_bytes()
    assert raw[:2] == b"\x1f\x8b", "-o NAME.gz must be gzip-compressed"
    assert _cpu_ops(gzip.decompress(raw), setup.work.pid)
    err = proc.stderr
    assert f"connecting to the agent at {setup.agent.address}" in err
    # Progress as the local path reports it, every state in order (the agent keeps them all).
    stages = ("waiting for poll:", "tracing:", "writing:", "trace: received ", f"writing {out}", "trace: done\n")
    marks = [err.find(m) for m in stages]
    assert -1 not in marks and marks == sorted(marks), err


def test_trace_uses_the_local_agent_holding_the_kineto_name(setup: Setup) -> None:
    proc = _trace(setup)  # no --host: the agent holds $KINETO_IPC_SOCKET_DIR/dynolog
    assert proc.returncode == 0, proc.stderr
    assert f"held by gpulens agent pid {setup.agent.proc.pid}" in proc.stderr
    marks = [proc.stderr.find(m) for m in ("requested:", "waiting for poll:", "tracing:", "writing:", "trace: received ")]
    assert -1 not in marks and marks == sorted(marks), proc.stderr
    pid_s, path_s = proc.stdout.split()
    path = Path(path_s)
    assert pid_s == str(setup.work.pid)
    assert path.is_relative_to(setup.home / ".cache" / "gpulens" / "traces"), path
    raw = path.read_bytes()
    assert _cpu_ops(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw, setup.work.pid)


def test_local_control_socket_checks_who_answers(setup: Setup, tmp_path: Path) -> None:
    from gpulens.sources.stream.local_agent import LocalAgentLink

    uid = os.geteuid()
    # The right agent pid: the handshake succeeds and trace is served.
    link = LocalAgentLink(str(setup.sock_dir), setup.agent.proc.pid, uid, tmp_path)
    try:
        assert "trace" in link.hello.caps and "trace_status" in link.hello.caps
        res = ask(link, "", TraceStatusParams(tag="nothing-here"), 10).result(timeout=15)
        assert res.answer.state == "unknown"
        with pytest.raises(Exception, match="tag must be"):  # a struct is checked at decode: the agent refuses
            link.request("", TraceStatusParams(tag="../x"), 10).result(timeout=15)
    finally:
        link.close()
    # Whoever answers must be the process that holds the Kineto name.
    with pytest.raises(StreamError) as err:
        LocalAgentLink(str(setup.sock_dir), os.getpid(), uid, tmp_path)
    assert err.value.problem is StreamProblem.NOT_THE_HOLDER
    # No agent serves another socket dir's control socket.
    with pytest.raises(StreamError) as err:
        LocalAgentLink(str(tmp_path), setup.agent.proc.pid, uid, tmp_path)
    assert err.value.problem is StreamProblem.NO_CONTROL_SOCKET


def test_bad_trace_params_are_refused_by_the_agent(setup: Setup) -> None:
    from gpulens.ipc.errors import RequestFailed
    from gpulens.sources.stream.link import LinkOptions
    from gpulens.sources.stream.source import StreamSource, tcp_target

    src = StreamSource([tcp_target(setup.agent.address)], LinkOptions(token=setup.agent.token))
    src.start(lambda _ev: None)
    try:
        deadline = time.monotonic() + 60
        while True:
            fut = src.request(setup.agent.address, TraceStatusParams(tag="t1"), 10)
            try:
                fut.result(timeout=15)
                break
            except RequestFailed as err:
                assert "not connected" in str(err) and time.monotonic() < deadline
                time.sleep(0.1)
        with pytest.raises(RequestFailed, match="tag must be"):
            params = TraceParams(pids=(setup.work.pid,), duration_ms=100, tag="x" * 65)
            src.request(setup.agent.address, params, 10).result(timeout=15)
    finally:
        src.stop()


def test_trace_over_ssh_reaches_the_agent_and_reports_why(setup: Setup, tmp_path: Path) -> None:
    """``--host ssh:NODE`` (ssh replaced by --ssh-command) runs ``gpulens agent --stdio``; that agent
    serves another socket dir than the workload polls, so the reason comes back, not a hang."""
    other = Path(tempfile.mkdtemp(prefix="go", dir="/tmp"))
    try:
        cmd = f"env KINETO_IPC_SOCKET_DIR={other} {setup.exe} agent --stdio --hostname {{host}} --simulated-gpus 0"
        proc = _trace(setup, "--host", "ssh:nodeA", "--ssh-command", cmd, "-o", str(tmp_path / "t.json"))
    finally:
        shutil.rmtree(other, ignore_errors=True)
    assert proc.returncode == 1, proc.stderr
    assert "connecting to the agent at ssh:nodeA" in proc.stderr
    assert f"trace failed: {setup.work.pid}: socket-dir mismatch" in proc.stderr, proc.stderr
    assert f"--ipc-socket-dir {setup.sock_dir}" in proc.stderr
    assert not (tmp_path / "t.json").exists()


def test_trace_host_without_agent_is_a_clear_error(tmp_path: Path) -> None:
    exe = Path(sys.executable).parent / "gpulens"
    proc = subprocess.run([str(exe), "trace", "--host", "127.0.0.1:9", "--pid", "1"],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "HOME": str(tmp_path)})
    assert proc.returncode == 1  # a host that cannot be reached is a failure, not a bad argument (--help)
    assert "no gpulens agent answered at 127.0.0.1:9" in proc.stderr
