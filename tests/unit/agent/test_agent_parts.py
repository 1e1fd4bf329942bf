"""The agent's parts, each built alone: a viewer session over an in-memory transport with a fake host,
a request runner with fake history, profiler and trace service. No process, no socket.

The session (``ViewerConnection``) sees only a ``SessionHost``; the runner only
what it is handed. The same rules docs/security.md states for the whole agent
hold for each part: who asks decides, files are never followed, no user fills
the request slots, and stopping never waits for a blocked request.
"""

from __future__ import annotations

import os
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpulens.agent.agent import Agent
from gpulens.agent.requests import Limits, RequestRunner
from gpulens.agent.sessions import PREAUTH_FRAME_BYTES, Refusal, RefusalKind, ViewerConnection
from gpulens.collectors.synthetic import SyntheticSampler
from gpulens.ipc import auth, stream
from gpulens.ipc.kineto.untraceable import Untraceable, UntraceableKind
from gpulens.ipc.principal import NOT_AUTHENTICATED, SAMPLES_ONLY, Principal, owner, peer
from gpulens.ipc.refusal import NoSlot, NoSlotKind
from gpulens.ipc.serialize import sample_to_dict
from gpulens.ipc.stream_frames import pack_sample
from tests.fakes.agent_helpers import (
    WAIT_S,
    BlockingProfiler,
    MemTransport,
    RecordingConn,
)
from tests.fakes.trace_service import FakeTraceService, poller

pytestmark = pytest.mark.timeout(60)

ME = os.geteuid()
STRANGER = 424242
"""A uid that owns no process here."""
NO_SUCH_PID = 2**31 - 1


# -- a session with a fake host ---------------------------------------------------------
class FakeHost:
    """A SessionHost that records what the session asks of it."""

    def __init__(self, refusal: Refusal | None = None) -> None:
        self.refusal = refusal
        self.hellos: list[Principal] = []
        self.subscribed: list[float | None] = []
        self.submitted: list[stream.Request] = []
        self.forgotten: list[ViewerConnection] = []
        self._cond = threading.Condition()

    def hello(self, principal: Principal) -> stream.Hello:
        self.hellos.append(principal)
        caps = ("history",) if principal.samples_only else ("history", "trace")
        return stream.Hello(proto=stream.PROTOCOL_VERSION, role="agent", host="parts", caps=caps)

    def admit(self, conn: ViewerConnection) -> Refusal | None:
        return self.refusal

    def subscribe(self, conn: ViewerConnection, since: float | None) -> None:
        with self._cond:
            self.subscribed.append(since)
            self._cond.notify_all()

    def submit(self, conn: ViewerConnection, req: stream.Request) -> None:
        with self._cond:
            self.submitted.append(req)
        conn.put(stream.encode(stream.Response(id=req.id, ok=True, result={"by": conn.principal.how})), WAIT_S)

    def forget(self, conn: ViewerConnection) -> None:
        with self._cond:
            self.forgotten.append(conn)
            self._cond.notify_all()

    def wait_for(self, pred: Callable[[], bool]) -> None:
        with self._cond:
            assert self._cond.wait_for(pred, WAIT_S), "the session never got there"


def _session(
    host: FakeHost, principal: Principal, *, token: bytes | None = None, guard: auth.ReplayGuard | None = None,
    kind: str = "tcp",
) -> tuple[ViewerConnection, MemTransport]:
    t = MemTransport()
    conn = ViewerConnection(
        host, t, "mem", principal=principal, token=token, max_queued_frames=8,
        replay_guard=guard or (auth.ReplayGuard() if token is not None else None), kind=kind,
    )
    threading.Thread(target=conn.run, daemon=True).start()
    return conn, t


def _prove(t: MemTransport, token: bytes, cnonce: bytes | None = None) -> None:
    ch = t.until(stream.Challenge)
    c = cnonce or auth.new_nonce()
    t.send(stream.AuthResponse(cnonce=c, mac=auth.viewer_proof(token, ch.nonce, c)))


def _viewer_hello(since: float | None = None) -> stream.Hello:
    return stream.Hello(proto=stream.PROTOCOL_VERSION, role="viewer", since=since)


