"""Hostile viewers: each gets its clear error and the agent keeps serving the others.

One real agent (token required) serves a well-behaved StreamSource viewer
while other connections send random bytes, truncated frames, huge declared
lengths, wrong types, a wrong protocol version, a wrong or replayed token,
or stall without reading.
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpulens.ipc import auth, stream
from gpulens.ipc.stream_decode import FrameDecoder
from gpulens.sources.stream.source import LinkOptions, StreamSource, tcp_target
from tests.fakes.agent_helpers import (
    WAIT_S,
    AgentProc,
    EventLog,
    RawViewer,
    count_samples,
    make_token_file,
)
from tests.fakes.request_source import RawParams

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(module_exe: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[AgentProc, bytes, EventLog]]:
    tmp = tmp_path_factory.mktemp("hostile")
    token_file = make_token_file(tmp / "token")
    token = auth.load_token(token_file)
    agent = AgentProc(
        module_exe, tmp, "target",
        extra=["--interval", "0.05", "--simulated-gpus", "64", "--token-file", str(token_file), "--max-queue", "4"],
    )
    log = EventLog()
    src = StreamSource([tcp_target(agent.address)], LinkOptions(token=token))
    src.start(log)
    log.wait_for(lambda evs: count_samples("target")(evs) >= 2, what="the good viewer's samples")
    yield agent, token, log
    src.stop()
    agent.stop()


@pytest.fixture(scope="module")
def module_exe() -> str:  # the module-scoped agent needs a module-scoped executable
    import sys

    exe = Path(sys.executable).parent / "gpulens"
    if not exe.exists():
        pytest.skip(f"gpulens is not installed next to {sys.executable}")
    return str(exe)


def _still_serving(agent: AgentProc, log: EventLog) -> None:
    assert agent.alive()
    n = count_samples("target")(log.snapshot())
    log.wait_for(lambda evs: count_samples("target")(evs) >= n + 3, what="good viewer still fed")
    assert all(getattr(e, "up", True) for e in log.statuses("target"))


def _authed(agent: AgentProc, token: bytes) -> RawViewer:
    v = RawViewer(agent.port)
    ch = v.until(stream.Challenge)
    c = auth.new_nonce()
    v.send(stream.encode(stream.AuthResponse(cnonce=c, mac=auth.viewer_proof(token, ch.nonce, c))))
    v.until(stream.AuthOk)
    v.until(stream.Hello)
    return v


def _error_of(v: RawViewer) -> stream.ErrorMsg:
    err = v.until(stream.ErrorMsg)
    assert v.recv_msg() is None, "the agent closes after the error"
    v.close()
    return err


@pytest.mark.parametrize(
    ("payload", "code", "match"),
    [
        (os.urandom(64) + b"\xff" * 8, "auth", "authentication required"),
        (struct.pack(">I", 0xFFFFFFF0), "protocol", "declares 4294967280 bytes"),
        (struct.pack(">I", 3) + b"\xc1\xc1\xc1", "protocol", "not valid msgpack"),
    ],
    ids=["random-bytes", "huge-length", "malformed-msgpack"],
)
def test_garbage_before_auth(served: tuple[AgentProc, bytes, EventLog], payload: bytes, code: str, match: str) -> None:
    agent, _token, log = served
    v = RawViewer(agent.port)
    v.until(stream.Challenge)
    v.send(payload)
    err = _error_of(v)
    assert err.code in (code, "protocol") and (match in err.message or code == "auth")
    _still_serving(agent, log)


def test_random_bytes_frame_is_a_protocol_error(served: tuple[AgentProc, bytes, EventLog]) -> None:
    agent, _token, log = served
    v = RawViewer(agent.port)
    v.until(stream.Challenge)
    junk = bytes(range(256)) * 4
    v.send(struct.pack(">I", len(junk)) + junk)
    err = _error_of(v)
    assert err.code == "protocol" and "msgpack" in err.message
    _still_serving(agent, log)


def test_truncated_frame_and_disconnect_mid_frame(served: tuple[AgentProc, bytes, EventLog]) -> None:
    agent, token, log = served
    v = _authed(agent, token)
    frame = stream.encode(stream.Hello(proto=1, role="viewer"))
    v.send(frame[: len(frame) // 2])
    v.close()
    _still_serving(agent, log)


def test_wrong_types_after_hello(served: tuple[AgentProc, bytes, EventLog]) -> None:
    agent, token, log = served
    v = _authed(agent, token)
    v.send(stream.encode(stream.Hello(proto=1, role="viewer")))
    v.send(stream.encode_body({"t": "request", "id": "seven", "kind": "history"}))
    err = _error_of(v)
    assert err.code == "protocol" and "field 'id' must be an integer" in err.message
    _still_serving(agent, log)


def test_wrong_protocol_version_names_both(served: tuple[AgentProc, bytes, EventLog]) -> None:
    agent, token, log = served
    v = _authed(agent, token)
    v.send(stream.encode_body({"t": "hello", "proto": 99, "role": "viewer"}))
    err = _error_of(v)
    assert err.code == "version" and "version 99" in err.message and "version 1" in err.message
    _still_serving(agent, log)


def test_wrong_token(served: tuple[AgentProc, bytes, EventLog]) -> None:
    agent, _token, log = served
    v = RawViewer(agent.port)
    ch = v.until(stream.Challenge)
    c = auth.new_nonce()
    v.send(stream.encode(stream.AuthResponse(cnonce=c, mac=auth.viewer_proof(b"x" * 32, ch.nonce, c))))
    err = _error_of(v)
    assert err.code == "auth" and "wrong token" in err.message
    _still_serving(agent, log)


def test_replayed_response_is_refused(served: tuple[AgentProc, bytes, EventLog]) -> None:
    agent, token, log = served
    # Connection 1: a genuine exchange, recorded by an eavesdropper.
    v1 = RawViewer(agent.port)
    ch1 = v1.until(stream.Challenge)
    c = auth.new_nonce()
    recorded = stream.AuthResponse(cnonce=c, mac=auth.viewer_proof(token, ch1.nonce, c))
    v1.send(stream.encode(recorded))
    v1.until(stream.AuthOk)
    v1.close()
    # Connection 2: the recorded response verbatim fails (the agent's nonce is fresh).
    v2 = RawViewer(agent.port)
    v2.until(stream.Challenge)
    v2.send(stream.encode(recorded))
    assert "wrong token" in _error_of(v2).message
    # Connection 3: a reused client nonce is refused even with a matching MAC.
    v3 = RawViewer(agent.port)
    ch3 = v3.until(stream.Challenge)
    v3.send(stream.encode(stream.AuthResponse(cnonce=c, mac=auth.viewer_proof(token, ch3.nonce, c))))
    err = _error_of(v3)
    assert err.code == "auth" and "replayed" in err.message
    _still_serving(agent, log)


def test_viewer_without_token_is_told_to_pass_one(served: tuple[AgentProc, bytes, EventLog]) -> None:
    agent, _token, log = served
    log2 = EventLog()
    src = StreamSource([tcp_target(agent.address)], LinkOptions(backoff_min_s=5))
    src.start(log2)
    try:
        log2.wait_for(lambda evs: bool(evs), what="a status event")
        assert "requires a token: pass --token-file" in log2.snapshot()[0].reason
    finally:
        src.stop()
    _still_serving(agent, log)


def test_stalled_viewer_is_dropped(served: tuple[AgentProc, bytes, EventLog]) -> None:
    agent, token, log = served
    v = RawViewer(agent.port, rcvbuf=4096)
    ch = v.until(stream.Challenge)
    c = auth.new_nonce()
    v.send(stream.encode(stream.AuthResponse(cnonce=c, mac=auth.viewer_proof(token, ch.nonce, c))))
    v.send(stream.encode(stream.Hello(proto=1, role="viewer")))
    # Never read again: the agent's queue (4 frames) fills and it drops us.
    deadline = time.monotonic() + WAIT_S
    while "slow viewer" not in agent.log.read_text():
        assert time.monotonic() < deadline, "stalled viewer never dropped"
        time.sleep(0.1)
    v.close()
    _still_serving(agent, log)


def test_unsafe_token_file_and_open_listen_are_refused(gpulens_exe: str, tmp_path: Path) -> None:
    tok = make_token_file(tmp_path / "tok")
    tok.chmod(0o644)
    out = subprocess.run([gpulens_exe, "agent", "--listen", "127.0.0.1:0", "--token-file", str(tok), "--no-trace"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "mode 0644" in out.stderr and "chmod 600" in out.stderr
    # 0.0.0.0 means every interface: refused before anything is bound.
    out = subprocess.run([gpulens_exe, "agent", "--listen", "0.0.0.0:0", "--no-trace"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "needs --token-file" in out.stderr


def _fake_agent(payload: bytes) -> tuple[int, threading.Thread]:
    """A one-connection 'agent' that says hello, reads the viewer's hello, then sends ``payload``."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        conn, _ = listener.accept()
        with conn, listener:
            conn.sendall(stream.encode(stream.Hello(proto=1, role="agent", host="evil", interval_s=1.0)))
            conn.recv(65536)
            conn.sendall(payload)
            time.sleep(1)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return port, t


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        (struct.pack(">I", 0x7FFFFFFF), "declares 2147483647 bytes"),
        (stream.encode_body({"t": "sample", "sample": {"host": "evil", "time": 1.0, "cpu": {"total_percent": "hot"},
                                                        "memory": {}, "network": {}, "storage": {}}}),
         "cpu.total_percent: expected a number"),
        (stream.encode_body({"t": "hello", "proto": 7, "role": "agent"}), "version 7"),
        (stream.encode(stream.ErrorMsg("busy", "agent has 64 viewers")), "agent refused: agent has 64 viewers"),
    ],
    ids=["huge-length", "wrong-type-in-sample", "second-hello-wrong-version", "error-message"],
)
def test_hostile_agent_only_downs_its_own_link(payload: bytes, match: str) -> None:
    port, t = _fake_agent(payload)
    log = EventLog()
    src = StreamSource([tcp_target(f"127.0.0.1:{port}")], LinkOptions(backoff_min_s=30))
    src.start(log)
    try:
        log.wait_for(lambda evs: any(getattr(e, "up", True) is False for e in evs), what="link down")
        down = next(e for e in log.snapshot() if getattr(e, "up", True) is False)
        assert down.host == "evil" and match in down.reason
    finally:
        src.stop()
        t.join(timeout=5)


