"""Errors raised by the ipc package (Kineto endpoint, trace requests).

Exception tree::

    GpulensError                  (gpulens.core.errors)
    └── IpcError                  base for everything in gpulens.ipc
        ├── MalformedDatagram     a Kineto datagram that breaks the wire format;
        │                         the endpoint logs and drops it, never fatal
        │                         (its reason a DatagramProblem)
        ├── EndpointBusy          the daemon name is already bound (dynolog or
        │                         another gpulens); says which and what to do
        │                         (a socket dir too long for client names: IpcError)
        ├── DynologRpcError       dynolog's JSON RPC on port 1778 failed
        ├── TraceError            a trace request could not be honoured
        │   ├── NotTraceable      the target never polls, is not ours, or is gone
        │   └── TraceTimeout      the trace file did not appear in time
        └── StreamError           the agent <-> viewer msgpack stream (ipc/stream.py);
            │                     raised as it is, its reason a StreamProblem (a session
            │                     that ended: idle, stopped, refused; the local control socket)
            ├── ProtocolError     a malformed, oversized or wrongly typed frame, or a message
            │   │                 out of place; its reason a ProtocolProblem
            │   └── VersionMismatch  the peer speaks another protocol version
            │                        (ProtocolProblem.BAD_VERSION)
            ├── AuthError         bad/replayed token, an agent that does not prove it holds
            │                     it, or a token file not mode 0600; its reason an AuthProblem
            │                     (a token file's: TOKEN_FILE, with ``file_problem`` a ConfigProblem)
            └── RequestFailed     the agent answered a request with an error

Reading a trace file is analysis/trace's job (TraceFileError lives there).

Every error has a short ``title`` and a message a user can act on. The stream's
reasons are values (``err.problem``: a :class:`StreamProblem`, :class:`ProtocolProblem`
or :class:`AuthProblem`, None where a raise site names none) that callers and tests
compare; the sentence, ``str(err)``, is rendered where the error is made.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import TYPE_CHECKING

from gpulens.core.errors import ConfigProblem, GpulensError

if TYPE_CHECKING:  # a type only: the kineto package imports this module
    from gpulens.ipc.kineto.untraceable import Untraceable


class IpcError(GpulensError):
    """Base of the ipc package's errors."""

    title = "ipc error"


class DatagramProblem(enum.Enum):
    """Which rule of the Kineto IPC wire format a datagram broke (:class:`MalformedDatagram`'s ``problem``)."""

    SHORT_HEADER = "short header"
    """Fewer than the 40 bytes of the header."""
    BAD_TYPE = "bad type"
    """The message type is not NUL-terminated, or not ASCII."""
    SIZE_MISMATCH = "size mismatch"
    """The header's body size disagrees with the bytes the datagram carries."""
    TOO_LARGE = "too large"
    """Larger than any datagram the protocol sends."""
    BAD_BODY = "bad body"
    """A body too short for its type, a pid count out of range or one that does not fill the body."""
    UNKNOWN_TYPE = "unknown type"
    """A message type a daemon does not read (``req`` and ``ctxt`` are)."""


class MalformedDatagram(IpcError):
    """A datagram that does not follow the Kineto IPC wire format; ``problem`` says which rule it broke."""

    title = "malformed datagram"

    def __init__(self, message: str, *, problem: DatagramProblem) -> None:
        super().__init__(message)
        self.problem = problem

    def __reduce__(self) -> tuple[object, ...]:
        """Pickled with its reason."""
        return (_malformed, (str(self), self.problem))


def _malformed(message: str, problem: DatagramProblem) -> MalformedDatagram:
    return MalformedDatagram(message, problem=problem)


class EndpointBusy(IpcError):
    """The Kineto daemon name is already bound by another process."""

    title = "kineto endpoint busy"


class DynologRpcError(IpcError):
    """A request to a running dynolog daemon's JSON RPC failed."""

    title = "dynolog rpc error"


class TraceError(IpcError):
    """A trace request could not be honoured."""

    title = "trace failed"


