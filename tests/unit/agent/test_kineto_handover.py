"""Endpoint hand-over without torch: who may ask, the drain, the wire exchange, the TUI's switch.

The real flow with PyTorch and a real agent is tests/integration/test_kineto_handover.py;
another uid asking for real is tests/integration/test_security_handover.py.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpulens.agent.agent import endpoint_owner
from gpulens.ipc.control import control_name
from gpulens.ipc.handover import (
    KIND,
    RECEIVER_PREFIX,
    NotPassed,
    NotPassedKind,
    handover_allowed,
    pass_socket,
    request_handover,
)
from gpulens.ipc.kineto import codec
from gpulens.ipc.kineto.endpoint import holder_of
from gpulens.ipc.kineto.requests import TraceRequest, TraceState
from gpulens.ipc.kineto.service import LocalTraceService
from gpulens.ipc.kineto.untraceable import UntraceableKind
from gpulens.ipc.principal import Principal, owner, peer
from gpulens.ipc.refusal import HandoverKind, NotHandedOver
from gpulens.sources.owner_switch import HandoverTraceService
from tests.fakes.handover_helpers import Adopter
from tests.fakes.kineto_client import decode_config_reply, encode_request
from tests.fakes.trace_service import FakeTraceService

ME = os.geteuid()


@pytest.fixture
def sock() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="gh", dir="/tmp"))
    (d / "s").mkdir()
    yield d / "s"
    shutil.rmtree(d, ignore_errors=True)


def test_only_root_or_the_holders_own_user_may_ask() -> None:
    assert handover_allowed(peer(0), 1000) and handover_allowed(peer(1000), 1000) and handover_allowed(peer(0), 0)
    assert not handover_allowed(peer(1001), 1000)
    assert not handover_allowed(peer(1000), 0)  # a user cannot take root's endpoint
    # Only the kernel's word counts: a token or stdio principal (the owner's authority) is no peer credential.
    assert not handover_allowed(Principal("token", 1000), 1000)
    assert not handover_allowed(Principal("stdio", 0), 0)
    assert not handover_allowed(Principal("none", None), 1000)
    assert not handover_allowed(owner("token"), ME)


def _poll(svc: LocalTraceService) -> str:
    reply = svc.endpoint.handle_datagram(encode_request(codec.ConfigRequest(3, 0, (os.getpid(), 1))))
    assert reply is not None
    return str(decode_config_reply(reply))


def _poll_name(sock: Path) -> bool:
    """A real poll sent to the name ``DIR/dynolog``: does whoever serves it now answer?"""
    client = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        client.bind("")  # an autobound abstract name, for the reply
        client.settimeout(5)
        client.sendto(encode_request(codec.ConfigRequest(3, 0, (os.getpid(), 1))), str(sock / "dynolog"))
        return decode_config_reply(client.recv(65536)) is not None
    finally:
        client.close()


def test_release_waits_for_accepted_traces_to_reach_kineto(sock: Path) -> None:
    svc = LocalTraceService(str(sock), use_dynolog=False, tick_s=0.02)
    svc.start()
    try:
        _poll(svc)  # we poll: traceable
        fut = svc.request_trace(TraceRequest(pids=(os.getpid(),), duration_ms=100, timeout_s=30))
        assert svc.unhanded() == 1
        # Not handed yet: the name is kept, the reason said, and requests are accepted again.
        handed: list[socket.socket] = []
        why = svc.release_endpoint("handing over", 0.2, handed.append)
        assert why == NotHandedOver(HandoverKind.WAITING, count=1)
        assert handed == []  # nothing passed while traces wait
        assert svc.endpoint.running and holder_of(str(sock)) is not None
        again = svc.request_trace(TraceRequest(pids=(os.getpid(),), duration_ms=100, timeout_s=30))
        assert not again.done()  # queued behind the first, not refused
        # The target polls during the drain: the first config goes out, then the name is released...
        # (a drain long enough that a late timer on a loaded machine still polls within it)
        threading.Timer(0.3, _poll, (svc,)).start()
        why = svc.release_endpoint("handing over", 5.0, handed.append)
        assert why == NotHandedOver(HandoverKind.WAITING, count=1)  # ...but the queued one has not reached Kineto
        assert handed == []
        assert not fut.done()
        accepted = svc.request_trace(TraceRequest(pids=(os.getpid(),), duration_ms=100))
        assert not accepted.done()  # the name kept: requests are taken again
    finally:
        svc.stop()


def test_release_then_new_requests_are_refused_with_the_reason(sock: Path) -> None:
    svc = LocalTraceService(str(sock), use_dynolog=False, tick_s=0.02)
    svc.start()
    other = Adopter(str(sock))
    try:
        _poll(svc)
        fut = svc.request_trace(TraceRequest(pids=(os.getpid(),), duration_ms=100, timeout_s=30))
        threading.Timer(0.2, _poll, (svc,)).start()
        # The bound socket itself goes to the next owner (a duplicate, as SCM_RIGHTS makes one).
        assert svc.release_endpoint("handed over to the agent", 5.0,
                                    lambda s: (other(socket.socket(fileno=os.dup(s.fileno()))), None)[1]) is None
        assert not svc.endpoint.running and other.services[0].endpoint.running
        assert holder_of(str(sock)) is not None and (sock / "dynolog").is_socket()  # never unbound
        assert _poll_name(sock) and other.services[0].endpoint.received == 1  # the next owner answers
        assert not fut.done()  # handed to Kineto: still watched, its file would land here
        assert [j.state for j in svc.jobs()] == [TraceState.TRACING]
        refused = svc.request_trace(TraceRequest(pids=(os.getpid(),), duration_ms=100))
        assert "handed over to the agent" in str(refused.exception(timeout=1))
        other.close()  # the new owner exits (its stop unlinks the name it served)
        assert not (sock / "dynolog").exists()
        svc.rebind()  # the name back
        assert holder_of(str(sock)) is not None and svc.endpoint.running
    finally:
        other.close()
        svc.stop()


def test_a_failed_pass_keeps_the_name_served_here(sock: Path) -> None:
    svc = LocalTraceService(str(sock), use_dynolog=False, tick_s=0.02)
    svc.start()
    try:
        why = svc.release_endpoint("handing over", 1.0, lambda s: "the agent vanished")
        assert why == NotHandedOver(HandoverKind.NOT_TAKEN, "the agent vanished")  # the receiver's words
        assert svc.endpoint.running and (sock / "dynolog").is_socket()
        before = svc.endpoint.received
        assert _poll_name(sock) and svc.endpoint.received == before + 1  # still answering on the same socket

        def boom(_s: socket.socket) -> str | None:
            raise OSError("EPIPE")

        assert svc.release_endpoint("handing over", 0.1, boom) == NotHandedOver(HandoverKind.FAILED, "EPIPE",
                                                                                  error="OSError")
        assert svc.endpoint.running and _poll_name(sock)
        accepted = svc.request_trace(TraceRequest(pids=(os.getpid(),), duration_ms=100))
        assert not accepted.done()  # requests are taken again
    finally:
        svc.stop()


def _until_hung_up(conn: socket.socket) -> None:
    """Hold ``conn`` open, reading what comes, until the other side closes it (at most 10 s)."""
    conn.settimeout(10)
    while conn.recv(4096):
        pass


def _receiver(answer: bytes | None) -> tuple[str, threading.Thread]:
    """A one-shot receiver of the asking agent's form that takes the passed socket and answers ``answer``
    (None: never answers, and holds the connection until the holder hangs up, at most 10 s)."""
    name = RECEIVER_PREFIX + secrets.token_hex(16)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(b"\0" + name.encode())
    listener.listen(1)

    def serve() -> None:
        with listener:
            conn, _ = listener.accept()
            with conn, contextlib.suppress(OSError):  # a holder that refused closes without passing
                _msg, fds, _flags, _addr = socket.recv_fds(conn, 64, 1)
                for fd in fds:
                    os.close(fd)
                if answer is None:
                    _until_hung_up(conn)
                else:
                    conn.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return name, thread


@pytest.mark.parametrize(("answer", "want"), [
    (b"A", None),
    (b"NUnsafePath: not ours\x1b[2J", NotPassed(NotPassedKind.NOT_SERVED, detail="UnsafePath: not ours")),
    (b"?", NotPassed(NotPassedKind.NOT_CONFIRMED)),
    (None, NotPassed(NotPassedKind.TIMEOUT)),
])
def test_passing_the_socket_says_why_it_was_kept(answer: bytes | None, want: NotPassed | None) -> None:
    name, thread = _receiver(answer)
    # A receiver that answers gets a generous time (a loaded machine may start its thread late); only the
    # one that never answers is waited for briefly, to see the timeout.
    timeout_s = 0.2 if answer is None else 5.0
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as endpoint:
        assert pass_socket(name, endpoint, os.getuid(), timeout_s=timeout_s) == want
    thread.join(5)


def test_passing_the_socket_only_to_the_asking_agents_receiver() -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as endpoint:
        assert pass_socket("gpulens-handover-x", endpoint, ME) == NotPassed(NotPassedKind.BAD_RECEIVER)
        assert pass_socket(None, endpoint, ME) == NotPassed(NotPassedKind.BAD_RECEIVER)
        gone = pass_socket(RECEIVER_PREFIX + secrets.token_hex(16), endpoint, ME)  # nobody listens there
        assert gone is not None and gone.kind is NotPassedKind.NO_RECEIVER
        name, thread = _receiver(b"A")
        other = pass_socket(name, endpoint, os.getuid() + 1)
        assert other == NotPassed(NotPassedKind.OTHER_USER, os.getpid(), os.getuid(), os.getuid() + 1)
        # On purpose: the holder's words when the receiver is not the asking agent's user's.
        assert str(other) == (f"the receiver belongs to pid {os.getpid()} (uid {os.getuid()}), not to the asking "
                              f"agent's user (uid {os.getuid() + 1}); the endpoint is kept")
        thread.join(5)


class _Started:
    """A started service, as the claimer sees one (it may stop it)."""

    def __init__(self) -> None:
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True


def test_a_claim_that_does_not_get_the_name_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    import gpulens.agent.kineto_owner as ko
    import gpulens.ipc.kineto.endpoint as ep
    from gpulens.ipc.errors import EndpointBusy
    from gpulens.ipc.handover import HandoverAnswer

    def taken(adopt: Any) -> Any:
        if adopt is None:
            raise EndpointBusy("taken by pid 4242")
        return _Started()

    stop = threading.Event()
    installed: list[Any] = []
    claimer = ko.EndpointClaimer(None, taken, installed.append, lambda why: None, stop)
    monkeypatch.setattr(ep, "holder_of", lambda sd: (4242, "python3", None))  # whose it is, /proc does not say
    assert claimer.claim_once() == NotHandedOver(HandoverKind.TAKEN, "taken by pid 4242")
    monkeypatch.setattr(ep, "holder_of", lambda sd: (4242, "python3", ME))
    monkeypatch.setattr(ko, "request_handover", lambda *a: HandoverAnswer(False, "does not pass it on", False))
    assert claimer.claim_once() == NotHandedOver(HandoverKind.HOLDER_KEPT, "taken by pid 4242", pid=4242,
                                                 answer="does not pass it on")

    def denied(adopt: Any) -> Any:
        raise PermissionError(13, "Permission denied")

    failing = ko.EndpointClaimer(None, denied, installed.append, lambda why: None, stop)
    assert failing.claim_once() == NotHandedOver(HandoverKind.FAILED, "[Errno 13] Permission denied",
                                                 error="PermissionError")
    def free_name(adopt: Any) -> Any:
        return _Started()

    stop.set()
    free = ko.EndpointClaimer(None, free_name, installed.append, lambda why: None, stop)
    assert free.claim_once() == NotHandedOver(HandoverKind.STOPPING) and installed == []
    stop.clear()
    assert free.claim_once() is None and len(installed) == 1


def test_an_owner_that_does_not_hand_over_says_so(sock: Path) -> None:
    own = endpoint_owner("h", str(sock))  # gpulens trace's owner: no allow_handover
    try:
        answer = request_handover(str(sock), os.getpid(), ME, 10.0, Adopter(str(sock)))
        assert not answer.released and not answer.supported and "does not pass" in answer.reason
        assert holder_of(str(sock)) is not None
    finally:
        own.stop()


def test_the_agent_asks_only_the_process_holding_the_name(sock: Path) -> None:
    squat = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    squat.bind(control_name(str(sock), ME))
    squat.listen(1)
    try:
        answer = request_handover(str(sock), 1, ME, 5.0, Adopter(str(sock)))  # pid 1 "holds" the name; we hold its control name
        assert not answer.released and "not to the holder (pid 1)" in answer.reason
    finally:
        squat.close()


class _Events:
    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(self, event: str) -> None:
        self.seen.append(event)


def test_an_owner_hands_over_to_its_own_user(sock: Path) -> None:
    own = endpoint_owner("h", str(sock))
    events = _Events()
    assert KIND not in own.requests.served_kinds()
    own.allow_handover(events)
    assert KIND in own.requests.served_kinds()
    adopter = Adopter(str(sock))
    try:
        answer = request_handover(str(sock), os.getpid(), ME, 20.0, adopter)
        assert answer.released, answer.reason
        assert events.seen == ["draining", "released"]
        # The name never came free: the asking side serves the very socket now.
        assert (sock / "dynolog").is_socket() and holder_of(str(sock)) is not None
        assert len(adopter.services) == 1 and adopter.services[0].endpoint.running
        old = own.requests.trace_service
        assert isinstance(old, LocalTraceService) and not old.endpoint.running
        assert _poll_name(sock) and adopter.services[0].endpoint.received == 1
        with pytest.raises(OSError):  # its control socket is gone too (the agent binds its own)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(control_name(str(sock), ME))
            finally:
                s.close()
        refused = old.request_trace(TraceRequest(pids=(os.getpid(),), duration_ms=100))
        assert "handed the Kineto endpoint over to the agent of uid" in str(refused.exception(timeout=1))
    finally:
        adopter.close()
        own.stop()


def test_an_adopter_that_fails_leaves_the_holder_serving(sock: Path) -> None:
    own = endpoint_owner("h", str(sock))
    events = _Events()
    own.allow_handover(events)

    def refuse(_sock: socket.socket) -> Any:
        raise RuntimeError("the agent is stopping")

    try:
        answer = request_handover(str(sock), os.getpid(), ME, 20.0, refuse)
        assert not answer.released and "the agent is stopping" in answer.reason
        assert events.seen == ["draining", "resumed"]
        svc = own.requests.trace_service
        assert isinstance(svc, LocalTraceService) and svc.endpoint.running and _poll_name(sock)
        # It may be asked again, and then it passes the name on.
        adopter = Adopter(str(sock))
        try:
            assert request_handover(str(sock), os.getpid(), ME, 20.0, adopter).released
            assert adopter.services[0].endpoint.running
        finally:
            adopter.close()
    finally:
        own.stop()


def test_a_socket_bound_elsewhere_is_not_adopted(sock: Path) -> None:
    svc = LocalTraceService(str(sock), use_dynolog=False)
    stray = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    stray.bind(str(sock.parent / "elsewhere"))
    stream_sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        from gpulens.core.safefs import PathProblem, UnsafePath

        with pytest.raises(UnsafePath) as elsewhere:
            svc.start(adopt=stray)
        assert elsewhere.value.problem is PathProblem.BOUND_ELSEWHERE
        assert elsewhere.value.component == str(sock / "dynolog")
        with pytest.raises(UnsafePath) as other_kind:
            svc.start(adopt=stream_sock)
        assert other_kind.value.problem is PathProblem.WRONG_SOCKET_KIND
        assert not svc.endpoint.running
    finally:
        stray.close()
        stream_sock.close()
        svc.stop()


def _local(rebind_error: Exception | None = None) -> FakeTraceService:
    """The owner's LocalTraceService, as the switch sees it (``rebind`` raises ``rebind_error``)."""
    return FakeTraceService(address="local endpoint", polling={1}, files="/local", request_id="local",
                            rebind_error=rebind_error)


