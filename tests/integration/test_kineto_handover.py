"""A ``gpulens agent`` started after a local TUI took the Kineto endpoint (issue 11, section 2).

Whichever started first, the agent's remote viewers can trace on this host:
the TUI's in-process owner (``gpulens.launch._trace_service`` on a
LocalSource, run here in the test process) hands the endpoint over when the
agent asks, its own accepted traces (one running, one queued behind it)
still complete, and it traces through the agent from then on. An owner that
cannot hand over (``gpulens trace``'s, an older gpulens) keeps the name; the
agent serves without traces, says why, and takes the name once it is free.
Real parts: the PyTorch CPU build polling with KINETO_USE_DAEMON=1, a real
``gpulens agent --listen 127.0.0.1:0 --token-file F``, ``gpulens trace``
as its remote viewer.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpulens.core.config import Config
from gpulens.ipc.kineto.endpoint import holder_of
from gpulens.ipc.kineto.requests import TraceRequest, TraceState
from tests.fakes.agent_helpers import AgentProc
from tests.paths import KINETO_WORKLOAD

WAIT_S = 90.0


@pytest.fixture
def sock() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="gk", dir="/tmp"))  # short: libkineto's client names must fit sun_path
    (d / "s").mkdir()
    yield d / "s"
    shutil.rmtree(d, ignore_errors=True)


def _env(sock: Path, home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KINETO")}
    env.update(KINETO_IPC_SOCKET_DIR=str(sock), HOME=str(home), XDG_CONFIG_HOME=str(home / "cfg"),
               XDG_CACHE_HOME=str(home / "cache"), GPULENS_NO_PRUNE="1", **extra)
    return env


def _exe() -> str:
    exe = Path(sys.executable).parent / "gpulens"
    if not exe.exists():
        pytest.skip(f"gpulens is not installed next to {sys.executable}")
    return str(exe)


def _until(pred: Callable[[], bool], what: str, log: Path | None = None, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            tail = log.read_text()[-3000:] if log is not None and log.exists() else ""
            raise AssertionError(f"timed out waiting for {what}\n{tail}")
        time.sleep(0.1)


def _holder(sock: Path) -> int | None:
    held = holder_of(str(sock))
    return None if held is None else held[0]


def _cpu_ops(path: str | Path, pid: int) -> int:
    raw = Path(path).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        import gzip

        raw = gzip.decompress(raw)
    return sum(1 for e in json.loads(raw)["traceEvents"] if e.get("cat") == "cpu_op" and e.get("pid") == pid)


def _tui_owner(sock: Path, monkeypatch: pytest.MonkeyPatch, home: Path) -> tuple[object, Callable[[], None]]:
    """What the TUI runs for a LocalSource: the in-process owner, and its trace service."""
    from gpulens.launch import _trace_service
    from gpulens.sources.local import LocalSource

    monkeypatch.setenv("KINETO_IPC_SOCKET_DIR", str(sock))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "tui-cache"))
    service, error, release = _trace_service(LocalSource(Config(), lambda: None))  # type: ignore[arg-type, return-value, unused-ignore]
    assert error is None and service is not None, error
    assert _holder(sock) == os.getpid()
    return service, release


def test_an_agent_waits_for_an_owner_that_cannot_hand_over(sock: Path, tmp_path: Path) -> None:
    from gpulens.agent.agent import endpoint_owner

    own = endpoint_owner("here", str(sock))  # gpulens trace's owner: it never hands over
    agent: AgentProc | None = None
    try:
        agent = AgentProc(_exe(), tmp_path, "late", extra=["--claim-retry", "0.5", "--simulated-gpus", "0"],
                          trace=True, env=_env(sock, tmp_path))
        _until(lambda: "does not pass its endpoint on" in agent.log.read_text(), "the agent's reason", agent.log)
        log = agent.log.read_text()
        assert f"(pid {os.getpid()}, uid {os.geteuid()})" in log and "trying again every 0.5 s" in log
        assert "asking its holder to hand it over" in log
        assert _holder(sock) == os.getpid()  # kept: nothing was taken from it
        own.stop()
        _until(lambda: _holder(sock) == agent.proc.pid, "the agent to take the freed name", agent.log)
        _until(lambda: "local control socket at" in agent.log.read_text(), "its control socket", agent.log)
    finally:
        own.stop()
        if agent is not None:
            agent.stop()


@pytest.mark.torch
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_an_agent_started_after_a_tui_takes_the_endpoint_over(
    sock: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch", reason="needs the PyTorch CPU build (pip install torch==2.13.0)")
    exe = _exe()
    (tmp_path / "cfg" / "gpulens").mkdir(parents=True)
    # A site's own job variable, not one of the defaults: the agent's config decides.
    (tmp_path / "cfg" / "gpulens" / "config.toml").write_text('job_key_env = ["GL_SITE_RUN"]\n')
    kcfg = tmp_path / "kineto.conf"
    kcfg.write_text("ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS=1\n")
    service, release = _tui_owner(sock, monkeypatch, tmp_path)
    work = subprocess.Popen(
        [sys.executable, str(KINETO_WORKLOAD), "--seconds", "240"],
        env=_env(sock, tmp_path, KINETO_USE_DAEMON="1", KINETO_CONFIG=str(kcfg), GL_SITE_RUN="site-42", RANK="0"),
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    agent: AgentProc | None = None
    try:
        from gpulens.sources.owner_switch import HandoverTraceService

        assert isinstance(service, HandoverTraceService)
        assert work.stdout is not None and work.stdout.readline().strip() == "READY"
        _until(lambda: work.pid in service.polling_pids(), "the workload's first poll of the TUI's endpoint")
        # The TUI's own traces: one running, one queued behind it (same pid).
        first = service.request_trace(TraceRequest(pids=(work.pid,), duration_ms=2000, timeout_s=90))
        _until(lambda: any(j.state is TraceState.TRACING for j in service.jobs()), "the first trace to start")
        queued = service.request_trace(TraceRequest(pids=(work.pid,), duration_ms=300, timeout_s=90))
        assert [j.state for j in service.jobs()][-1] is TraceState.QUEUED
        agent = AgentProc(exe, tmp_path, "late", extra=["--claim-retry", "1", "--simulated-gpus", "0"],
                          trace=True, token=True, env=_env(sock, tmp_path))
        _until(lambda: _holder(sock) == agent.proc.pid, "the agent to hold the Kineto name", agent.log)
        # Nothing the TUI accepted was lost: both files landed where it planned them.
        for fut in (first, queued):
            res = fut.result(timeout=WAIT_S)
            assert _cpu_ops(res.files[work.pid], work.pid) > 0
        assert f"pid {os.getpid()} (uid {os.geteuid()}) passed its Kineto endpoint on" in agent.log.read_text()
        _until(lambda: service.state == "remote", "the TUI to trace through the agent")
        assert f"pid {agent.proc.pid}" in service.address
        # A remote viewer of the agent traces this host, as if the agent had been first.
        out = tmp_path / "viewer.json"
        res_v = subprocess.run(
            [exe, "trace", "--host", agent.address, "--token-file", str(agent.token_file), "--pid", str(work.pid),
             "--duration-ms", "300", "--timeout", "60", "-o", str(out)],
            env=_env(sock, tmp_path), capture_output=True, text=True, timeout=180,
        )
        assert res_v.returncode == 0, res_v.stderr + agent.log.read_text()[-2000:]
        assert _cpu_ops(out, work.pid) > 0
        # The TUI's next trace goes through the agent's control socket (a local copy comes back).
        later = service.request_trace(TraceRequest(pids=(work.pid,), duration_ms=300, timeout_s=60)).result(
            timeout=WAIT_S)
        assert _cpu_ops(later.files[work.pid], work.pid) > 0
        assert Path(later.files[work.pid]).is_relative_to(tmp_path / "tui-cache")
        # The whole-job path reads the agent's configured job variable (GL_SITE_RUN, not a default).
        jobdir = tmp_path / "job"
        res_j = subprocess.run(
            [exe, "trace", "--job", "site-42", "--hosts", agent.address, "--token-file", str(agent.token_file),
             "--duration-ms", "300", "--timeout", "60", "-o", str(jobdir)],
            env=_env(sock, tmp_path), capture_output=True, text=True, timeout=180,
        )
        assert res_j.returncode == 0, res_j.stderr
        [rank0] = list(jobdir.iterdir())
        assert rank0.name.startswith("rank0-") and _cpu_ops(rank0, work.pid) > 0
    finally:
        work.kill()
        work.wait()
        release()
        if agent is not None:
            agent.stop()


def _user_tui(user: object, sock: Path, home: Path) -> tuple[int, int, int]:
    """A TUI owner of ``user`` in a forked child (the venv's Python may not be the user's to run).

    It reports, one line each, its trace service's state and address: once it
    holds the name, whenever its state changes, until its stdin pipe closes.
    Returns (pid, fd reading the reports, fd to close to stop it).
    """
    # Imported here, as root: the user may not read the interpreter's own files.
    import gpulens.ipc.kineto.service
    import gpulens.sources.owner_switch
    import gpulens.sources.stream.control_trace
    import gpulens.sources.tracing  # noqa: F401
    from tests.fakes.security_helpers import demote

    rep_r, rep_w = os.pipe()
    stop_r, stop_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never returns into pytest
        try:
            os.close(rep_r)
            os.close(stop_w)
            demote(user)  # type: ignore[arg-type]
            from gpulens.agent.agent import endpoint_owner
            from gpulens.sources.owner_switch import HandoverTraceService

            own = endpoint_owner("here", str(sock))
            svc = HandoverTraceService(own.requests.trace_service, str(sock), download_dir=home,
                                       reclaim=own.reclaim_endpoint)
            own.allow_handover(svc.on_handover)
            os.set_blocking(stop_r, False)
            last = ""
            while True:
                svc.polling_pids()  # what the TUI's screens call: it follows the owner
                now = f"{svc.state}|{svc.address}|{svc.error}\n"
                if now != last:
                    os.write(rep_w, now.encode())
                    last = now
                try:
                    if os.read(stop_r, 1) == b"":
                        break
                except BlockingIOError:
                    pass
                time.sleep(0.1)
            svc.stop()
            own.stop()
        except BaseException as err:
            os.write(rep_w, f"error|{err!r}\n".encode())
        finally:
            os._exit(0)
    os.close(rep_w)
    os.close(stop_r)
    return pid, rep_r, stop_w


def _report(fd: int, pred: Callable[[str], bool], timeout: float = WAIT_S) -> str:
    import select

    deadline = time.monotonic() + timeout
    buf = b""
    seen: list[str] = []
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            data = os.read(fd, 4096)
            if not data:
                break
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                seen.append(line.decode())
                if pred(seen[-1]):
                    return seen[-1]
    raise AssertionError(f"no such report; seen: {seen}")


def test_a_users_tui_hands_over_to_roots_agent_and_takes_the_name_back(tmp_path: Path) -> None:
    from tests.fakes.security_helpers import _make_user, _remove_user, _why_no_users

    why = _why_no_users()
    if why is not None:
        pytest.skip(why)
    user = _make_user()
    d = Path(tempfile.mkdtemp(prefix="gu", dir="/tmp"))
    try:
        os.chmod(d, 0o755)
        sock = d / "s"
        sock.mkdir()
        # Root's and sticky like /tmp (a user's serving dir must be readable by her; root serves
        # only a dir of its own): the user's TUI binds there first, root's agent after it.
        os.chmod(sock, 0o1777)
        home = d / "home"
        home.mkdir()
        os.chown(home, user.uid, user.gid)
        pid, rep, stop = _user_tui(user, sock, home)
        agent: AgentProc | None = None
        try:
            _report(rep, lambda line: line.startswith("local|"))
            assert _holder(sock) == pid
            agent = AgentProc(_exe(), tmp_path, "root-agent", extra=["--claim-retry", "1", "--simulated-gpus", "0"],
                              trace=True, env=_env(sock, tmp_path))
            _until(lambda: _holder(sock) == agent.proc.pid, "root's agent to hold the name", agent.log)
            # The user cannot see which root process holds the name: it trusts root's control socket.
            line = _report(rep, lambda line: line.startswith("remote|"))
            assert f"pid {agent.proc.pid}" in line
            assert f"pid {pid} (uid {user.uid}) passed its Kineto endpoint on" in agent.log.read_text()
            agent.stop()  # the agent goes away: the user's TUI owns the endpoint again
            _report(rep, lambda line: line.startswith("local|"))
            _until(lambda: _holder(sock) == pid, "the TUI to take the name back")
        finally:
            os.close(stop)
            os.close(rep)
            os.waitpid(pid, 0)
            if agent is not None:
                agent.stop()
    finally:
        _remove_user(user)
        shutil.rmtree(d, ignore_errors=True)
