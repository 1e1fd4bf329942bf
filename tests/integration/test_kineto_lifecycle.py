"""Requests are never lost and failures are said at once (issue 11, section 2), with real PyTorch.

A second request for a pid whose trace runs is queued (never handed to
Kineto, which would drop it) and lands after the first; a target that exits
mid-trace fails long before the timeout; an iterations request to a program
that never steps an optimizer says so and is labelled as the duration trace
Kineto took; a wrapper's polling child and a forked worker's polling parent
are named.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest

from gpulens.commands.trace_children import ranks_of
from gpulens.ipc.errors import TraceError
from gpulens.ipc.kineto import kconfig
from gpulens.ipc.kineto.requests import TraceJob, TraceRequest, TraceResult, TraceState
from gpulens.ipc.kineto.service import LocalTraceService
from gpulens.ipc.kineto.untraceable import UntraceableKind
from tests.paths import KINETO_WORKLOAD

pytest.importorskip("torch", reason="needs the PyTorch CPU build (pip install torch==2.13.0)")
pytestmark = [pytest.mark.torch, pytest.mark.slow, pytest.mark.timeout(120)]


def _env(tmp_path: Path, sock: Path) -> dict[str, str]:
    cfg = tmp_path / "kineto.conf"
    cfg.write_text("ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS=1\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KINETO") and k != "SLURM_JOB_ID"}
    env.update(KINETO_CONFIG=str(cfg), KINETO_USE_DAEMON="1", KINETO_IPC_SOCKET_DIR=str(sock))
    return env


def _start(tmp_path: Path, sock: Path, *flags: str, wrapper: bool = False) -> tuple[subprocess.Popen[str], dict[str, str]]:
    argv = [sys.executable, str(KINETO_WORKLOAD), "--seconds", "60", *flags]
    if wrapper:  # a shell that stays the parent (no exec): like a job script
        argv = ["/bin/sh", "-c", " ".join(argv) + "; true"]
    proc = subprocess.Popen(argv, env=_env(tmp_path, sock), stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    lines: dict[str, str] = {}
    for line in proc.stdout:
        key, _, value = line.strip().partition(" ")
        lines[key] = value
        if key == "READY":
            return proc, lines
    raise AssertionError("the workload ended before READY")


def _torch_version() -> str:
    import torch

    return str(torch.__version__)


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.wait()


def _wait_polling(svc: LocalTraceService, pid: int) -> None:
    deadline = time.monotonic() + 30
    while pid not in svc.polling_pids():
        assert time.monotonic() < deadline, f"pid {pid} never polled: {svc.diagnose(pid)}"
        time.sleep(0.05)


def _polling_child(svc: LocalTraceService, parent: int) -> int:
    """The rank ``gpulens trace --children`` finds below ``parent`` (which does not poll itself)."""
    deadline = time.monotonic() + 30
    while not (ranks := ranks_of(parent, {p.pid: p.ancestors for p in svc.processes()})):
        assert time.monotonic() < deadline, "the wrapper's child never polled"
        time.sleep(0.05)
    (child,) = ranks
    return child


@pytest.fixture
def svc(monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalTraceService]:
    from gpulens.ipc.kineto import outputs

    # A base of the test's own: gpulens commands run by other tests meanwhile prune /tmp/gpulens-<euid>.
    base = f"gpulens-{os.geteuid()}-t{os.getpid()}"
    monkeypatch.setattr(outputs, "_fallback_base", base)
    d = Path(tempfile.mkdtemp(prefix="gq", dir="/tmp"))
    service = LocalTraceService(socket_dir=str(d / "s"), use_dynolog=False)
    service.start()
    yield service
    service.stop()
    shutil.rmtree(d, ignore_errors=True)
    shutil.rmtree(Path("/tmp") / base, ignore_errors=True)


def test_second_request_is_queued_and_lands_after_the_first(tmp_path: Path, svc: LocalTraceService) -> None:
    assert svc.socket_dir is not None
    proc, _ = _start(tmp_path, Path(svc.socket_dir))
    seen: list[TraceJob] = []
    svc.add_listener(seen.append)
    try:
        _wait_polling(svc, proc.pid)
        first = svc.request_trace(TraceRequest(pids=(proc.pid,), duration_ms=1500, timeout_s=40))
        second = svc.request_trace(TraceRequest(pids=(proc.pid,), duration_ms=300, timeout_s=40))
        a, b = first.result(timeout=60), second.result(timeout=60)
    finally:
        _stop(proc)
    assert a.files[proc.pid] != b.files[proc.pid]
    for res in (a, b):
        assert Path(res.files[proc.pid]).stat().st_size > 0
    states = [(j.request_id, j.state) for j in seen]
    assert (b.request_id, TraceState.QUEUED) in states
    queued = next(j for j in seen if j.request_id == b.request_id and j.state is TraceState.QUEUED)
    assert a.request_id in queued.detail
    # The second config was handed over only after the first trace's file landed.
    a_done = states.index((a.request_id, TraceState.DONE))
    assert states.index((b.request_id, TraceState.TRACING)) > a_done
    assert Path(b.files[proc.pid]).stat().st_mtime >= Path(a.files[proc.pid]).stat().st_mtime


def test_a_target_that_exits_mid_trace_fails_at_once(tmp_path: Path, svc: LocalTraceService) -> None:
    assert svc.socket_dir is not None
    proc, _ = _start(tmp_path, Path(svc.socket_dir))
    tracing: Future[None] = Future()

    def on_job(job: TraceJob) -> None:
        if job.state is TraceState.TRACING and not tracing.done():
            tracing.set_result(None)

    svc.add_listener(on_job)
    try:
        _wait_polling(svc, proc.pid)
        fut = svc.request_trace(TraceRequest(pids=(proc.pid,), duration_ms=20_000, timeout_s=120))
        tracing.result(timeout=30)
    finally:
        _stop(proc)
    # Well before the 20 s trace or the 120 s timeout could have ended it. Reaped at once by its parent (this
    # test): the kernel's exit event says SIGKILL where gpulens may listen to it (root), else nobody tells.
    with pytest.raises(TraceError, match=rf"process {proc.pid} (was killed \(SIGKILL\)|exited) during the trace"):
        fut.result(timeout=15)


def test_a_target_that_returns_mid_trace_crashed_and_is_said_to(tmp_path: Path, svc: LocalTraceService) -> None:
    """torch 2.13: a program returning from main while an on-demand trace runs dies of SIGSEGV inside
    torch/Kineto (issue 32 item 7). gpulens says "crashed (SIGSEGV)", not only "exited". This test is the
    program's parent and reaps it only after the report, as torchrun's agent (polling its children) does:
    gpulens reads the zombie's status (or, as root, the kernel's exit event)."""
    assert svc.socket_dir is not None
    stop = tmp_path / "return-now"
    proc, _ = _start(tmp_path, Path(svc.socket_dir), "--until", str(stop))
    tracing: Future[None] = Future()

    def on_job(job: TraceJob) -> None:
        if job.state is TraceState.TRACING and not tracing.done():
            tracing.set_result(None)

    svc.add_listener(on_job)
    try:
        _wait_polling(svc, proc.pid)
        fut = svc.request_trace(TraceRequest(pids=(proc.pid,), duration_ms=20_000, timeout_s=120))
        tracing.result(timeout=30)
        time.sleep(kconfig.PICKUP_S + 2.0)  # past the start the config was handed with: the window is open
        stop.touch()  # the program returns from main, with its trace running
        with pytest.raises(TraceError) as failed:
            fut.result(timeout=60)
        code = proc.wait(timeout=60)  # reaped only now
    finally:
        if proc.returncode is None:
            _stop(proc)
    assert code == -signal.SIGSEGV, f"torch {_torch_version()} no longer crashes here: update docs/tracing.md"
    said = str(failed.value)
    assert f"process {proc.pid} crashed (SIGSEGV" in said and "during the trace" in said, said
    assert "docs/tracing.md" in said


def test_iterations_to_a_program_that_never_steps_are_labelled(tmp_path: Path, svc: LocalTraceService) -> None:
    assert svc.socket_dir is not None
    proc, _ = _start(tmp_path, Path(svc.socket_dir), "--no-step")
    seen: list[TraceJob] = []
    svc.add_listener(seen.append)
    try:
        _wait_polling(svc, proc.pid)
        res: TraceResult = svc.request_trace(
            TraceRequest(pids=(proc.pid,), duration_ms=None, iterations=3, timeout_s=40)
        ).result(timeout=60)
    finally:
        _stop(proc)
    tracing = [j.detail for j in seen if j.state is TraceState.TRACING]
    assert tracing and all("else 500 ms" in d for d in tracing)  # said before the file came
    assert "not 3 iterations" in res.notes[proc.pid]
    assert b"Optimizer.step#" not in Path(res.files[proc.pid]).read_bytes()
    assert svc.has_stepped(proc.pid) is False


def test_stepping_program_is_learned_from_its_trace(tmp_path: Path, svc: LocalTraceService) -> None:
    assert svc.socket_dir is not None
    proc, _ = _start(tmp_path, Path(svc.socket_dir))
    try:
        _wait_polling(svc, proc.pid)
        res = svc.request_trace(TraceRequest(pids=(proc.pid,), duration_ms=None, iterations=2, timeout_s=40)).result(
            timeout=60
        )
    finally:
        _stop(proc)
    assert proc.pid not in res.notes
    assert b"Optimizer.step#" in Path(res.files[proc.pid]).read_bytes()
    assert svc.has_stepped(proc.pid) is True


def test_wrapper_is_offered_its_polling_child(tmp_path: Path, svc: LocalTraceService) -> None:
    assert svc.socket_dir is not None
    proc, _ = _start(tmp_path, Path(svc.socket_dir), wrapper=True)
    try:
        child = _polling_child(svc, proc.pid)
        why = svc.diagnose(proc.pid)
        with pytest.raises(TraceError) as err:
            svc.request_trace(TraceRequest(pids=(proc.pid,))).result(timeout=10)
    finally:
        _stop(proc)
    assert why is not None and why.kind is UntraceableKind.DESCENDANTS_POLL and why.pids == (child,)
    assert str(child) in str(err.value)


def test_forked_worker_is_told_why_it_never_polls(tmp_path: Path, svc: LocalTraceService) -> None:
    assert svc.socket_dir is not None
    proc, lines = _start(tmp_path, Path(svc.socket_dir), "--fork-worker")
    worker = int(lines["WORKER"])
    try:
        _wait_polling(svc, proc.pid)
        why = svc.diagnose(worker)
    finally:
        os.kill(worker, 9)
        _stop(proc)
    assert why is not None and why.kind is UntraceableKind.FORKED_AFTER_INIT and why.parent == proc.pid


def test_cli_children_traces_the_wrappers_polling_child(tmp_path: Path) -> None:
    d = Path(tempfile.mkdtemp(prefix="gc", dir="/tmp"))
    sock = d / "s"
    sock.mkdir()
    proc, _ = _start(tmp_path, sock, wrapper=True)
    try:
        res = subprocess.run(
            [sys.executable, "-m", "gpulens", "trace", "--pid", str(proc.pid), "--children", "--duration-ms", "300",
             "--ipc-socket-dir", str(sock), "--timeout", "40", "-o", str(tmp_path / "t.json")],
            capture_output=True, text=True, timeout=120, env={**os.environ, "GPULENS_NO_PRUNE": "1"},
        )
    finally:
        _stop(proc)
        shutil.rmtree(d, ignore_errors=True)
    assert res.returncode == 0, res.stderr
    [line] = res.stdout.splitlines()
    child, path = line.split()
    assert int(child) != proc.pid and f"tracing {child}" in res.stderr
    assert b'"cat": "cpu_op"' in Path(path).read_bytes()