def _remote() -> FakeTraceService:
    """The new owner, through its agent."""
    return FakeTraceService(address="the agent", polling={1}, files="/remote", request_id="remote")


def _wait(pred: Any) -> None:
    deadline = time.monotonic() + 10
    while not pred():
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_the_switch_holds_requests_while_draining_then_sends_them_to_the_checked_new_owner() -> None:
    local, remote = _local(), _remote()
    svc = HandoverTraceService(local, connect=lambda: remote, holder=lambda: 4242, bound=lambda: True)
    seen: list[Any] = []
    svc.add_listener(seen.append)
    svc.on_handover("draining")
    held = svc.request_trace(TraceRequest(pids=(7,), duration_ms=100))
    assert not held.done() and seen[-1].state is TraceState.QUEUED and "handed over" in seen[-1].detail
    assert [j.request.pids for j in svc.jobs()] == [(7,)]
    svc.on_handover("released")
    assert held.result(timeout=10).files == {7: "/remote"}
    assert local.requests == [] and svc.state == "remote" and svc.address == "the agent"
    assert svc.request_trace(TraceRequest(pids=(8,), duration_ms=100)).result(timeout=1).request_id == "remote"


def test_a_hand_over_that_did_not_happen_sends_held_requests_locally() -> None:
    local = _local()
    svc = HandoverTraceService(local, connect=lambda: _remote(), holder=lambda: 4242, bound=lambda: True)
    svc.on_handover("draining")
    held = svc.request_trace(TraceRequest(pids=(7,), duration_ms=100))
    svc.on_handover("resumed")
    assert held.result(timeout=1).request_id == "local" and svc.state == "local"


