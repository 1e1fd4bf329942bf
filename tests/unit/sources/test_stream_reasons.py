"""Why a stream session refuses or ends is a value (issue 33 item 3): ``err.problem`` at every raise site.

The handshake, the link, the request table and the local control socket each raise a StreamError
(ProtocolError, AuthError) whose reason is a StreamProblem, ProtocolProblem or AuthProblem; the
tests compare those, not the sentences (tests/unit/ipc/test_stream_codec.py pins one per class).
The frame decoder's reasons are in that file too.
"""

from __future__ import annotations

import os
import pickle
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path

import pytest

from gpulens.collectors.synthetic import SyntheticSampler
from gpulens.core.errors import ConfigProblem
from gpulens.ipc import auth, stream
from gpulens.ipc.channels import ChannelClosed
from gpulens.ipc.errors import (
    AuthError,
    AuthProblem,
    ProtocolError,
    ProtocolProblem,
    RequestFailed,
    StreamError,
    StreamProblem,
    VersionMismatch,
)
from gpulens.ipc.request_schema import ProfileAnswer, decode_answer, decode_params
from gpulens.ipc.stream_decode import FrameDecoder
from gpulens.sources.stream import control_trace, handshake, link, local_agent
from gpulens.sources.stream.handshake import TokenRequired

TOKEN = b"t" * 32
CHALLENGE = stream.Challenge(proto=stream.PROTOCOL_VERSION, nonce=b"\x01" * 32)
HELLO = stream.Hello(proto=stream.PROTOCOL_VERSION, role="agent", host="n1")


def _shake(msgs: list[stream.Message], token: bytes | None) -> stream.Hello:
    """The viewer's handshake against an agent that sends ``msgs``, one per read."""
    queue = deque(msgs)

    def read() -> list[stream.Message]:
        return [queue.popleft()]

    return handshake.handshake(read, lambda data: None, token, deque())


@pytest.mark.parametrize(("msgs", "token", "error", "problem"), [
    ([CHALLENGE], None, TokenRequired, AuthProblem.TOKEN_REQUIRED),
    ([CHALLENGE, CHALLENGE], TOKEN, ProtocolError, ProtocolProblem.UNEXPECTED_MESSAGE),
    ([stream.AuthOk(mac=b"m")], None, ProtocolError, ProtocolProblem.UNEXPECTED_MESSAGE),
    ([stream.AuthOk(mac=b"m")], TOKEN, AuthError, AuthProblem.AGENT_PROOF_MISSING),
    ([CHALLENGE, stream.AuthOk(mac=b"m" * 32)], TOKEN, AuthError, AuthProblem.AGENT_PROOF_WRONG),
    ([HELLO], TOKEN, AuthError, AuthProblem.AGENT_PROOF_MISSING),
    ([CHALLENGE, HELLO], TOKEN, AuthError, AuthProblem.AGENT_PROOF_MISSING),
    ([stream.Response(id=1, ok=True)], None, ProtocolError, ProtocolProblem.UNEXPECTED_MESSAGE),
    ([stream.Hello(proto=stream.PROTOCOL_VERSION, role="viewer")], None, ProtocolError,
     ProtocolProblem.UNEXPECTED_MESSAGE),
    ([stream.Hello(proto=stream.PROTOCOL_VERSION, role="agent", host="h" * 256)], None, ProtocolError,
     ProtocolProblem.BAD_HOST),
    ([stream.Hello(proto=stream.PROTOCOL_VERSION, role="agent", host=" \x1b ")], None, ProtocolError,
     ProtocolProblem.BAD_HOST),
    ([stream.ErrorMsg(code="version", message="v9")], None, VersionMismatch, ProtocolProblem.BAD_VERSION),
    ([stream.ErrorMsg(code="auth", message="no")], TOKEN, AuthError, AuthProblem.REFUSED),
    ([stream.ErrorMsg(code="busy", message="64 viewers")], None, StreamError, StreamProblem.REFUSED),
])
def test_the_handshake_says_why_it_refuses_the_agent(msgs: list[stream.Message], token: bytes | None,
                                                     error: type[StreamError], problem: object) -> None:
    with pytest.raises(StreamError) as err:
        _shake(msgs, token)
    assert type(err.value) is error and err.value.problem is problem


