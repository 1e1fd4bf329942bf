"""Issue 14, the agent's authority and limits: who asks decides, files are never followed, no user fills it.

Attacks by "another user of the node" run as throwaway users (``two_users``:
A is the victim, B the attacker) against a root agent; the rest run an
in-process :class:`Agent` over an in-memory transport, plus a few real
agent subprocesses for floods, RSS, thread counts and SIGTERM.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpulens.agent.agent import Agent
from gpulens.agent.listener import MAX_PENDING
from gpulens.agent.request_kinds import RequestError, send_file
from gpulens.agent.requests import MAX_HEAVY_PER_UID
from gpulens.agent.sessions import PREAUTH_FRAME_BYTES
from gpulens.collectors.synthetic import SyntheticSampler
from gpulens.ipc import auth, stream
from gpulens.ipc.control import ControlListener, control_name, describe_holder, who_holds
from gpulens.ipc.principal import NOT_AUTHENTICATED, Principal, owner, peer
from gpulens.ipc.refusal import NoSlot, NoSlotKind
from gpulens.ipc.stream_decode import FrameDecoder
from gpulens.ipc.transport import Transport
from tests.fakes import security_helpers
from tests.fakes.agent_helpers import (
    WAIT_S,
    AgentProc,
    BlockingProfiler,
    MemTransport,
    RawViewer,
    RecordingConn,
)
from tests.fakes.security_helpers import User, popen_as, run_as
from tests.fakes.trace_service import FakeTraceService, poller

two_users = security_helpers.two_users  # the fixture, visible to pytest in this module

pytestmark = pytest.mark.timeout(120)


# -- in-process agent -----------------------------------------------------------
@pytest.fixture
def agent() -> Iterator[Agent]:
    a = Agent(SyntheticSampler(hostname="sec", gpus=0, interval_s=0.1), hostname="sec", interval_s=0.1,
              history_s=60, token=auth.new_nonce())
    for _ in range(5):
        a.sample_once()
    a.requests.trace_service = FakeTraceService()
    yield a
    a.stop()


def _connect(agent: Agent, principal: Principal | None = None, kind: str = "tcp") -> MemTransport:
    t = MemTransport()
    threading.Thread(target=agent.serve_connection, args=(t, "mem"),
                     kwargs={"principal": principal, "kind": kind}, daemon=True).start()
    return t


def _handshake(t: MemTransport, token: bytes | None = None) -> stream.Hello:
    if token is not None:
        ch = t.until(stream.Challenge)
        c = auth.new_nonce()
        t.send(stream.AuthResponse(cnonce=c, mac=auth.viewer_proof(token, ch.nonce, c)))
        t.until(stream.AuthOk)
    hello: stream.Hello = t.until(stream.Hello)
    t.send(stream.Hello(proto=stream.PROTOCOL_VERSION, role="viewer"))
    return hello


def _ask(t: MemTransport, rid: int, kind: str, params: dict[str, Any]) -> stream.Response:
    t.send(stream.Request(id=rid, kind=kind, params=params))
    return t.response(rid)


def test_tcp_without_token_gets_samples_and_history_only(agent: Agent) -> None:
    agent.token = None
    t = _connect(agent)
    hello = _handshake(t)
    assert hello.caps == ("history",)
    asks: list[tuple[str, dict[str, Any]]] = [
        ("trace", {"pids": [os.getpid()]}), ("profile", {"pids": [os.getpid()]}),
        ("trace_diagnose", {"pids": [os.getpid()]}), ("trace_status", {"tag": "x"}),
    ]
    for rid, (kind, params) in enumerate(asks, start=1):
        res = _ask(t, rid, kind, params)
        assert not res.ok and res.error == NOT_AUTHENTICATED, (kind, res.error)
    svc = agent.requests.trace_service
    assert isinstance(svc, FakeTraceService) and svc.requests == []
    res = _ask(t, 9, "history", {"since": 0})
    assert res.ok and res.result["count"] == 5
    res = _ask(t, 10, "teleport", {})
    assert not res.ok and res.error.endswith("this agent serves: history")


def test_token_viewer_gets_the_owners_authority(agent: Agent) -> None:
    assert agent.token is not None
    t = _connect(agent)
    hello = _handshake(t, agent.token)
    assert {"history", "trace", "trace_status", "trace_diagnose"} <= set(hello.caps)
    res = _ask(t, 1, "trace_diagnose", {"pids": [1, os.getpid()]})  # root's agent: root's authority
    assert res.ok and res.result == {"reasons": {"1": None, str(os.getpid()): None}}


def test_request_before_the_token_is_an_auth_error(agent: Agent) -> None:
    t = _connect(agent)
    t.until(stream.Challenge)
    t.send(stream.Request(id=1, kind="trace", params={"pids": [1]}))
    err = t.until(stream.ErrorMsg)
    assert err.code == "auth" and "authentication required" in err.message
    assert t.next_msg() is None


def test_preauth_frames_are_small_and_the_limit_grows_after_hello(agent: Agent) -> None:
    t = _connect(agent)
    t.until(stream.Challenge)
    t.feed(struct.pack(">I", 1 << 20))  # declares 1 MiB before authenticating
    err = t.until(stream.ErrorMsg)
    assert err.code == "protocol" and f"the limit is {PREAUTH_FRAME_BYTES}" in err.message
    assert t.next_msg() is None
    t2 = _connect(agent)
    _handshake(t2, agent.token)
    res = _ask(t2, 1, "history", {"since": 0, "note": "x" * 100_000})  # 100 KB frame once admitted
    assert res.ok


def test_handshake_deadline_closes_a_silent_connection(agent: Agent, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpulens.agent import sessions as agent_conn
    monkeypatch.setattr(agent_conn, "HANDSHAKE_TIMEOUT_S", 0.3)
    t = _connect(agent)
    t.until(stream.Challenge)
    err = t.until(stream.ErrorMsg)
    assert err.code == "timeout"
    assert t.next_msg() is None


# -- files ---------------------------------------------------------------------------
def _send_in_thread(path: Path, owner_uid: int) -> tuple[RecordingConn, BaseException | None]:
    conn = RecordingConn()
    box: list[BaseException | None] = [None]

    def go() -> None:
        try:
            send_file(conn, 1, "t.json", path, owner=owner_uid)
        except BaseException as err:
            box[0] = err

    th = threading.Thread(target=go, daemon=True)
    th.start()
    th.join(timeout=10)
    assert not th.is_alive(), "the file sender blocked"
    return conn, box[0]


def test_symlink_fifo_and_foreign_files_are_refused(tmp_path: Path) -> None:
    link = tmp_path / "trace_1.json"
    link.symlink_to("/etc/shadow")
    conn, err = _send_in_thread(link, 0)
    assert isinstance(err, RequestError) and "symbolic link" in str(err) and not conn.frames
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    conn, err = _send_in_thread(fifo, os.geteuid())
    assert isinstance(err, RequestError) and "not a regular file" in str(err) and not conn.frames
    real = tmp_path / "real.json"
    real.write_bytes(b"{}" * 10)
    conn, err = _send_in_thread(real, os.geteuid() + 4242)
    assert isinstance(err, RequestError) and f"belongs to uid {os.geteuid()}" in str(err) and not conn.frames
    conn, err = _send_in_thread(real, os.geteuid())
    assert err is None
    chunks: list[stream.FileChunk] = []
    for m in (m for f in conn.frames for m in FrameDecoder().feed(f)):
        assert isinstance(m, stream.FileChunk), m
        chunks.append(m)
    assert b"".join(c.data for c in chunks) == b"{}" * 10 and chunks[-1].last


def test_trace_answer_with_a_planted_symlink_is_refused(agent: Agent, tmp_path: Path) -> None:
    link = tmp_path / "trace_1.json"
    link.symlink_to("/etc/shadow")
    agent.requests.trace_service = FakeTraceService(files={os.getpid(): str(link)})
    t = _connect(agent)
    _handshake(t, agent.token)
    t.send(stream.Request(id=1, kind="trace", params={"pids": [os.getpid()], "duration_ms": 100}))
    msgs: list[stream.Message | None] = []
    while not isinstance(msgs[-1] if msgs else None, stream.Response):
        msgs.append(t.next_msg())
    assert not any(isinstance(m, stream.FileChunk) for m in msgs)
    res = msgs[-1]
    assert isinstance(res, stream.Response) and not res.ok and "symbolic link" in res.error


# -- pool --------------------------------------------------------------------------------
def test_per_uid_limit_history_inline_and_stop_while_blocked(agent: Agent) -> None:
    prof = BlockingProfiler()
    agent.requests.profiler = lambda: prof
    try:
        me = _connect(agent, peer(os.geteuid()), kind="control")
        _handshake(me)
        for rid in range(1, MAX_HEAVY_PER_UID + 1):
            me.send(stream.Request(id=rid, kind="profile", params={"pids": [os.getpid()], "duration_s": 1}))
        for _ in range(MAX_HEAVY_PER_UID):
            assert prof.started.acquire(timeout=WAIT_S)
        res = _ask(me, 50, "profile", {"pids": [os.getpid()], "duration_s": 1})
        over = str(NoSlot(NoSlotKind.PER_UID, MAX_HEAVY_PER_UID, uid=os.geteuid()))
        assert not res.ok and res.error == over
        again = _connect(agent, peer(os.geteuid()), kind="control")  # a second connection of the same uid
        _handshake(again)
        res = _ask(again, 1, "profile", {"pids": [os.getpid()], "duration_s": 1})
        assert not res.ok and res.error == over
        # History never waits behind the blocked profiles.
        assert _ask(me, 51, "history", {"since": 0}).ok
        # Another user still gets a slot: its request starts (and fails the ownership check).
        other = _connect(agent, peer(424242), kind="control")
        _handshake(other)
        res = _ask(other, 1, "profile", {"pids": [os.getpid()], "duration_s": 1})
        assert not res.ok and "belongs to uid" in res.error
        assert agent.requests.running() == MAX_HEAVY_PER_UID
        t0 = time.monotonic()
        agent.stop()
        assert time.monotonic() - t0 < 5, "Agent.stop() waited for blocked requests"
    finally:
        prof.release.set()


# -- control socket ----------------------------------------------------------------
def test_control_name_holder_is_named(tmp_path: Path) -> None:
    name = control_name(str(tmp_path / "x"), os.geteuid())
    squat = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    squat.bind(name)
    try:
        held = who_holds(name)
        assert held is not None and held[:2] == (os.getpid(), os.geteuid())
        assert f"uid {os.geteuid()}" in describe_holder(name)
        listener = ControlListener(str(tmp_path / "x"), lambda *a: None)
        with pytest.raises(OSError):
            listener.start()
    finally:
        squat.close()
    assert who_holds(name) is None


def test_control_socket_caps_connections_per_uid(tmp_path: Path) -> None:
    from gpulens.ipc.control import MAX_PER_UID

    held = threading.Event()

    def hold(tr: Transport, p: str, pr: Principal) -> None:
        held.wait(30)

    listener = ControlListener(str(tmp_path / "cap"), hold)
    listener.start()
    socks = []
    try:
        for _ in range(MAX_PER_UID + 1):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(WAIT_S)
            s.connect(listener.name)
            socks.append(s)
        assert socks[-1].recv(1) == b"", "the connection over this uid's cap is closed at once"
        socks[0].setblocking(False)
        with pytest.raises(BlockingIOError):
            socks[0].recv(1)  # the ones within the cap are being served
    finally:
        held.set()
        for s in socks:
            s.close()
        listener.stop()


_CONTROL_ATTACK = r"""
import json, os, socket, sys
from gpulens.ipc import stream
from gpulens.ipc.stream_decode import FrameDecoder
from gpulens.ipc.control import control_name
name = control_name(sys.argv[1], 0)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(30)
s.connect(name)
dec = FrameDecoder()
pending = []
def nxt():
    while not pending:
        data = s.recv(65536)
        if not data:
            return None
        pending.extend(dec.feed(data))
    return pending.pop(0)