def test_session_without_token_has_its_principal_from_the_start() -> None:
    host = FakeHost()
    conn, t = _session(host, peer(1234), kind="control")
    hello = t.until(stream.Hello)
    assert hello.caps == ("history", "trace") and host.hellos == [peer(1234)]
    t.send(_viewer_hello(since=5.0))
    host.wait_for(lambda: host.subscribed == [5.0])
    assert conn.admitted
    t.send(stream.Request(id=7, kind="trace", params={}))
    res = t.response(7)
    assert res.ok and res.result == {"by": "peercred"} and [r.id for r in host.submitted] == [7]
    t.end()
    host.wait_for(lambda: host.forgotten == [conn])
    assert conn.closed and conn.reason == "viewer closed the connection"


def test_session_with_token_grants_the_principal_only_after_the_proof() -> None:
    token = auth.new_nonce()
    host = FakeHost()
    conn, t = _session(host, owner("token"), token=token)
    _prove(t, token)
    t.until(stream.AuthOk)
    hello = t.until(stream.Hello)
    assert host.hellos == [owner("token")] and "trace" in hello.caps
    assert conn.principal == owner("token")
    t.send(_viewer_hello())
    host.wait_for(lambda: host.subscribed == [None])
    t.send(stream.Request(id=1, kind="history", params={}))
    assert t.response(1).result == {"by": "token"}


def test_session_before_the_proof_is_samples_only_and_a_wrong_token_ends_it() -> None:
    host = FakeHost()
    conn, t = _session(host, owner("token"), token=auth.new_nonce())
    assert conn.principal == SAMPLES_ONLY and host.hellos == []
    _prove(t, auth.new_nonce())  # not the agent's token
    err = t.until(stream.ErrorMsg)
    assert err.code == "auth" and "wrong token" in err.message
    assert t.next_msg() is None
    host.wait_for(lambda: host.forgotten == [conn])
    assert host.hellos == [] and host.submitted == []


def test_session_request_before_the_token_is_refused() -> None:
    host = FakeHost()
    _conn, t = _session(host, owner("token"), token=auth.new_nonce())
    t.until(stream.Challenge)
    t.send(stream.Request(id=1, kind="trace", params={"pids": [1]}))
    err = t.until(stream.ErrorMsg)
    assert err.code == "auth" and "authentication required" in err.message
    assert host.submitted == []


def test_sessions_share_the_replay_guard_they_are_given() -> None:
    token, guard, cnonce = auth.new_nonce(), auth.ReplayGuard(), auth.new_nonce()
    _a, ta = _session(FakeHost(), owner("token"), token=token, guard=guard)
    _prove(ta, token, cnonce)
    ta.until(stream.AuthOk)
    host = FakeHost()
    _b, tb = _session(host, owner("token"), token=token, guard=guard)
    _prove(tb, token, cnonce)  # a valid MAC for this challenge, but the client nonce was used
    err = tb.until(stream.ErrorMsg)
    assert err.code == "auth" and "replayed" in err.message and host.hellos == []


def test_a_token_needs_a_replay_guard() -> None:
    with pytest.raises(ValueError, match="replay guard"):
        ViewerConnection(FakeHost(), MemTransport(), "mem", principal=owner("token"), token=b"t" * 32,
                         max_queued_frames=8)


def test_session_refused_by_a_busy_host_is_told_why() -> None:
    host = FakeHost(refusal=Refusal(RefusalKind.VIEWERS_FULL, limit=64))
    conn, t = _session(host, SAMPLES_ONLY)
    t.until(stream.Hello)
    t.send(_viewer_hello(since=0.0))
    err = t.until(stream.ErrorMsg)
    assert err.code == "busy" and err.message == "agent has 64 viewers"
    host.wait_for(lambda: host.forgotten == [conn])
    assert host.subscribed == [] and not conn.admitted


def test_session_frames_before_hello_are_small() -> None:
    host = FakeHost()
    _conn, t = _session(host, SAMPLES_ONLY)
    t.until(stream.Hello)
    t.feed(struct.pack(">I", 1 << 20))
    err = t.until(stream.ErrorMsg)
    assert err.code == "protocol" and f"the limit is {PREAUTH_FRAME_BYTES}" in err.message


