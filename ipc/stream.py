"""The agent <-> viewer wire format: the typed messages, their framing and encoding, the protocol version.

A frame is a 4-byte big-endian unsigned body length followed by one msgpack
map (the body). Every message map has a ``"t"`` key naming its type; the
other keys are listed on each message class below and in docs/protocol.md.
Nothing here touches a socket: :func:`encode` turns a message into one
frame's bytes; reading frames back, with every bound a hostile peer meets,
is :class:`~gpulens.ipc.stream_decode.FrameDecoder`'s. A peer speaking
another :data:`PROTOCOL_VERSION` is refused (:func:`check_version`).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgpack

from gpulens.core.model import HostSample
from gpulens.ipc.errors import ProtocolError, ProtocolProblem, VersionMismatch
from gpulens.ipc.serialize import to_dict

PROTOCOL_VERSION = 1
"""Bumped on any incompatible change; peers refuse another version."""

SUPPORTED_VERSIONS: frozenset[int] = frozenset({1})

HEADER = struct.Struct(">I")
MAX_FRAME_BYTES = 16 * 1024 * 1024
"""Largest frame body accepted (a history chunk or file chunk fits easily)."""
FILE_CHUNK_BYTES = 256 * 1024
"""Size of the data in one file chunk sent by the agent."""


# -- messages ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Hello:
    """First message each way. ``role`` is ``agent`` or ``viewer``.

    The agent's hello names its host, capabilities (request kinds), version
    and sampling interval. A viewer's hello may carry ``since`` (unix time):
    the agent then sends every kept sample newer than that as history
    (id 0) before any live sample, so a reconnect loses nothing.
    """

    proto: int
    role: str
    host: str = ""
    caps: tuple[str, ...] = ()
    version: str = ""
    interval_s: float | None = None
    since: float | None = None


@dataclass(frozen=True, slots=True)
class Challenge:
    """Agent -> viewer when a token is required: a fresh 32-byte nonce."""

    proto: int
    nonce: bytes


@dataclass(frozen=True, slots=True)
class AuthResponse:
    """Viewer -> agent: its own nonce and HMAC(token, both nonces)."""

    cnonce: bytes
    mac: bytes


@dataclass(frozen=True, slots=True)
class AuthOk:
    """Agent -> viewer: accepted, with the agent's own proof of the token."""

    mac: bytes


@dataclass(frozen=True, slots=True)
class SampleMsg:
    """One live host sample, sent in the form of ``serialize.sample_to_dict``."""

    sample: HostSample


@dataclass(frozen=True, slots=True)
class History:
    """Kept samples, oldest first; ``id`` 0 answers a hello's ``since``."""

    id: int
    samples: tuple[HostSample, ...]
    last: bool = True


@dataclass(frozen=True, slots=True)
class Request:
    """Viewer -> agent: run ``kind`` (history, profile, trace) with ``params``."""

    id: int
    kind: str
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Response:
    """Agent -> viewer: the end of request ``id``; ``error`` set when not ok."""

    id: int
    ok: bool
    result: Any = None
    error: str = ""


@dataclass(frozen=True, slots=True)
class FileChunk:
    """Part of a file a request produced; ``last`` marks its final chunk."""

    id: int
    name: str
    offset: int
    data: bytes
    last: bool


@dataclass(frozen=True, slots=True)
class ErrorMsg:
    """A connection-level error; the sender closes the connection after it."""

    code: str
    message: str


Message = (
    Hello
    | Challenge
    | AuthResponse
    | AuthOk
    | SampleMsg
    | History
    | Request
    | Response
    | FileChunk
    | ErrorMsg
)

_TAGS: dict[type, str] = {
    Hello: "hello",
    Challenge: "challenge",
    AuthResponse: "auth",
    AuthOk: "auth_ok",
    SampleMsg: "sample",
    History: "history",
    Request: "request",
    Response: "response",
    FileChunk: "chunk",
    ErrorMsg: "error",
}


# -- encoding ---------------------------------------------------------------


def to_wire(msg: Message) -> dict[str, Any]:
    """The plain map sent for ``msg`` (tuples become lists, samples plain maps)."""
    body: dict[str, Any] = {"t": _TAGS[type(msg)]}
    for name in msg.__slots__:
        value = getattr(msg, name)
        if name in ("sample", "samples"):
            value = to_dict(value)
        body[name] = list(value) if isinstance(value, tuple) else value
    return body


def encode_body(body: Mapping[str, Any]) -> bytes:
    """One frame for an already plain map (used to pre-encode a sample once)."""
    payload: bytes = msgpack.packb(body, use_bin_type=True)
    if len(payload) > MAX_FRAME_BYTES:
        raise ProtocolError(f"outgoing frame of {len(payload)} bytes exceeds {MAX_FRAME_BYTES}",
                            problem=ProtocolProblem.FRAME_TOO_LARGE)
    return HEADER.pack(len(payload)) + payload


def encode(msg: Message) -> bytes:
    """One frame (length prefix + msgpack body) for ``msg``.

    Raises:
        ProtocolError: the encoded body would exceed ``MAX_FRAME_BYTES``.
    """
    return encode_body(to_wire(msg))


# -- version ----------------------------------------------------------------


def check_version(proto: int) -> None:
    """Raise VersionMismatch naming both versions unless ``proto`` is supported."""
    if proto not in SUPPORTED_VERSIONS:
        raise VersionMismatch(
            f"peer speaks protocol version {proto}; this gpulens speaks version "
            f"{PROTOCOL_VERSION} (upgrade the older side so both match)"
        )