hello = nxt()
s.sendall(stream.encode(stream.Hello(proto=stream.PROTOCOL_VERSION, role="viewer")))
out = {"caps": list(hello.caps), "me": os.getpid()}
asks = json.loads(sys.argv[2])
asks.append(["own", "trace_diagnose", {"pids": [os.getpid()]}])
for rid, (label, kind, params) in enumerate(asks, start=1):
    s.sendall(stream.encode(stream.Request(id=rid, kind=kind, params=params)))
    while True:
        m = nxt()
        if isinstance(m, stream.Response) and m.id == rid:
            out[label] = {"ok": m.ok, "error": m.error, "result": m.result}
            break
print(json.dumps(out))
"""


def test_control_socket_user_acts_only_for_itself(two_users: tuple[User, User], tmp_path: Path) -> None:
    a_user, b_user = two_users
    victim = popen_as(a_user, ["sleep", "300"])
    ag = Agent(SyntheticSampler(hostname="ctl", gpus=0, interval_s=0.1), hostname="ctl", interval_s=0.1)
    ag.requests.trace_service = FakeTraceService(processes=[poller(victim.pid, job_id=7)])
    listener = ControlListener(str(tmp_path), lambda tr, p, pr: ag.serve_connection(tr, p, principal=pr,
                                                                                       kind="control"))
    listener.start()
    try:
        asks = [
            ["diag_a", "trace_diagnose", {"pids": [victim.pid]}],
            ["prof_a", "profile", {"pids": [victim.pid], "duration_s": 1}],
            ["trace_a", "trace", {"pids": [victim.pid], "duration_ms": 100}],
            ["trace_job", "trace", {"job_id": 7, "duration_ms": 100}],
            ["diag_agent", "trace_diagnose", {"pids": [os.getpid()]}],
        ]
        out = _run_attack(b_user, _CONTROL_ATTACK, str(tmp_path), json.dumps(asks))
        assert "trace" in out["caps"]
        for label, uid in (("diag_a", a_user.uid), ("prof_a", a_user.uid), ("trace_a", a_user.uid),
                           ("diag_agent", 0)):
            res = out[label]
            assert not res["ok"] and f"belongs to uid {uid}" in res["error"], (label, res)
            assert f"uid {b_user.uid} (control socket) may trace or profile only its own" in res["error"]
        assert not out["trace_job"]["ok"] and "no process of uid" in out["trace_job"]["error"]
        assert ag.requests.trace_service.requests == []
        assert out["own"] == {"ok": True, "error": "", "result": {"reasons": {str(out["me"]): None}}}
    finally:
        listener.stop()
        ag.stop()
        victim.kill()
        victim.wait()


def _run_attack(user: User, code: str, *args: str) -> dict[str, Any]:
    """Run ``code`` as ``user`` with ``args``; its last stdout line is JSON.

    ``setpriv`` execs this interpreter even when it lives under a directory
    the user cannot search (a pyenv in /root); ``run_as`` is the fallback.
    """
    import shutil

    if shutil.which("setpriv"):
        proc = subprocess.run(
            ["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups",
             sys.executable, "-c", code, *args],
            capture_output=True, text=True, timeout=90, cwd="/",
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/"}, check=False,
        )
    else:
        proc = run_as(user, f"import sys\nsys.argv = [''] + {list(args)!r}\n" + code, timeout=90)
    assert proc.returncode == 0, f"attacker failed: {proc.stderr[-2000:]}"
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


# -- real agents ---------------------------------------------------------------------
_TCP_ATTACK = r"""
import json, socket, sys
from gpulens.ipc import stream
from gpulens.ipc.stream_decode import FrameDecoder
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=30)
dec = FrameDecoder()
pending = []
def nxt():
    while not pending:
        data = s.recv(65536)
        if not data:
            return None
        pending.extend(dec.feed(data))
    return pending.pop(0)