# -- a request runner with fakes ----------------------------------------------------------
class FakeHistory:
    """The history function: records what it was asked and returns ``n`` packed samples."""

    def __init__(self, n: int = 3) -> None:
        sampler = SyntheticSampler(hostname="parts", gpus=0, interval_s=1.0)
        self.raws = [pack_sample(sample_to_dict(sampler.sample())) for _ in range(n)]
        self.asked: list[tuple[float | None, float | None]] = []

    def __call__(self, since: float | None, until: float | None) -> list[bytes]:
        self.asked.append((since, until))
        return self.raws


@pytest.fixture
def prof() -> Iterator[BlockingProfiler]:
    p = BlockingProfiler()
    yield p
    p.release.set()


def _runner(*, svc: Any = None, prof: BlockingProfiler | None = None, limits: Limits | None = None,
            history: FakeHistory | None = None) -> RequestRunner:
    return RequestRunner(
        history=history or FakeHistory(), hostname="parts", trace_service=svc,
        profiler=lambda: prof, limits=limits or Limits(),
    )


def _ask(runner: RequestRunner, conn: RecordingConn, rid: int, kind: str, params: dict[str, Any]) -> stream.Response:
    runner.submit(conn, stream.Request(id=rid, kind=kind, params=params))
    return conn.response(rid)


def _profile(pid: int = os.getpid()) -> dict[str, Any]:
    return {"pids": [pid], "duration_s": 1}


def test_runner_serves_a_samples_only_connection_history_only(prof: BlockingProfiler) -> None:
    svc = FakeTraceService()
    runner = _runner(svc=svc, prof=prof)
    assert runner.capabilities(SAMPLES_ONLY) == ("history",)
    assert runner.capabilities(peer(ME)) == ("history", "profile", "trace", "trace_status", "trace_diagnose", "trace_processes")
    conn = RecordingConn(SAMPLES_ONLY)
    asks = [("trace", {"pids": [os.getpid()]}), ("profile", _profile()),
            ("trace_diagnose", {"pids": [os.getpid()]}), ("trace_status", {"tag": "x"})]
    for rid, (kind, params) in enumerate(asks, start=1):
        res = _ask(runner, conn, rid, kind, params)
        assert not res.ok and res.error == NOT_AUTHENTICATED, kind
    assert svc.requests == [] and runner.running() == 0
    assert _ask(runner, conn, 9, "history", {}).ok
    res = _ask(runner, conn, 10, "teleport", {})
    assert not res.ok and res.error.endswith("this agent serves: history")


def test_runner_serves_history_inline_from_its_history_function() -> None:
    history = FakeHistory(3)
    runner = _runner(history=history)
    conn = RecordingConn(SAMPLES_ONLY)
    runner.submit(conn, stream.Request(id=4, kind="history", params={"since": 1.5, "until": 9.0}))
    # Answered before submit returned: on the connection's own thread, never behind anything.
    msgs = conn.messages()
    assert history.asked == [(1.5, 9.0)]
    chunks = [m for m in msgs if isinstance(m, stream.History)]
    assert {h.id for h in chunks} == {4} and chunks[-1].last and sum(len(h.samples) for h in chunks) == 3
    res = msgs[-1]
    assert isinstance(res, stream.Response) and res.ok and res.result == {"count": 3}
    bad = _ask(runner, conn, 5, "history", {"since": "yesterday"})
    assert not bad.ok and bad.error == "since must be a number"


def test_runner_without_a_trace_service_says_why() -> None:
    runner = _runner()
    runner.trace_error = "trace service not installed: no module named kineto"
    res = _ask(runner, RecordingConn(peer(ME)), 1, "trace", {"pids": [os.getpid()]})
    assert not res.ok and "(trace service not installed: no module named kineto)" in res.error
    assert res.error.endswith("this agent serves: history")


def test_trace_diagnose_answers_the_reasons_sentence() -> None:
    svc = FakeTraceService(not_polling=Untraceable(UntraceableKind.NO_DAEMON_ENV))
    res = _ask(_runner(svc=svc), RecordingConn(peer(ME)), 1, "trace_diagnose", {"pids": [os.getpid()]})
    assert res.ok and res.result == {"reasons": {str(os.getpid()): (
        "KINETO_USE_DAEMON is not set in its environment: restart it with "
        "KINETO_USE_DAEMON=1 (on-demand tracing is off without it)")}}  # the wire keeps the words


