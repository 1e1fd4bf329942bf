"""The local control socket and its client, without torch: names, peer checks, a hostile agent."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpulens.ipc import stream
from gpulens.ipc.control import control_name, kineto_key, listener_accepts, peer_allowed
from gpulens.ipc.errors import (
    ProtocolError,
    ProtocolProblem,
    RequestFailed,
    StreamError,
    StreamProblem,
)
from gpulens.ipc.request_schema import TraceParams, TraceStatusParams
from gpulens.ipc.stream_decode import FrameDecoder
from gpulens.sources.stream.local_agent import LocalAgentLink


def test_control_name_follows_the_kineto_address(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KINETO_IPC_SOCKET_DIR", raising=False)
    assert kineto_key(None) == kineto_key("") == "abstract"
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    # A symlinked path to the same dir is the same endpoint, hence the same control socket.
    assert control_name(str(tmp_path / "link"), 1000) == control_name(str(tmp_path / "real"), 1000)
    assert control_name(str(tmp_path / "real"), 1000) != control_name(None, 1000)
    assert control_name(None, 1000) != control_name(None, 1001)
    monkeypatch.setenv("KINETO_IPC_SOCKET_DIR", str(tmp_path / "real"))
    assert control_name(None, 7) == control_name(str(tmp_path / "real"), 7)
    assert control_name(None, 7).startswith(b"\0gpulens-control-7-")


def test_peer_allowed_is_same_user_or_root() -> None:
    assert peer_allowed(1000, 1000) and peer_allowed(0, 1000) and peer_allowed(0, 0)
    assert not peer_allowed(1001, 1000) and not peer_allowed(1000, 0)


def test_root_agent_serves_every_local_user_each_for_itself() -> None:
    # A root agent's control socket takes any uid (the principal is that uid);
    # another user's agent only its own user and root.
    assert listener_accepts(1001, 0) and listener_accepts(0, 0)
    assert listener_accepts(1000, 1000) and listener_accepts(0, 1000) and not listener_accepts(1001, 1000)


FakeAgent = Callable[[Callable[[socket.socket], None]], None]


@pytest.fixture
def fake_agent(tmp_path: Path) -> Iterator[FakeAgent]:
    """Bind this host's control name for ``tmp_path`` in THIS process and run ``script(conn)``."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(control_name(str(tmp_path), os.geteuid()))
    srv.listen(1)
    threads: list[threading.Thread] = []

    def start(script: Callable[[socket.socket], None]) -> None:
        def serve() -> None:
            conn, _ = srv.accept()
            try:
                script(conn)
            except OSError:
                pass
            finally:
                conn.close()

        t = threading.Thread(target=serve, daemon=True)
        t.start()
        threads.append(t)

    yield start
    srv.close()
    for t in threads:
        t.join(timeout=5)


def _hello() -> bytes:
    return stream.encode(stream.Hello(proto=stream.PROTOCOL_VERSION, role="agent", host="x", caps=("trace",)))


def _read_request(conn: socket.socket) -> stream.Request:
    dec = FrameDecoder()
    while True:
        data = conn.recv(65536)
        assert data, "client went away"
        for msg in dec.feed(data):
            if isinstance(msg, stream.Request):
                return msg


def test_hostile_agent_file_name_is_refused(fake_agent: FakeAgent, tmp_path: Path) -> None:
    def script(conn: socket.socket) -> None:
        conn.sendall(_hello())
        req = _read_request(conn)
        conn.sendall(stream.encode(stream.FileChunk(id=req.id, name="../evil", offset=0, data=b"x", last=True)))
        conn.recv(1)  # until the client hangs up

    fake_agent(script)
    link = LocalAgentLink(str(tmp_path), os.getpid(), os.geteuid(), tmp_path / "dl")
    try:
        with pytest.raises(RequestFailed, match="unsafe file name"):
            link.request("", TraceParams(), 10).result(timeout=15)
    finally:
        link.close()
    assert not (tmp_path / "evil").exists() and not (tmp_path / "dl").exists()