hello = nxt()
s.sendall(stream.encode(stream.Hello(proto=stream.PROTOCOL_VERSION, role="viewer")))
out = {"caps": list(hello.caps)}
for rid, (label, kind, params) in enumerate(json.loads(sys.argv[2]), start=1):
    s.sendall(stream.encode(stream.Request(id=rid, kind=kind, params=params)))
    while True:
        m = nxt()
        if isinstance(m, stream.Response) and m.id == rid:
            out[label] = {"ok": m.ok, "error": m.error, "result": m.result}
            break
        if isinstance(m, stream.FileChunk):
            out.setdefault("chunks", 0)
            out["chunks"] += 1
print(json.dumps(out))
"""


def test_other_user_over_tcp_cannot_trace_or_profile_anyone(
    two_users: tuple[User, User], gpulens_exe: str, tmp_path: Path
) -> None:
    """Default flags (loopback, no token): user B may not trace/profile A's process or the agent itself."""
    a_user, b_user = two_users
    victim = popen_as(a_user, ["sleep", "300"])
    sock_dir = Path(tempfile.mkdtemp(prefix="gs", dir="/tmp"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("KINETO")}
    env["KINETO_IPC_SOCKET_DIR"] = str(sock_dir)
    agent = AgentProc(gpulens_exe, tmp_path, "root", extra=["--interval", "0.2", "--simulated-gpus", "0"],
                      trace=True, env=env)
    try:
        asks = []
        for target, pid in (("a", victim.pid), ("agent", agent.proc.pid)):
            asks += [
                [f"trace_{target}", "trace", {"pids": [pid], "duration_ms": 100, "timeout_s": 5}],
                [f"profile_{target}", "profile", {"pids": [pid], "duration_s": 1}],
                [f"diag_{target}", "trace_diagnose", {"pids": [pid]}],
            ]
        asks.append(["history", "history", {"since": 0}])
        out = _run_attack(b_user, _TCP_ATTACK, str(agent.port), json.dumps(asks))
        assert out["caps"] == ["history"]
        tracing = "Kineto endpoint serving" in agent.log.read_text()
        for label, res in out.items():
            if label in ("caps", "history"):
                continue
            assert not res["ok"], (label, res)
            if tracing or label.startswith("profile"):
                assert res["error"] == NOT_AUTHENTICATED, (label, res)
            else:  # the endpoint is held by someone else here: trace kinds are not served at all
                assert res["error"].startswith("unsupported request kind"), (label, res)
        assert "chunks" not in out
        assert out["history"]["ok"] and out["history"]["result"]["count"] >= 1
    finally:
        agent.stop()
        victim.kill()
        victim.wait()
        import shutil

        shutil.rmtree(sock_dir, ignore_errors=True)


def test_token_viewer_may_profile_another_users_process(two_users: tuple[User, User], agent: Agent) -> None:
    """Root's token holder acts for anyone: the ownership check passes (py-spy may still fail on ``sleep``)."""
    a_user, _ = two_users
    victim = popen_as(a_user, ["sleep", "300"])
    try:
        t = _connect(agent)
        hello = _handshake(t, agent.token)
        res = _ask(t, 1, "trace_diagnose", {"pids": [victim.pid]})
        assert res.ok, res.error
        if "profile" in hello.caps:
            res = _ask(t, 2, "profile", {"pids": [victim.pid], "duration_s": 1})
            assert res.ok or ("belongs to uid" not in res.error and NOT_AUTHENTICATED not in res.error), res.error
    finally:
        victim.kill()
        victim.wait()


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _tasks(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def _authed(port: int, token: bytes | None, tls_ca: Path | None = None) -> RawViewer:
    v = RawViewer(port)
    if tls_ca is not None:
        import ssl

        ctx = ssl.create_default_context(cafile=str(tls_ca))
        v.sock = ctx.wrap_socket(v.sock, server_hostname="127.0.0.1")
    if token is not None:
        ch = v.until(stream.Challenge)
        c = auth.new_nonce()
        v.send(stream.encode(stream.AuthResponse(cnonce=c, mac=auth.viewer_proof(token, ch.nonce, c))))
        v.until(stream.AuthOk)
    v.until(stream.Hello)
    v.send(stream.encode(stream.Hello(proto=stream.PROTOCOL_VERSION, role="viewer")))
    return v


def _cert(tmp_path: Path) -> tuple[Path, Path]:
    import shutil

    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not installed (needed to make a test certificate)")
    crt, key = tmp_path / "agent.crt", tmp_path / "agent.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=gpulens-test",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(crt)],
        check=True, capture_output=True, timeout=60,
    )
    return crt, key


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["token", "no-token", "tls"])
def test_unauthenticated_flood_never_locks_out_a_real_viewer(gpulens_exe: str, tmp_path: Path, mode: str) -> None:
    """64+ silent sockets (TLS never started, token never sent, hello never sent) and 16 MiB pre-auth frames."""
    with_token = mode != "no-token"
    crt: Path | None = None
    extra = ["--interval", "0.2", "--simulated-gpus", "1"]
    if mode == "tls":
        crt, key = _cert(tmp_path)
        extra += ["--tls-cert", str(crt), "--tls-key", str(key)]
    agent = AgentProc(gpulens_exe, tmp_path, "flood", extra=extra, token=with_token)
    flood: list[socket.socket] = []
    try:
        first = _authed(agent.port, agent.token, crt)
        first.until(stream.SampleMsg)
        rss0, tasks0 = _rss_kib(agent.proc.pid), _tasks(agent.proc.pid)
        for _ in range(200 if mode == "tls" else 80):  # connect, then never say a word
            flood.append(socket.create_connection(("127.0.0.1", agent.port), timeout=WAIT_S))
        if mode != "tls":
            for _ in range(16):  # declare a 16 MiB frame before authenticating
                s = socket.create_connection(("127.0.0.1", agent.port), timeout=WAIT_S)
                s.sendall(struct.pack(">I", 16 << 20) + b"\0" * 4096)
                flood.append(s)
            big = RawViewer(agent.port)
            big.send(struct.pack(">I", 1 << 20))
            err = big.until(stream.ErrorMsg)
            assert err.code in ("protocol", "auth") and (not with_token or "1048576" in err.message)
            assert big.recv_msg() is None  # that connection, and only it, is closed
        real = _authed(agent.port, agent.token, crt)  # never "busy"
        real.until(stream.SampleMsg)
        first.until(stream.SampleMsg)  # the first viewer is still fed
        assert _tasks(agent.proc.pid) <= tasks0 + MAX_PENDING + 8
        assert _rss_kib(agent.proc.pid) - rss0 < 64 * 1024, "agent RSS grew by more than 64 MiB"
        assert agent.alive()
    finally:
        for s in flood:
            s.close()
        agent.stop()