def test_runner_principal_rules_for_pids_and_jobs() -> None:
    svc = FakeTraceService(processes=[poller(os.getpid(), job_id=7)])
    runner = _runner(svc=svc)
    mine = RecordingConn(peer(ME))
    res = _ask(runner, mine, 1, "trace_diagnose", {"pids": [os.getpid()]})
    assert res.ok and res.result == {"reasons": {str(os.getpid()): None}}
    res = _ask(runner, mine, 2, "trace_diagnose", {"pids": [NO_SUCH_PID]})
    assert not res.ok and f"process {NO_SUCH_PID} does not exist" in res.error
    stranger = RecordingConn(peer(STRANGER))
    res = _ask(runner, stranger, 1, "trace_diagnose", {"pids": [os.getpid()]})
    assert not res.ok and f"belongs to uid {ME}" in res.error
    assert f"uid {STRANGER} (control socket) may trace or profile only its own processes" in res.error
    res = _ask(runner, stranger, 2, "trace", {"job_id": 7, "duration_ms": 100})
    assert not res.ok and f"no process of uid {STRANGER} with job id 7" in res.error
    assert svc.requests == []
    res = _ask(runner, mine, 3, "trace", {"job_id": 7, "duration_ms": 100})
    assert res.ok and [r.pids for r in svc.requests] == [(os.getpid(),)]


def test_runner_refuses_a_trace_whose_file_is_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    runner = _runner(svc=FakeTraceService(files={os.getpid(): str(fifo)}))
    conn = RecordingConn(peer(ME))
    res = _ask(runner, conn, 1, "trace", {"pids": [os.getpid()], "duration_ms": 100})
    assert not res.ok and "trace file refused" in res.error and "not a regular file" in res.error
    assert not any(isinstance(m, stream.FileChunk) for m in conn.messages())
    real = tmp_path / "real.json"
    real.write_bytes(b"{}" * 10)
    runner.trace_service = FakeTraceService(files={os.getpid(): str(real)})
    res = _ask(runner, conn, 2, "trace", {"pids": [os.getpid()], "duration_ms": 100})
    assert res.ok and res.result["files"] == {str(os.getpid()): f"{os.getpid()}-real.json"}
    chunks = [m for m in conn.messages() if isinstance(m, stream.FileChunk) and m.id == 2]
    assert b"".join(c.data for c in chunks) == b"{}" * 10 and chunks[-1].last


def test_runner_trace_status_is_per_connection() -> None:
    runner = _runner(svc=FakeTraceService())
    a, b = RecordingConn(peer(ME)), RecordingConn(peer(ME))
    assert _ask(runner, a, 1, "trace", {"pids": [os.getpid()], "duration_ms": 100, "tag": "t1"}).ok
    status = _ask(runner, a, 2, "trace_status", {"tag": "t1"}).result
    assert status["state"] == "sending" and [e["state"] for e in status["events"]] == ["requested", "sending"]
    assert _ask(runner, b, 1, "trace_status", {"tag": "t1"}).result["state"] == "unknown"
    res = _ask(runner, a, 3, "trace_status", {"tag": "../etc"})
    assert not res.ok and "tag must be" in res.error


def _wait_idle(runner: RequestRunner) -> None:
    """Until every request thread released its slot (each answers just before it does)."""
    deadline = time.monotonic() + WAIT_S
    while runner.running() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert runner.running() == 0


def test_runner_limits_per_connection_and_per_uid(prof: BlockingProfiler) -> None:
    runner = _runner(prof=prof, limits=Limits(in_flight=1, per_uid=2, heavy=8))
    a, b, c = (RecordingConn(peer(ME)) for _ in range(3))
    runner.submit(a, stream.Request(id=1, kind="profile", params=_profile()))
    assert prof.started.acquire(timeout=WAIT_S)
    res = _ask(runner, a, 2, "profile", _profile())
    assert not res.ok and res.error == str(NoSlot(NoSlotKind.IN_FLIGHT, 1))
    runner.submit(b, stream.Request(id=1, kind="profile", params=_profile()))
    assert prof.started.acquire(timeout=WAIT_S)
    res = _ask(runner, c, 1, "profile", _profile())
    assert not res.ok and res.error == str(NoSlot(NoSlotKind.PER_UID, 2, uid=ME))
    assert _ask(runner, c, 2, "history", {}).ok  # never behind the blocked profiles
    other = RecordingConn(peer(STRANGER))  # another user still gets a slot (and fails the owner check)
    res = _ask(runner, other, 1, "profile", _profile())
    assert not res.ok and f"belongs to uid {ME}" in res.error
    assert runner.running() == 2
    prof.release.set()
    for conn in (a, b):
        res = conn.response(1)
        assert res.ok and res.result["files"][0].startswith("profile-parts-")
    _wait_idle(runner)


