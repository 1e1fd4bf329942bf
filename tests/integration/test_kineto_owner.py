"""One Kineto endpoint owner per host (issue 11, section 2), with real PyTorch.

Whichever gpulens binds the Kineto name first serves every other gpulens on
the host through its control socket: here a TUI-like process (the launcher's
in-process agent, ``gpulens.launch._trace_service`` on a LocalSource) holds
it, and ``gpulens trace --pid`` from another process still traces, through
it; a viewer started afterwards gets a trace service over the same control
socket. ``--demo``, ``--replay`` (and every other non-local source) never
bind this machine's endpoint.
"""

from __future__ import annotations

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

from gpulens.core.config import Config
from gpulens.ipc.kineto.endpoint import holder_of
from gpulens.launch import _trace_service
from gpulens.sources.demo import DemoSource
from gpulens.sources.local import MultiSource, Recorder
from gpulens.sources.replay import ReplaySource
from tests.paths import KINETO_WORKLOAD

OWNER = """
import sys, time
from gpulens.core.config import Config
from gpulens.launch import _trace_service
from gpulens.sources.local import LocalSource
service, error, release = _trace_service(LocalSource(Config(), lambda: None))
print("OWNER", error or service.address, flush=True)
sys.stdin.read()  # until the test closes our stdin
release()
"""


@pytest.fixture
def sock() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="go", dir="/tmp"))
    (d / "s").mkdir()
    yield d / "s"
    shutil.rmtree(d, ignore_errors=True)


def _env(sock: Path, tmp: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KINETO")}
    env.update(KINETO_IPC_SOCKET_DIR=str(sock), HOME=str(tmp), GPULENS_NO_PRUNE="1", **extra)
    return env


@pytest.mark.torch
@pytest.mark.slow
@pytest.mark.timeout(150)
def test_a_tui_holding_the_endpoint_serves_gpulens_trace(sock: Path, tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="needs the PyTorch CPU build (pip install torch==2.13.0)")
    owner = subprocess.Popen([sys.executable, "-c", OWNER], env=_env(sock, tmp_path), stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    cfg = tmp_path / "kineto.conf"
    cfg.write_text("ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS=1\n")
    work = subprocess.Popen([sys.executable, str(KINETO_WORKLOAD), "--seconds", "90"],
                            env=_env(sock, tmp_path, KINETO_USE_DAEMON="1", KINETO_CONFIG=str(cfg)),
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert owner.stdout is not None and work.stdout is not None
        assert owner.stdout.readline().strip() == f"OWNER {sock}/dynolog"
        held = holder_of(str(sock))
        assert held is not None and held[0] == owner.pid
        assert work.stdout.readline().strip() == "READY"
        out = tmp_path / "t.json"
        res = subprocess.run(
            [sys.executable, "-m", "gpulens", "trace", "--pid", str(work.pid), "--duration-ms", "300",
             "--ipc-socket-dir", str(sock), "--timeout", "40", "-o", str(out)],
            env=_env(sock, tmp_path), capture_output=True, text=True, timeout=120,
        )
        assert res.returncode == 0, res.stderr
        assert f"held by gpulens pid {owner.pid}; tracing through it" in res.stderr
        assert "already taken" not in res.stderr
        doc = json.loads(out.read_bytes())
        assert any(e.get("cat") == "cpu_op" and e.get("pid") == work.pid for e in doc["traceEvents"])
        # A viewer started now (the TUI after another gpulens) traces through the same owner.
        os.environ["KINETO_IPC_SOCKET_DIR"] = str(sock)
        try:
            from gpulens.sources.local import LocalSource

            service, error, release = _trace_service(LocalSource(Config(), lambda: None))  # type: ignore[arg-type, return-value]
        finally:
            del os.environ["KINETO_IPC_SOCKET_DIR"]
        try:
            assert error is None and service is not None
            deadline = time.monotonic() + 20
            while work.pid not in service.polling_pids():
                assert time.monotonic() < deadline, "the owner's polling set never reached the second viewer"
                time.sleep(0.2)
            assert service.diagnose(work.pid) is None
        finally:
            release()
    finally:
        work.kill()
        work.wait()
        assert owner.stdin is not None
        owner.stdin.close()
        owner.wait(timeout=30)


def test_demo_and_replay_never_bind_the_endpoint(sock: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KINETO_IPC_SOCKET_DIR", str(sock))
    recording = tmp_path / "r.gpulens"
    rec = Recorder(str(recording), "demo", simulated=True)
    for event in DemoSource(interval_s=1.0, live=False, backfill_s=2).history():  # a recording has samples
        rec.write(event)
    rec.close()
    sources: list[object] = [DemoSource(interval_s=1.0), ReplaySource(str(recording))]
    sources.append(MultiSource([DemoSource(interval_s=1.0)]))
    for source in sources:
        service, error, release = _trace_service(source)  # type: ignore[arg-type]
        release()
        assert service is None and error is not None and "this machine's processes" in error
        assert not (sock / "dynolog").exists()
        assert holder_of(str(sock)) is None


FOLLOWER = """
import sys, time
from gpulens.core.config import Config
from gpulens.launch import _trace_service
from gpulens.sources.local import LocalSource
service, error, release = _trace_service(LocalSource(Config(), lambda: None))
print("FOLLOWER", error or service.address, flush=True)
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    address = service.address  # what a screen asks each tick; the holder is looked at every 2 s
    if getattr(service, "state", "") == "local":
        from gpulens.ipc.kineto.endpoint import holder_of, resolve_socket_dir
        held = holder_of(resolve_socket_dir(None))
        print("LOCAL", held[0] if held else None, address, flush=True)
        break
    time.sleep(0.2)
else:
    print("STILL", getattr(service, "state", ""), address, flush=True)
release()
"""


def test_a_tui_that_followed_the_owner_takes_the_endpoint_when_it_exits(sock: Path, tmp_path: Path) -> None:
    # Issue 31, item 3: TUI B opened while TUI A ran; A quit; 75 s later B still traced through A.
    env = _env(sock, tmp_path)
    a = subprocess.Popen([sys.executable, "-c", OWNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         env=env)
    b: subprocess.Popen[str] | None = None
    try:
        assert a.stdout is not None and a.stdout.readline().startswith("OWNER")
        held = holder_of(str(sock))
        assert held is not None and held[0] == a.pid
        b = subprocess.Popen([sys.executable, "-c", FOLLOWER], stdout=subprocess.PIPE, text=True, env=env)
        assert b.stdout is not None
        first = b.stdout.readline()
        assert first.startswith("FOLLOWER") and f"pid {a.pid}" in first, first
        assert a.stdin is not None
        a.stdin.close()  # A quits
        a.wait(timeout=30)
        started = time.monotonic()
        line = b.stdout.readline()
        assert line.startswith(f"LOCAL {b.pid} "), line  # B holds the name itself now
        assert time.monotonic() - started < 15  # within a few of its 2 s looks, not never
    finally:
        for p in (a, b):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