def test_an_impostor_holder_gets_nothing_the_name_is_taken_back(monkeypatch: pytest.MonkeyPatch) -> None:
    import gpulens.sources.owner_switch as sw

    monkeypatch.setattr(sw, "NEW_OWNER_WAIT_S", 0.3)
    from gpulens.ipc.errors import StreamError

    def impostor() -> Any:
        raise StreamError("the Kineto name is held by pid 99 of uid 1234, not by a gpulens agent of yours or root's")

    local = _local()
    svc = HandoverTraceService(local, connect=impostor, holder=lambda: 99, bound=lambda: True)
    svc.on_handover("draining")
    held = svc.request_trace(TraceRequest(pids=(7,), duration_ms=100))
    svc.on_handover("released")
    assert held.result(timeout=10).request_id == "local"
    assert local.rebound and svc.state == "local"


def test_an_impostor_holding_on_stops_tracing_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    import gpulens.sources.owner_switch as sw

    monkeypatch.setattr(sw, "NEW_OWNER_WAIT_S", 0.3)
    from gpulens.ipc.errors import EndpointBusy, StreamError

    def impostor() -> Any:
        raise StreamError("held by pid 99 of uid 1234: it may be squatting")

    svc = HandoverTraceService(_local(EndpointBusy("taken by pid 99")), connect=impostor, holder=lambda: 99,
                               bound=lambda: True)
    svc.on_handover("draining")
    held = svc.request_trace(TraceRequest(pids=(7,), duration_ms=100))
    svc.on_handover("released")
    err = held.exception(timeout=10)
    assert err is not None and "may be squatting" in str(err) and "tracing is off" in str(err)
    why = svc.diagnose(7)
    assert svc.state == "failed" and why is not None and why.kind is UntraceableKind.TRACING_OFF
    assert "may be squatting" in why.detail
    _wait(lambda: svc.polling_pids() == set())