@pytest.mark.slow
def test_sigterm_exits_promptly_with_requests_blocked(gpulens_exe: str, tmp_path: Path) -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.01)"])
    agent = AgentProc(gpulens_exe, tmp_path, "term", extra=["--interval", "0.2", "--simulated-gpus", "0"],
                      token=True)
    idle: list[socket.socket] = []
    try:
        v = _authed(agent.port, agent.token)
        for rid in (1, 2, 3):  # py-spy for 30 s each (the third is over the per-user limit)
            v.send(stream.encode(stream.Request(id=rid, kind="profile",
                                                params={"pids": [sleeper.pid], "duration_s": 30})))
        v.send(stream.encode(stream.Request(id=9, kind="history", params={"since": 0})))
        answers: dict[int, stream.Response] = {}
        while not {3, 9} <= set(answers):
            m = v.recv_msg()
            assert m is not None
            if isinstance(m, stream.Response):
                answers[m.id] = m
        # Two py-spy runs hold this user's slots (unless py-spy could not attach at all).
        over = str(NoSlot(NoSlotKind.PER_UID, MAX_HEAVY_PER_UID, uid=os.geteuid()))
        assert answers[3].error == over or (1 in answers and 2 in answers), answers
        assert answers[9].ok  # history answered while they run
        for _ in range(20):
            idle.append(socket.create_connection(("127.0.0.1", agent.port), timeout=WAIT_S))
        while agent.log.read_text().count("connected") < 3:  # some idle ones are being served
            time.sleep(0.05)
        t0 = time.monotonic()
        agent.proc.send_signal(signal.SIGTERM)
        rc = agent.proc.wait(timeout=30)
        took = time.monotonic() - t0
        assert rc == 143, agent.log.read_text()[-2000:]  # 128 + SIGTERM, as --help says (issue 31 item 19)
        assert took < 5, f"SIGTERM took {took:.1f} s"
    finally:
        for s in idle:
            s.close()
        agent.stop()
        sleeper.kill()
        sleeper.wait()


