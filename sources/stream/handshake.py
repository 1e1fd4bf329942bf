"""The viewer's side of a session's opening: the token proven both ways, then the agent's checked hello.

What the link trusts (docs/security.md): nothing the agent says until it is
checked. With a token the agent must prove it holds it too (challenge, then
an ``auth_ok`` whose MAC verifies) before its hello is accepted; without one,
an agent that asks for it ends the handshake (:class:`TokenRequired`). The
hello must name a host (its strings cleaned, :func:`checked_hello`), the one
every sample of the session must carry. An agent's ``error`` message, here or
later in the session, ends it with the error its code names (:func:`refusal`).
Sans-IO: :class:`~gpulens.sources.stream.link.HostLink` reads and sends.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from gpulens.core.sanitize import clean_text
from gpulens.ipc import auth, stream
from gpulens.ipc.errors import (
    AuthError,
    AuthProblem,
    ProtocolError,
    ProtocolProblem,
    StreamError,
    StreamProblem,
    VersionMismatch,
)

MAX_HOST_NAME = 255
"""The longest host name an agent's hello may declare."""


class TokenRequired(AuthError):
    """The agent asks for a token and the viewer holds none."""


def handshake(
    read: Callable[[], list[stream.Message]],
    send: Callable[[bytes], None],
    token: bytes | None,
    backlog: deque[stream.Message],
) -> stream.Hello:
    """Authenticate (both ways when we hold a token) and return the agent's checked hello.

    ``read``: the messages completed by one read (raises when idle, closed or
    past the handshake's deadline); ``send``: one frame to the agent. Messages
    after the hello that arrived in the same read are left in ``backlog``.
    """
    cnonce = snonce = b""
    proven = False
    while True:
        while not backlog:
            backlog.extend(read())
        msg = backlog.popleft()
        if isinstance(msg, stream.ErrorMsg):
            raise refusal(msg)
        if isinstance(msg, stream.Challenge):
            if token is None:
                raise TokenRequired("the agent requires a token: pass --token-file", problem=AuthProblem.TOKEN_REQUIRED)
            if cnonce:
                raise ProtocolError("the agent sent a second challenge", problem=ProtocolProblem.UNEXPECTED_MESSAGE)
            snonce, cnonce = msg.nonce, auth.new_nonce()
            mac = auth.viewer_proof(token, snonce, cnonce)
            send(stream.encode(stream.AuthResponse(cnonce=cnonce, mac=mac)))
            continue
        if isinstance(msg, stream.AuthOk):
            if token is None:
                raise ProtocolError("the agent sent auth_ok, but no token was asked for",
                                    problem=ProtocolProblem.UNEXPECTED_MESSAGE)
            if not cnonce:
                raise AuthError(
                    "the agent did not prove it holds the token: it sent auth_ok without a challenge",
                    problem=AuthProblem.AGENT_PROOF_MISSING,
                )
            try:
                auth.verify_agent(token, snonce, cnonce, msg.mac)
            except AuthError:
                raise AuthError(
                    "the agent did not prove it holds the token: its auth_ok MAC is wrong "
                    "(an impostor, or an agent with another token)",
                    problem=AuthProblem.AGENT_PROOF_WRONG,
                ) from None
            proven = True
            continue
        if isinstance(msg, stream.Hello) and msg.role == "agent":
            if token is not None and not proven:
                skipped = "auth_ok" if cnonce else "the challenge"
                raise AuthError(
                    f"the agent did not prove it holds the token: it sent its hello without {skipped}; "
                    "refusing it (an impostor, or an agent started without --token-file: then "
                    "connect without --token-file)",
                    problem=AuthProblem.AGENT_PROOF_MISSING,
                )
            return checked_hello(msg)
        raise ProtocolError(f"expected the agent's hello, got '{stream.to_wire(msg)['t']}'",
                            problem=ProtocolProblem.UNEXPECTED_MESSAGE)


def checked_hello(msg: stream.Hello) -> stream.Hello:
    """The agent's hello with its strings cleaned; it must name its host."""
    if len(msg.host) > MAX_HOST_NAME:
        raise ProtocolError(f"agent's host name longer than {MAX_HOST_NAME} characters", problem=ProtocolProblem.BAD_HOST)
    host = clean_text(msg.host).strip()
    if not host:
        raise ProtocolError("the agent's hello names no host", problem=ProtocolProblem.BAD_HOST)
    return stream.Hello(
        proto=msg.proto,
        role=msg.role,
        host=host,
        caps=tuple(clean_text(c)[:64] for c in msg.caps[:64]),
        version=clean_text(msg.version)[:64],
        interval_s=msg.interval_s,
        since=msg.since,
    )


def refusal(msg: stream.ErrorMsg) -> StreamError:
    """The error an agent's ``error`` message ends the session with: its code's kind, its words cleaned."""
    text = f"agent refused: {clean_text(msg.message[:300])}"
    if msg.code == "version":
        return VersionMismatch(text)
    if msg.code == "auth":
        return AuthError(text, problem=AuthProblem.REFUSED)
    return StreamError(text, problem=StreamProblem.REFUSED)