class NotTraceable(TraceError):
    """The target process cannot be traced; the message says why and how to fix it.

    ``reasons``: the diagnosis of each pid refused before its trace started
    (:class:`gpulens.ipc.kineto.untraceable.Untraceable`, whose sentences the
    message holds); empty where no diagnosis refused it (it exited, never polled in time).
    """

    title = "not traceable"

    def __init__(self, message: str, *, reasons: Mapping[int, Untraceable] | None = None) -> None:
        super().__init__(message)
        self.reasons: dict[int, Untraceable] = dict(reasons or {})


class TraceTimeout(TraceError):
    """The trace file did not appear before the deadline."""

    title = "trace timed out"


class StreamProblem(enum.Enum):
    """Why a stream session ended or never began, for a StreamError raised as it is (not a subclass)."""

    STOPPED = "stopped"
    """The viewer is stopping: the link's reader was told to end."""
    HANDSHAKE_TIMEOUT = "handshake timeout"
    """No answer from the agent before the handshake's deadline."""
    IDLE = "idle"
    """No data from the agent for the link's idle limit."""
    NO_SESSION = "no session"
    """A message dispatched before the session's hello (the link's own bug, not the agent's)."""
    REFUSED = "refused"
    """The agent sent an ``error`` message whose code is neither ``version`` nor ``auth``; its words, cleaned."""
    NO_CONTROL_SOCKET = "no control socket"
    """The gpulens holding the Kineto name serves no control socket (an older agent, or a TUI)."""
    NOT_THE_HOLDER = "not the holder"
    """The control socket's process (``SO_PEERCRED``) is not the one holding the Kineto name."""
    UNTRUSTED_HOLDER = "untrusted holder"
    """The Kineto name's holder runs as another user, not root: it may be squatting; it gets no request."""
    NO_HOLDER = "no holder"
    """Nobody holding the Kineto name is found in /proc, and no root gpulens serves its control socket."""
    NOT_GPULENS = "not gpulens"
    """The Kineto name is held by another program."""
    HOLDER_GONE = "holder gone"
    """The gpulens holding the Kineto name exited while it was checked."""
    NO_TRACE_SERVICE = "no trace service"
    """The gpulens holding the Kineto name does not offer traces (no ``trace`` in its hello's caps)."""
    TOKEN_REQUIRED = "token required"
    """The local agent asked for a token on its control socket (where the kernel names the peer instead)."""
    CLOSED = "closed"
    """The local agent closed its control socket before its hello."""
    SOCKET_ERROR = "socket error"
    """The local control socket failed with an OS error (reset, refused) during the handshake."""


class ProtocolProblem(enum.Enum):
    """Why a frame or message breaks the protocol: what a caller or a test compares, not the sentence."""

    FRAME_TOO_LARGE = "frame too large"
    """A frame whose declared length (read) or encoded body (sent) is over the frame limit."""
    NOT_MSGPACK = "not msgpack"
    """A body that is not valid msgpack: damaged, cut short inside the frame, trailing bytes, nested too
    deeply, a map key that is not a string, or a declared length over msgpack's bounds."""
    NOT_A_MAP = "not a map"
    """A body that is valid msgpack but not a map."""
    NO_MESSAGE_TYPE = "no message type"
    """A map without a string ``t``."""
    UNKNOWN_MESSAGE = "unknown message"
    """A ``t`` that names no message of the protocol."""
    MISSING_FIELD = "missing field"
    """A message without a field it must have."""
    WRONG_TYPE = "wrong type"
    """A field of the wrong type (True where an integer goes, caps that are not a list of strings)."""
    OUT_OF_RANGE = "out of range"
    """A field of the right type outside its choices or bounds (a hello's role, a negative offset, too many
    history samples)."""
    BAD_SAMPLE = "bad sample"
    """A sample (live or in a history) that does not fit the sample model; the SchemaError cause names the path."""
    UNREADABLE_ENVELOPE = "unreadable envelope"
    """A sample or history frame msgpack reads but the sample decoder cannot (a repeated key, nested too deeply)."""
    BAD_VERSION = "bad version"
    """The peer speaks a protocol version this side does not (always so for VersionMismatch)."""
    UNEXPECTED_MESSAGE = "unexpected message"
    """A known message where the session allows none of its kind: a second challenge, an auth_ok no token
    asked for, something else before the agent's hello, a hello or challenge after it."""
    BAD_HOST = "bad host"
    """The agent's hello names no host, or one longer than the viewer accepts."""
    FOREIGN_SAMPLE = "foreign sample"
    """A sample for a host other than the one the agent's hello declared."""
    BAD_PARAMS = "bad params"
    """A request's params that break its kind's schema; the sentence is the refusal the viewer is sent."""
    BAD_ANSWER = "bad answer"
    """A response's result that breaks its kind's answer schema."""
    ANSWER_TOO_LARGE = "answer too large"
    """More history samples, files or bytes for one request than the viewer accepts."""
    UNSAFE_NAME = "unsafe name"
    """A file name from the agent that is not a plain safe name (a path, ``..``)."""
    OUT_OF_ORDER = "out of order"
    """A file chunk not at its file's current offset, or after its last chunk."""