def test_metrics_refuses_a_public_address_without_the_flag(gpulens_exe: str) -> None:
    out = subprocess.run(
        [gpulens_exe, "agent", "--listen", "127.0.0.1:0", "--no-trace", "--simulated-gpus", "0",
         "--metrics-port", "9", "--metrics-addr", "0.0.0.0"],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 2
    assert "--metrics-addr 0.0.0.0" in out.stderr and "--metrics-public" in out.stderr
    from gpulens.agent.metrics import serve_metrics
    from gpulens.core.errors import ConfigError, ConfigProblem

    with pytest.raises(ConfigError) as err:
        serve_metrics(0, "x", lambda: None, addr="0.0.0.0")
    assert (err.value.expected, err.value.problem) == ("--metrics-public", ConfigProblem.CONFLICT)


@pytest.mark.slow
def test_idle_metrics_connections_hold_at_most_the_cap(gpulens_exe: str, tmp_path: Path) -> None:
    import select
    import urllib.request

    from gpulens.agent.metrics import MAX_METRICS_CONNECTIONS

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    agent = AgentProc(gpulens_exe, tmp_path, "metr",
                      extra=["--interval", "0.2", "--simulated-gpus", "1", "--metrics-port", str(port)])
    idle: list[socket.socket] = []
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                if b"gpulens_" in urllib.request.urlopen(url, timeout=10).read():
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "metrics never served"
            time.sleep(0.1)
        tasks0 = _tasks(agent.proc.pid)
        for _ in range(100):
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=WAIT_S))
        # Wait until the server has seen them all: those over the cap are answered 503 and closed.
        deadline = time.monotonic() + WAIT_S
        while True:
            readable, _, _ = select.select(idle, [], [], 0.2)
            if len(readable) >= 100 - MAX_METRICS_CONNECTIONS:
                break
            assert time.monotonic() < deadline, f"only {len(readable)} connections answered"
        assert _tasks(agent.proc.pid) <= tasks0 + MAX_METRICS_CONNECTIONS + 2
        for s in idle:
            s.close()
        idle.clear()
        deadline = time.monotonic() + WAIT_S
        while True:  # served again once the idle ones are gone
            try:
                if b"gpulens_" in urllib.request.urlopen(url, timeout=10).read():
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "metrics not served after the flood"
            time.sleep(0.1)
    finally:
        for s in idle:
            s.close()
        agent.stop()


def test_port_file_never_follows_a_planted_link(tmp_path: Path) -> None:
    from gpulens.commands.agent import _write_port_file

    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    target = tmp_path / "port"
    (tmp_path / "port.tmp").symlink_to(victim)
    _write_port_file(str(target), 4321)
    assert target.read_text() == "4321\n" and victim.read_text() == "precious\n"
    assert not target.is_symlink()
    assert re.fullmatch(r"\d+\n", target.read_text())


def test_principals_say_who_may_act_for_whom() -> None:
    assert owner("token").uid == os.geteuid() and not owner("stdio").samples_only
    assert peer(1000).may_act_for(1000) and not peer(1000).may_act_for(0) and not peer(1000).may_act_for(None)
    assert peer(0).may_act_for(1000)
    assert Principal("none", None).samples_only and not Principal("none", None).may_act_for(0)
    with pytest.raises(ValueError):
        Principal("guess", 0)