def test_agent_that_asks_for_a_token_is_refused(fake_agent: FakeAgent, tmp_path: Path) -> None:
    def script(conn: socket.socket) -> None:
        conn.sendall(stream.encode(stream.Challenge(proto=stream.PROTOCOL_VERSION, nonce=b"\0" * 32)))
        conn.recv(1)

    fake_agent(script)
    with pytest.raises(StreamError) as err:
        LocalAgentLink(str(tmp_path), os.getpid(), os.geteuid(), tmp_path)
    assert err.value.problem is StreamProblem.TOKEN_REQUIRED


def test_chunks_are_saved_and_out_of_order_is_refused(fake_agent: FakeAgent, tmp_path: Path) -> None:
    def script(conn: socket.socket) -> None:
        conn.sendall(_hello())
        req = _read_request(conn)
        for off, data, last in ((0, b"ab", False), (2, b"cd", True)):
            conn.sendall(stream.encode(stream.FileChunk(id=req.id, name="t.json", offset=off, data=data, last=last)))
        conn.sendall(stream.encode(stream.Response(id=req.id, ok=True, result={"files": {"1": "t.json"}})))
        req = _read_request(conn)
        conn.sendall(stream.encode(stream.FileChunk(id=req.id, name="u.json", offset=5, data=b"x", last=True)))
        conn.recv(1)

    fake_agent(script)
    link = LocalAgentLink(str(tmp_path), os.getpid(), os.geteuid(), tmp_path / "dl")
    try:
        res = link.request("", TraceParams(), 10).result(timeout=15)
        assert res.files["t.json"].read_bytes() == b"abcd"
        with pytest.raises(RequestFailed, match="out of order"):
            link.request("", TraceParams(), 10).result(timeout=15)
    finally:
        link.close()


# -- the local client is the stream client's session on another transport ---------


def _sample_frame() -> bytes:
    from gpulens.collectors.synthetic import SyntheticSampler

    return stream.encode(stream.SampleMsg(sample=SyntheticSampler(hostname="x", gpus=1).sample()))


def test_live_samples_are_read_and_dropped_while_a_request_runs(fake_agent: FakeAgent, tmp_path: Path) -> None:
    def script(conn: socket.socket) -> None:
        conn.sendall(_hello() + _sample_frame())
        req = _read_request(conn)
        conn.sendall(_sample_frame() + stream.encode(stream.Response(id=req.id, ok=True, result={"state": "done"})))
        conn.recv(1)

    fake_agent(script)
    link = LocalAgentLink(str(tmp_path), os.getpid(), os.geteuid(), tmp_path / "dl")
    try:
        assert link.hello.caps == ("trace",) and link.hello.host == "x"
        assert link.request("", TraceStatusParams(tag="t1"), 10).result(timeout=15).result == {"state": "done"}
    finally:
        link.close()


def test_close_fails_the_pending_request_and_refuses_new_ones(fake_agent: FakeAgent, tmp_path: Path) -> None:
    got = threading.Event()

    def script(conn: socket.socket) -> None:
        conn.sendall(_hello())
        _read_request(conn)
        got.set()
        conn.recv(1)

    fake_agent(script)
    link = LocalAgentLink(str(tmp_path), os.getpid(), os.geteuid(), tmp_path / "dl")
    fut = link.request("", TraceParams(), 60)
    assert got.wait(15)
    link.close("interrupted")
    with pytest.raises(RequestFailed, match="connection lost: interrupted"):
        fut.result(timeout=15)
    with pytest.raises(RequestFailed, match="connection is closed"):
        link.request("", TraceParams(), 10).result(timeout=15)


def test_agent_gone_before_its_hello_or_nameless_is_refused(fake_agent: FakeAgent, tmp_path: Path) -> None:
    fake_agent(lambda conn: None)  # accepts, then hangs up
    with pytest.raises(StreamError) as err:
        LocalAgentLink(str(tmp_path), os.getpid(), os.geteuid(), tmp_path)
    assert err.value.problem is StreamProblem.CLOSED

    def nameless(conn: socket.socket) -> None:
        conn.sendall(stream.encode(stream.Hello(proto=stream.PROTOCOL_VERSION, role="agent", host=" \x1b ")))
        conn.recv(1)

    fake_agent(nameless)
    with pytest.raises(ProtocolError) as perr:
        LocalAgentLink(str(tmp_path), os.getpid(), os.geteuid(), tmp_path)
    assert perr.value.problem is ProtocolProblem.BAD_HOST