def _fake_holder(sock: Path, script: Any) -> tuple[socket.socket, threading.Thread]:
    """A hostile 'holder' on our own control name (so SO_PEERCRED shows our pid): ``script(conn)`` talks."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(control_name(str(sock), ME))
    srv.listen(1)

    def run() -> None:
        conn, _ = srv.accept()
        try:
            script(conn)
        except OSError:
            pass
        finally:
            conn.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return srv, t


def _hello(conn: socket.socket) -> None:
    from gpulens.ipc import stream

    conn.sendall(stream.encode(stream.Hello(proto=stream.PROTOCOL_VERSION, role="agent", caps=(KIND,))))


@pytest.mark.parametrize("case", ["escapes", "silent", "huge", "garbage"])
def test_a_hostile_holder_gets_one_clean_line_in_bounded_time(sock: Path, case: str) -> None:
    from gpulens.ipc import stream

    def script(conn: socket.socket) -> None:
        if case == "huge":
            conn.sendall((1 << 30).to_bytes(4, "big"))
            _until_hung_up(conn)
            return
        if case == "garbage":
            conn.sendall(b"\x00\x00\x00\x05\xc1\xc1\xc1\xc1\xc1")
            _until_hung_up(conn)
            return
        _hello(conn)
        conn.recv(4096)
        if case == "escapes":
            conn.sendall(stream.encode(stream.Response(id=1, ok=False, error="\x1b[31mno\x1b]0;pwned\x07\u202e!")))
        _until_hung_up(conn)  # the silent holder holds on: the asker must give up by its own deadline

    # A holder that answers gets a generous time (a loaded machine may run its thread late); only the silent
    # one is waited for briefly, to see the timeout. Either way the asker is bounded by its timeout.
    timeout_s = 1.0 if case == "silent" else 5.0
    srv, t = _fake_holder(sock, script)
    try:
        started = time.monotonic()
        answer = request_handover(str(sock), os.getpid(), ME, timeout_s, Adopter(str(sock)))
        assert time.monotonic() - started < timeout_s + 5
        assert not answer.released and answer.reason
        assert not any(ord(c) < 32 or c in "\x7f\u202e" for c in answer.reason), answer.reason
        expect = {"escapes": "no", "silent": "did not answer in time", "huge": "not the gpulens protocol",
                  "garbage": "not the gpulens protocol"}[case]
        assert expect in answer.reason
    finally:
        srv.close()
        t.join(timeout=5)


def test_when_the_new_owner_exits_the_tui_takes_the_name_back(monkeypatch: pytest.MonkeyPatch) -> None:
    import gpulens.sources.owner_switch as sw

    monkeypatch.setattr(sw, "RECHECK_S", 0.0)
    bound = [True]
    local = _local()
    svc = HandoverTraceService(local, connect=lambda: _remote(), holder=lambda: 4242 if bound[0] else None,
                               bound=lambda: bound[0])
    svc.on_handover("draining")
    svc.on_handover("released")
    _wait(lambda: svc.state == "remote")
    assert svc.polling_pids() == {1} and svc.state == "remote"  # same holder: nothing to do
    bound[0] = False  # the agent exited: nobody holds the name
    svc.polling_pids()
    _wait(lambda: svc.state == "local")
    assert local.rebound
    assert svc.request_trace(TraceRequest(pids=(7,), duration_ms=100)).result(timeout=1).request_id == "local"


def test_a_replaced_owner_is_checked_and_followed(monkeypatch: pytest.MonkeyPatch) -> None:
    import gpulens.sources.owner_switch as sw

    monkeypatch.setattr(sw, "RECHECK_S", 0.0)
    holder = [4242]
    remotes = [_remote(), _remote()]
    made: list[Any] = []

    def connect() -> Any:
        made.append(remotes[len(made)])
        return made[-1]

    svc = HandoverTraceService(_local(), connect=connect, holder=lambda: holder[0], bound=lambda: True)
    svc.on_handover("draining")
    svc.on_handover("released")
    _wait(lambda: svc.state == "remote" and len(made) == 1)
    holder[0] = 5151  # the agent restarted: another pid holds the name now
    svc.polling_pids()
    _wait(lambda: len(made) == 2 and svc.state == "remote")
    svc.request_trace(TraceRequest(pids=(7,), duration_ms=100)).result(timeout=1)
    assert remotes[1].requests and not remotes[0].requests