def test_an_agent_that_proves_its_token_is_accepted() -> None:
    sent: list[bytes] = []
    queue: deque[stream.Message] = deque([CHALLENGE])

    def read() -> list[stream.Message]:
        if not queue:  # the viewer answered the challenge: the agent proves it, then says hello
            (answer,) = FrameDecoder().feed(sent[-1])
            assert isinstance(answer, stream.AuthResponse)
            queue.extend([stream.AuthOk(mac=auth.agent_proof(TOKEN, CHALLENGE.nonce, answer.cnonce)), HELLO])
        return [queue.popleft()]

    assert handshake.handshake(read, sent.append, TOKEN, deque()).host == "n1"


class _Chan:
    """A channel whose reads time out (``link.Channel``)."""

    def recv(self, timeout_s: float) -> bytes:
        raise TimeoutError

    def send(self, data: bytes) -> None:
        pass

    def describe_eof(self) -> str:
        return "eof"

    def close(self) -> None:
        pass


def test_the_link_says_why_a_session_ends() -> None:
    stop = threading.Event()
    hl = link.HostLink(link.Target(address="x:1", kind="tcp"), lambda e: None, link.LinkOptions(), stop)
    ends: list[tuple[object, StreamError]] = []
    calls: list[tuple[object, Callable[[], object]]] = [
        (StreamProblem.HANDSHAKE_TIMEOUT, lambda: hl._read(_Chan(), FrameDecoder(), 1.0)),
        (StreamProblem.IDLE, lambda: hl._read(_Chan(), FrameDecoder(), None)),
        (ProtocolProblem.UNEXPECTED_MESSAGE, lambda: hl._dispatch("h", HELLO)),
        (StreamProblem.NO_SESSION, lambda: hl._dispatch("h", stream.FileChunk(id=1, name="a", offset=0, data=b"",
                                                                              last=True))),
        (ProtocolProblem.FOREIGN_SAMPLE, lambda: hl._dispatch("h", stream.SampleMsg(
            SyntheticSampler(hostname="other", gpus=0).sample()))),
    ]
    for expected, call in calls:
        with pytest.raises(StreamError) as err:
            call()
        ends.append((expected, err.value))
    stop.set()
    with pytest.raises(StreamError) as err:
        hl._read(_Chan(), FrameDecoder(), None)
    ends.append((StreamProblem.STOPPED, err.value))
    assert [e.problem for _, e in ends] == [want for want, _ in ends]


def test_a_login_banner_keeps_the_decoders_reason() -> None:
    """Over ssh the refusal gains what the command printed; the reason stays the decoder's."""
    from gpulens.ipc.channels import CommandChannel

    stop = threading.Event()
    hl = link.HostLink(link.Target(address="ssh", kind="command"), lambda e: None, link.LinkOptions(), stop)
    chan = CommandChannel(["sh", "-c", "echo Welcome to the cluster; sleep 5"])
    try:
        with pytest.raises(ProtocolError) as err:
            hl._begin(chan)
    finally:
        chan.close()
    assert err.value.problem is ProtocolProblem.FRAME_TOO_LARGE
    assert isinstance(err.value.__cause__, ProtocolError) and err.value.__cause__.problem is err.value.problem


