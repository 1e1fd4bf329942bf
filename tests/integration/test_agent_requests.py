"""Remote trace and profile requests through a real agent; results come back as files.

Over TCP these need the agent's token: without one a connection gets samples and history only.
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
from pathlib import Path

import pytest

from gpulens.ipc.errors import RequestFailed
from gpulens.ipc.request_schema import ProfileParams, TraceParams
from gpulens.sources.ask import ask
from gpulens.sources.stream.source import LinkOptions, StreamSource, tcp_target
from tests.fakes.agent_helpers import WAIT_S, AgentProc, EventLog, count_samples
from tests.paths import KINETO_WORKLOAD

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
WORKLOAD = KINETO_WORKLOAD


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A socket dir short enough for libkineto's client names (sun_path is 108 bytes)."""
    d = Path(tempfile.mkdtemp(prefix="ga", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _env(socket_dir: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KINETO")}
    env["KINETO_IPC_SOCKET_DIR"] = str(socket_dir)
    env.update(extra or {})
    return env


@pytest.mark.torch
def test_remote_trace_comes_back_as_a_file(gpulens_exe: str, tmp_path: Path, short_dir: Path) -> None:
    pytest.importorskip("torch", reason="needs the PyTorch CPU build")
    sock_dir = short_dir / "s"
    sock_dir.mkdir()
    agent = AgentProc(gpulens_exe, tmp_path, "tracer", extra=["--interval", "0.5", "--simulated-gpus", "0"],
                      trace=True, env=_env(sock_dir), token=True)
    cfg = tmp_path / "kineto.conf"
    cfg.write_text("ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS=1\n")
    work = subprocess.Popen(
        [sys.executable, str(WORKLOAD), "--seconds", "90"],
        env=_env(sock_dir, {"KINETO_USE_DAEMON": "1", "KINETO_CONFIG": str(cfg)}),
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    src = StreamSource([tcp_target(agent.address)], LinkOptions(download_dir=tmp_path / "dl", token=agent.token))
    log = EventLog()
    try:
        assert work.stdout is not None and work.stdout.readline().strip() == "READY"
        src.start(log)
        log.wait_for(lambda evs: count_samples("tracer")(evs) >= 1, what="agent up")
        time.sleep(2.5)  # let the workload poll the agent's endpoint once or twice
        fut = ask(src, "tracer", TraceParams(pids=(work.pid,), duration_ms=300, timeout_s=60), timeout_s=120)
        res = fut.result(timeout=150)
        name = res.answer.files[str(work.pid)]
        path = res.files[name]
        assert path.parent == tmp_path / "dl" and path.stat().st_size > 0
        raw = path.read_bytes()
        doc = json.loads(gzip.decompress(raw) if path.name.endswith(".gz") else raw)
        assert any(e.get("cat") == "cpu_op" for e in doc["traceEvents"])
    finally:
        src.stop()
        work.kill()
        work.wait()
        agent.stop()


def test_trace_and_profile_refused_with_reason_when_unavailable(gpulens_exe: str, tmp_path: Path) -> None:
    agent = AgentProc(gpulens_exe, tmp_path, "plain", extra=["--interval", "0.2", "--simulated-gpus", "0"])
    src = StreamSource([tcp_target(agent.address)])
    log = EventLog()
    src.start(log)
    try:
        log.wait_for(lambda evs: count_samples("plain")(evs) >= 1, what="agent up")
        with pytest.raises(RequestFailed, match="unsupported request kind 'trace'"):
            src.request("plain", TraceParams(pids=(os.getpid(),)), 30).result(timeout=WAIT_S)
        # Served, but not to a connection without the token.
        with pytest.raises(RequestFailed, match="not authenticated: requests other than history need --token-file"):
            src.request("plain", ProfileParams(pids=(os.getpid(),)), 30).result(timeout=WAIT_S)
    finally:
        src.stop()
        agent.stop()


def test_remote_profile_folded_file(gpulens_exe: str, tmp_path: Path) -> None:
    try:
        from gpulens.agent import pyspy  # noqa: F401
    except ImportError:
        pytest.skip("gpulens.agent.pyspy is not in this tree yet (flame helper)")
    busy = subprocess.Popen([sys.executable, "-c", "import time\nwhile True:\n    sum(range(10000)); time.sleep(0.001)"])
    agent = AgentProc(gpulens_exe, tmp_path, "prof", extra=["--interval", "0.5", "--simulated-gpus", "0"], token=True)
    src = StreamSource([tcp_target(agent.address)], LinkOptions(download_dir=tmp_path / "dl", token=agent.token))
    log = EventLog()
    src.start(log)
    try:
        log.wait_for(lambda evs: count_samples("prof")(evs) >= 1, what="agent up")
        try:
            res = src.request("prof", ProfileParams(pids=(busy.pid,), duration_s=1.0), 60).result(timeout=90)
        except RequestFailed as err:
            if "permission" in str(err).lower() or "ptrace" in str(err).lower():
                pytest.skip(f"py-spy cannot attach here: {err}")
            raise
        (path,) = res.files.values()
        text = path.read_text()
        assert text.strip() and all(line.rsplit(" ", 1)[1].isdigit() for line in text.splitlines())
    finally:
        src.stop()
        agent.stop()
        busy.kill()
        busy.wait()