def test_runner_limit_on_the_whole_agent(prof: BlockingProfiler) -> None:
    runner = _runner(prof=prof, limits=Limits(in_flight=4, per_uid=8, heavy=2))
    conns = [RecordingConn(peer(ME)) for _ in range(3)]
    for conn in conns[:2]:
        runner.submit(conn, stream.Request(id=1, kind="profile", params=_profile()))
        assert prof.started.acquire(timeout=WAIT_S)
    res = _ask(runner, conns[2], 1, "profile", _profile())
    assert not res.ok and res.error == str(NoSlot(NoSlotKind.AGENT_FULL, 2))
    prof.release.set()
    for conn in conns[:2]:
        assert conn.response(1).ok
    _wait_idle(runner)


def test_runner_close_while_a_request_blocks(prof: BlockingProfiler) -> None:
    runner = _runner(prof=prof)
    conn = RecordingConn(peer(ME))
    runner.submit(conn, stream.Request(id=1, kind="profile", params=_profile()))
    assert prof.started.acquire(timeout=WAIT_S)
    runner.close()  # as on SIGTERM: returns with the request still blocked
    assert runner.running() == 1
    blocked = [t for t in threading.enumerate() if t.name == "gpulens-request-profile"]
    assert blocked and all(t.daemon for t in blocked), "a blocked request must not hold the exit"
    res = _ask(runner, conn, 2, "profile", _profile())
    assert not res.ok and res.error == str(NoSlot(NoSlotKind.STOPPING))
    assert _ask(runner, conn, 3, "history", {}).ok


# -- the agent wires the parts ------------------------------------------------------------------
def test_agent_hands_its_parts_what_they_need(prof: BlockingProfiler) -> None:
    agent = Agent(SyntheticSampler(hostname="wired", gpus=0, interval_s=0.1), hostname="wired", interval_s=0.1,
                  profiler=lambda: prof)
    svc = FakeTraceService()
    agent.requests.trace_service = svc
    for _ in range(3):
        agent.sample_once()
    assert agent.hello(SAMPLES_ONLY).caps == ("history",)
    assert agent.hello(peer(ME)).caps == ("history", "processes", "profile", "trace", "trace_status", "trace_diagnose", "trace_processes")
    conn = RecordingConn(peer(ME))
    assert _ask(agent.requests, conn, 1, "history", {"since": 0}).result == {"count": 3}
    agent.stop()
    assert svc.stopped and agent.requests.trace_service is None
    res = _ask(agent.requests, conn, 2, "profile", _profile())
    assert not res.ok and res.error == str(NoSlot(NoSlotKind.STOPPING))


@pytest.mark.parametrize(("params", "refusal"), [
    ({"pids": [1], "duration_s": float("nan")}, "duration_s must be a number"),
    ({"pids": [1], "duration_s": True}, "duration_s must be a number"),
    ({"pids": [1], "duration_s": "5"}, "duration_s must be a number"),
    ({"pids": [1], "rate_hz": "a"}, "rate_hz must be a number"),
    ({"pids": [1], "duration_s": 0}, "duration_s must be in (0, 60]"),
    ({"pids": [1], "rate_hz": 5000}, "rate_hz must be 1..1000"),
])
def test_profile_params_refused_as_before_the_schema(params: dict[str, object], refusal: str) -> None:
    """The refusals the hand-written checks sent (acf064b), kept word for word by the schema."""
    from gpulens.ipc.errors import ProtocolError, ProtocolProblem
    from gpulens.ipc.request_schema import decode_params

    with pytest.raises(ProtocolError) as err:
        decode_params("profile", params)
    assert err.value.problem is ProtocolProblem.BAD_PARAMS
    assert str(err.value) == refusal