def test_a_local_agent_link_says_why_it_failed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with pytest.raises(StreamError) as err:
        local_agent.ControlChannel(str(tmp_path), 4242, os.geteuid())  # nobody listens there
    assert err.value.problem is StreamProblem.NO_CONTROL_SOCKET
    monkeypatch.setattr(local_agent.ControlChannel, "__init__", lambda self, *args: None)
    for raised, problem in [
        (TokenRequired("the agent requires a token", problem=AuthProblem.TOKEN_REQUIRED), StreamProblem.TOKEN_REQUIRED),
        (ChannelClosed("the local agent closed the connection"), StreamProblem.CLOSED),
        (ConnectionResetError(104, "Connection reset by peer"), StreamProblem.SOCKET_ERROR),
    ]:
        def serve(self: link.HostLink, chan: object, raised: Exception = raised) -> stream.Hello:
            raise raised

        monkeypatch.setattr(link.HostLink, "serve", serve)
        with pytest.raises(StreamError) as err:
            local_agent.LocalAgentLink(str(tmp_path), 4242, 0, tmp_path)
        assert type(err.value) is StreamError and err.value.problem is problem, raised


class _NoTraces:
    """A link whose agent does not serve traces."""

    hello = stream.Hello(proto=stream.PROTOCOL_VERSION, role="agent", host="h", caps=("history",))

    def __init__(self, *args: object) -> None:
        pass

    def close(self, reason: str = "closed") -> None:
        pass


def test_connect_owner_says_why_the_holder_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def refused() -> StreamProblem | ProtocolProblem | AuthProblem | None:
        with pytest.raises(StreamError) as err:
            control_trace.connect_owner(str(tmp_path), tmp_path)
        return err.value.problem

    monkeypatch.setattr(control_trace, "holder_of", lambda socket_dir: None)
    monkeypatch.setattr(control_trace, "root_control_pid", lambda socket_dir: None)
    assert refused() is StreamProblem.NO_HOLDER
    monkeypatch.setattr(control_trace, "holder_of", lambda socket_dir: (4242, "python3", 1000))
    monkeypatch.setattr(control_trace, "untrusted_holder", lambda pid: None)
    monkeypatch.setattr(control_trace, "is_gpulens", lambda pid: False)
    assert refused() is StreamProblem.NOT_GPULENS
    monkeypatch.setattr(control_trace, "is_gpulens", lambda pid: True)
    monkeypatch.setattr(control_trace, "proc_uid", lambda pid: None)
    assert refused() is StreamProblem.HOLDER_GONE
    monkeypatch.setattr(control_trace, "proc_uid", lambda pid: 1000)
    monkeypatch.setattr(control_trace, "LocalAgentLink", _NoTraces)
    assert refused() is StreamProblem.NO_TRACE_SERVICE


def test_encoding_and_the_request_schema_say_why() -> None:
    with pytest.raises(ProtocolError) as err:
        stream.encode_body({"t": "chunk", "data": b"x" * (stream.MAX_FRAME_BYTES + 1)})
    assert err.value.problem is ProtocolProblem.FRAME_TOO_LARGE
    with pytest.raises(ProtocolError) as err:
        decode_params("profile", {"pids": [1], "duration_s": "5"})
    assert err.value.problem is ProtocolProblem.BAD_PARAMS
    with pytest.raises(ProtocolError) as err:
        decode_answer(ProfileAnswer, [])
    assert err.value.problem is ProtocolProblem.BAD_ANSWER


def test_reasons_survive_pickling_and_default_to_none(tmp_path: Path) -> None:
    p = tmp_path / "tok"
    p.write_text("x" * 64)
    p.chmod(0o644)
    with pytest.raises(AuthError) as err:
        auth.load_token(p)
    for e in (err.value, ProtocolError("m", problem=ProtocolProblem.OUT_OF_ORDER), VersionMismatch("v"),
              StreamError("s", problem=StreamProblem.IDLE)):
        back = pickle.loads(pickle.dumps(e))
        assert (type(back), str(back), back.problem) == (type(e), str(e), e.problem)
    assert pickle.loads(pickle.dumps(err.value)).file_problem is ConfigProblem.UNSAFE
    assert RequestFailed("no").problem is None and ProtocolError("x").problem is None
