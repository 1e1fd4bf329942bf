"""End to end with a real PyTorch (CPU build) training loop polling our endpoint."""

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

from gpulens.ipc.errors import EndpointBusy, NotTraceable
from gpulens.ipc.kineto.endpoint import KinetoEndpoint
from gpulens.ipc.kineto.requests import TraceRequest, TraceState
from gpulens.ipc.kineto.service import LocalTraceService
from gpulens.ipc.kineto.untraceable import UntraceableKind
from tests.paths import KINETO_WORKLOAD

pytest.importorskip("torch", reason="needs the PyTorch CPU build (pip install torch==2.13.0)")
pytestmark = [pytest.mark.torch, pytest.mark.slow, pytest.mark.timeout(120)]
WORKLOAD = KINETO_WORKLOAD


def _start(tmp_path: Path, socket_dir: str | None, daemon: bool = True, job: str = "") -> subprocess.Popen[str]:
    cfg = tmp_path / "kineto.conf"
    cfg.write_text("ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS=1\n")  # poll every second: fast tests
    env = {k: v for k, v in os.environ.items() if not k.startswith("KINETO")}
    env["KINETO_CONFIG"] = str(cfg)
    if daemon:
        env["KINETO_USE_DAEMON"] = "1"
    if socket_dir:
        env["KINETO_IPC_SOCKET_DIR"] = socket_dir
    env.pop("SLURM_JOB_ID", None)
    if job:
        env["SLURM_JOB_ID"] = job  # libkineto sends it as the poll's job id
    proc = subprocess.Popen(
        [sys.executable, str(WORKLOAD), "--seconds", "60"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "READY"
    return proc


def _wait_polling(svc: LocalTraceService, pid: int, limit_s: float = 20) -> None:
    deadline = time.monotonic() + limit_s
    while pid not in svc.polling_pids():
        assert time.monotonic() < deadline, f"pid {pid} never polled: {svc.diagnose(pid)}"
        time.sleep(0.05)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A socket dir short enough for libkineto's client names (sun_path is 108 bytes)."""
    d = Path(tempfile.mkdtemp(prefix="gk", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def fs_service(short_dir: Path) -> Iterator[LocalTraceService]:
    svc = LocalTraceService(socket_dir=str(short_dir / "s"), use_dynolog=False)
    svc.start()
    yield svc
    svc.stop()


def _cpu_ops_of(path: str, pid: int) -> list[dict[str, object]]:
    raw = Path(path).read_bytes()
    if path.endswith(".gz"):
        raw = gzip.decompress(raw)
    doc = json.loads(raw)
    return [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op" and e.get("pid") == pid]


def test_duration_trace_through_socket_dir(tmp_path: Path, fs_service: LocalTraceService) -> None:
    proc = _start(tmp_path, fs_service.socket_dir)
    try:
        _wait_polling(fs_service, proc.pid)
        assert fs_service.diagnose(proc.pid) is None
        states: list[TraceState] = []
        fs_service.add_listener(lambda job: states.append(job.state))
        fut = fs_service.request_trace(TraceRequest(pids=(proc.pid,), duration_ms=500, timeout_s=30))
        result = fut.result(timeout=60)
        path = result.files[proc.pid]
        assert path.endswith(f"_{proc.pid}.json") and path.startswith("/tmp/gpulens-")
        ops = _cpu_ops_of(path, proc.pid)
        assert len(ops) > 10 and any(str(e["name"]).startswith("aten::") for e in ops)
        assert states[0] is TraceState.WAITING_FOR_POLL and states[-1] is TraceState.DONE
        assert TraceState.TRACING in states
        assert fs_service.jobs()[-1].state is TraceState.DONE
    finally:
        proc.kill()
        proc.wait()


def test_iteration_trace(tmp_path: Path, fs_service: LocalTraceService) -> None:
    proc = _start(tmp_path, fs_service.socket_dir)
    try:
        _wait_polling(fs_service, proc.pid)
        fut = fs_service.request_trace(
            TraceRequest(pids=(proc.pid,), duration_ms=None, iterations=3, timeout_s=30)
        )
        path = fut.result(timeout=60).files[proc.pid]
        assert _cpu_ops_of(path, proc.pid)
        # Iterations are counted by the optimizer-step hook: 3 SGD steps (one more or less
        # at the edges on a loaded machine), not a 500 ms duration fallback (dozens).
        doc = json.loads(Path(path).read_bytes())
        steps = [e for e in doc["traceEvents"] if e.get("name") == "Optimizer.step#SGD.step"]
        assert 2 <= len(steps) <= 4, len(steps)
    finally:
        proc.kill()
        proc.wait()


def test_job_request_traces_every_process_of_the_job(tmp_path: Path, fs_service: LocalTraceService) -> None:
    procs = [_start(tmp_path, fs_service.socket_dir, job="4711")]
    other = _start(tmp_path, fs_service.socket_dir, job="999")
    try:
        for p in [*procs, other]:
            _wait_polling(fs_service, p.pid)
        assert {p.job_id for p in fs_service.processes()} == {4711, 999}
        fut = fs_service.request_trace(TraceRequest(job_id=4711, duration_ms=300, timeout_s=30))
        files = fut.result(timeout=60).files
        assert set(files) == {p.pid for p in procs}
        for p in procs:
            assert _cpu_ops_of(files[p.pid], p.pid)
        with pytest.raises(NotTraceable, match="no process with job id 5"):
            fs_service.request_trace(TraceRequest(job_id=5)).result(timeout=5)
    finally:
        for p in [*procs, other]:
            p.kill()
            p.wait()


def test_abstract_name(tmp_path: Path) -> None:
    svc = LocalTraceService(socket_dir="", use_dynolog=False)
    try:
        svc.start()
    except EndpointBusy as err:
        pytest.skip(f"the abstract Kineto name is taken on this machine: {err}")
    proc = _start(tmp_path, None)
    try:
        _wait_polling(svc, proc.pid)
        fut = svc.request_trace(TraceRequest(pids=(proc.pid,), duration_ms=500, timeout_s=30))
        assert _cpu_ops_of(fut.result(timeout=60).files[proc.pid], proc.pid)
    finally:
        proc.kill()
        proc.wait()
        svc.stop()


def test_program_without_daemon_env_is_diagnosed(tmp_path: Path, fs_service: LocalTraceService) -> None:
    proc = _start(tmp_path, fs_service.socket_dir, daemon=False)
    try:
        reason = fs_service.diagnose(proc.pid)
        assert reason is not None and reason.kind is UntraceableKind.NO_DAEMON_ENV
        fut = fs_service.request_trace(TraceRequest(pids=(proc.pid,), duration_ms=500))
        with pytest.raises(NotTraceable) as err:
            fut.result(timeout=10)
        assert err.value.reasons == {proc.pid: reason}
    finally:
        proc.kill()
        proc.wait()


def test_socket_dir_mismatch_is_diagnosed(tmp_path: Path, fs_service: LocalTraceService) -> None:
    other = tmp_path / "elsewhere"
    proc = _start(tmp_path, str(other))
    try:
        reason = fs_service.diagnose(proc.pid)
        assert reason is not None and reason.kind is UntraceableKind.SOCKET_DIR_MISMATCH
        assert (reason.theirs, reason.serving) == (str(other), fs_service.socket_dir)
    finally:
        proc.kill()
        proc.wait()


def test_non_torch_process_is_diagnosed(tmp_path: Path, fs_service: LocalTraceService) -> None:
    env = dict(os.environ, KINETO_USE_DAEMON="1", KINETO_IPC_SOCKET_DIR=str(fs_service.socket_dir))
    proc = subprocess.Popen(["sleep", "30"], env=env)
    try:
        time.sleep(0.2)
        reason = fs_service.diagnose(proc.pid)
        assert reason is not None and reason.kind is UntraceableKind.NO_TORCH
    finally:
        proc.kill()
        proc.wait()


def test_cli_trace_end_to_end(tmp_path: Path, short_dir: Path) -> None:
    sock = short_dir / "c"
    sock.mkdir()  # the program's socket dir exists before it starts (as in real setups)
    proc = _start(tmp_path, str(sock))
    out = tmp_path / "out.json.gz"
    try:
        res = subprocess.run(
            [sys.executable, "-m", "gpulens", "trace", "--pid", str(proc.pid), "--duration-ms", "300",
             "--ipc-socket-dir", str(sock), "--timeout", "40", "-o", str(out)],
            capture_output=True, text=True, timeout=90,
        )
        assert res.returncode == 0, res.stderr
        assert str(out) in res.stdout
        assert _cpu_ops_of(str(out), proc.pid)
    finally:
        proc.kill()
        proc.wait()


def test_endpoint_busy_names_the_holder(short_dir: Path) -> None:
    ep = KinetoEndpoint(str(short_dir))
    ep.start()
    try:
        res = subprocess.run(
            [sys.executable, "-m", "gpulens", "trace", "--pid", "1", "--duration-ms", "100",
             "--ipc-socket-dir", str(short_dir)],
            capture_output=True, text=True, timeout=60,
        )
        assert res.returncode == 1 and "already taken by" in res.stderr
    finally:
        ep.stop()