def test_hostile_agent_host_name_cannot_shape_download_path(tmp_path: Path) -> None:
    """An agent calling itself '../../x' still gets its files written inside the download dir."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    hostile_host = "../../escaped"

    def serve() -> None:
        conn, _ = listener.accept()
        with conn, listener:
            conn.sendall(stream.encode(stream.Hello(proto=1, role="agent", host=hostile_host, interval_s=1.0)))
            decoder = FrameDecoder()
            request = None
            deadline = time.monotonic() + WAIT_S
            while request is None and time.monotonic() < deadline:
                data = conn.recv(65536)
                if not data:
                    return
                for msg in decoder.feed(data):
                    if isinstance(msg, stream.Request):
                        request = msg
            assert request is not None
            conn.sendall(stream.encode(stream.FileChunk(id=request.id, name="trace.json", offset=0,
                                                        data=b"{}", last=True)))
            conn.sendall(stream.encode(stream.Response(id=request.id, ok=True, result={})))
            time.sleep(1)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    downloads = tmp_path / "a" / "b" / "dl"
    log = EventLog()
    src = StreamSource([tcp_target(f"127.0.0.1:{port}")], LinkOptions(backoff_min_s=30, download_dir=downloads))
    src.start(log)
    try:
        log.wait_for(lambda evs: any(getattr(e, "up", False) for e in evs), what="link up")
        result = src.request(hostile_host, RawParams("profile"), timeout_s=WAIT_S).result(timeout=WAIT_S)
        (saved,) = result.files.values()
        assert saved.parent == downloads and saved.read_bytes() == b"{}"
        assert not (tmp_path / "a" / "escaped-trace.json").exists()
    finally:
        src.stop()
        t.join(timeout=5)
