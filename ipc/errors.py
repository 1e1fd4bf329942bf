"""Errors raised by the ipc package (Kineto endpoint, trace requests).

Exception tree::

    GpulensError                  (gpulens.core.errors)
    └── IpcError                  base for everything in gpulens.ipc
        ├── MalformedDatagram     a Kineto datagram that breaks the wire format;
        │                         the endpoint logs and drops it, never fatal
        ├── EndpointBusy          the daemon name is already bound (dynolog or
        │                         another gpulens); says which and what to do
        │                         (a socket dir too long for client names: IpcError)
        ├── DynologRpcError       dynolog's JSON RPC on port 1778 failed
        ├── TraceError            a trace request could not be honoured
        │   ├── NotTraceable      the target never polls, is not ours, or is gone
        │   └── TraceTimeout      the trace file did not appear in time
        └── StreamError           the agent <-> viewer msgpack stream (ipc/stream.py)
            ├── ProtocolError     a malformed, oversized or wrongly typed frame
            │   └── VersionMismatch  the peer speaks another protocol version
            ├── AuthError         bad/replayed token, or a token file not mode 0600
            └── RequestFailed     the agent answered a request with an error

Reading a trace file is analysis/trace's job (TraceFileError lives there).

Every error has a short ``title`` and a message a user can act on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from gpulens.core.errors import ConfigProblem, GpulensError

if TYPE_CHECKING:  # a type only: the kineto package imports this module
    from gpulens.ipc.kineto.untraceable import Untraceable


class IpcError(GpulensError):
    """Base of the ipc package's errors."""

    title = "ipc error"


class MalformedDatagram(IpcError):
    """A datagram that does not follow the Kineto IPC wire format."""

    title = "malformed datagram"


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


class StreamError(IpcError):
    """Base of the agent/viewer stream errors; the connection is closed."""

    title = "stream error"


class ProtocolError(StreamError):
    """A frame that is malformed, too large or has the wrong types."""

    title = "protocol error"


class VersionMismatch(ProtocolError):
    """The peer speaks a protocol version this side does not support."""

    title = "protocol version mismatch"


class AuthError(StreamError):
    """Token authentication failed, or the token file is unsafe.

    ``file_problem``: what is wrong with a token file, as a value (a
    :class:`~gpulens.core.errors.ConfigProblem`); None for a failed handshake.
    """

    title = "authentication failed"

    def __init__(self, message: str, *, file_problem: ConfigProblem | None = None) -> None:
        super().__init__(message)
        self.file_problem = file_problem


class RequestFailed(StreamError):
    """The agent answered a request with an error (the message is the agent's)."""

    title = "request failed"