class AuthProblem(enum.Enum):
    """Why token authentication failed: what a caller or a test compares, not the sentence."""

    TOKEN_FILE = "token file"
    """The token file cannot be used; ``AuthError.file_problem`` (a ConfigProblem) says why."""
    BAD_NONCE = "bad nonce"
    """A viewer's client nonce of the wrong length."""
    WRONG_TOKEN = "wrong token"
    """The viewer's proof does not verify: it holds another token (or replays one to another connection)."""
    REPLAYED = "replayed"
    """A viewer's response whose client nonce was already used."""
    AGENT_PROOF_WRONG = "agent proof wrong"
    """The agent's auth_ok MAC does not verify: an impostor, or an agent with another token."""
    AGENT_PROOF_MISSING = "agent proof missing"
    """The agent skipped its proof: an auth_ok without a challenge, or its hello before auth_ok."""
    TOKEN_REQUIRED = "token required"
    """The peer asks for a token this side does not hold."""
    REFUSED = "refused"
    """The agent sent an ``error`` message of code ``auth``; its words, cleaned."""


class StreamError(IpcError):
    """Base of the agent/viewer stream errors; the connection is closed.

    ``problem``: the reason as a value; a :class:`StreamProblem` where a StreamError is raised as it is
    (subclasses narrow it: ProtocolError's a :class:`ProtocolProblem`, AuthError's an :class:`AuthProblem`);
    None where the raise site names none (RequestFailed). ``str(err)`` is the sentence.
    """

    title = "stream error"
    problem: StreamProblem | ProtocolProblem | AuthProblem | None

    def __init__(self, message: str, *, problem: StreamProblem | None = None) -> None:
        super().__init__(message)
        self.problem = problem


class ProtocolError(StreamError):
    """A frame that is malformed, too large or has the wrong types; ``problem`` says which rule it breaks."""

    title = "protocol error"
    problem: ProtocolProblem | None

    def __init__(self, message: str, *, problem: ProtocolProblem | None = None) -> None:
        super().__init__(message)
        self.problem = problem


class VersionMismatch(ProtocolError):
    """The peer speaks a protocol version this side does not support (``problem``: BAD_VERSION)."""

    title = "protocol version mismatch"

    def __init__(self, message: str, *, problem: ProtocolProblem | None = ProtocolProblem.BAD_VERSION) -> None:
        super().__init__(message, problem=problem)


class AuthError(StreamError):
    """Token authentication failed, or the token file is unsafe.

    ``problem``: why, an :class:`AuthProblem` (TOKEN_FILE for a token file). ``file_problem``: what is
    wrong with a token file, as a value (a :class:`~gpulens.core.errors.ConfigProblem`); None for a
    failed handshake.
    """

    title = "authentication failed"
    problem: AuthProblem | None

    def __init__(self, message: str, *, problem: AuthProblem | None = None,
                 file_problem: ConfigProblem | None = None) -> None:
        super().__init__(message)
        self.problem = problem
        self.file_problem = file_problem


class RequestFailed(StreamError):
    """The agent answered a request with an error (the message is the agent's)."""

    title = "request failed"
