"""Reading the agent <-> viewer wire: bytes into checked, typed messages (sans-IO).

:class:`FrameDecoder` turns bytes as they arrive into the messages of
:mod:`gpulens.ipc.stream` (which frames and encodes them); it never touches a
socket. Samples are decoded once, by the sample codec: the ``sample`` of a
sample frame and each of a history frame's ``samples`` go from their packed
bytes straight into a checked :class:`~gpulens.core.model.HostSample`
(:func:`~gpulens.ipc.serialize.sample_from_msgpack`, msgspec); every other
message is read with msgpack and validated field by field (:func:`from_wire`).

Bounds: a declared length above ``max_frame_bytes`` is refused before any
body byte is buffered; msgpack is told the largest string, binary, array
and map it may build, and the sample model declares the same bounds to
msgspec (``core.model.MAX_ITEMS``, ``MAX_TEXT_LEN``), which refuses a
declared length over them before building anything. So hostile bytes cost
at most one frame of memory. Any malformed input raises
:class:`ProtocolError`; after that the decoder is poisoned and the
connection must be closed.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import EllipsisType
from typing import Annotated, TypeVar

import msgpack
import msgspec

from gpulens.core.errors import SchemaError
from gpulens.core.model import MAX_ITEMS, MAX_TEXT_LEN
from gpulens.ipc.errors import ProtocolError, ProtocolProblem
from gpulens.ipc.serialize import sample_from_msgpack, schema_error
from gpulens.ipc.stream import (
    HEADER,
    MAX_FRAME_BYTES,
    AuthOk,
    AuthResponse,
    Challenge,
    ErrorMsg,
    FileChunk,
    Hello,
    History,
    Message,
    Request,
    Response,
    SampleMsg,
    check_version,
)

MAX_STR_LEN = MAX_TEXT_LEN
MAX_BIN_LEN = 4 * 1024 * 1024
MAX_CONTAINER_LEN = MAX_ITEMS


class FrameDecoder:
    """Incremental decoder: feed bytes as they arrive, get whole messages.

    ``max_frame_bytes`` bounds one frame's body; the buffer never holds more
    than one header plus one body. After a :class:`ProtocolError` every
    further ``feed`` raises again: the stream cannot be resynchronised.
    """

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self._need: int | None = None
        self._error: ProtocolError | None = None

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete frame (0 at a frame boundary)."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[Message]:
        """Add bytes; return the messages completed by them, in order.

        Raises:
            ProtocolError: a frame is too large, not msgpack, or not a valid
                message; VersionMismatch for an unsupported hello.
        """
        if self._error is not None:
            raise self._error
        self._buf += data
        out: list[Message] = []
        try:
            while True:
                if self._need is None:
                    if len(self._buf) < HEADER.size:
                        break
                    (size,) = HEADER.unpack_from(self._buf)
                    if size > self.max_frame_bytes:
                        raise ProtocolError(
                            f"frame declares {size} bytes; the limit is {self.max_frame_bytes}",
                            problem=ProtocolProblem.FRAME_TOO_LARGE,
                        )
                    del self._buf[: HEADER.size]
                    self._need = size
                if len(self._buf) < self._need:
                    break
                body = bytes(self._buf[: self._need])
                del self._buf[: self._need]
                self._need = None
                out.append(decode_body(body))
        except ProtocolError as err:
            self._error = err
            self._buf.clear()
            raise
        return out


class _Head(msgspec.Struct):
    """A frame body's message type and, for a sample frame, the still-packed sample."""

    t: str
    sample: msgspec.Raw = msgspec.Raw()


class _HistoryBody(msgspec.Struct):
    """A history frame with its samples still packed."""

    id: int
    samples: Annotated[tuple[msgspec.Raw, ...], msgspec.Meta(max_length=MAX_CONTAINER_LEN)]
    last: bool = True


_HEAD = msgspec.msgpack.Decoder(_Head)
_HISTORY = msgspec.msgpack.Decoder(_HistoryBody)


def _sample_msg(packed: msgspec.Raw) -> SampleMsg:
    if not packed:
        raise ProtocolError("message 'sample': missing field 'sample'", problem=ProtocolProblem.MISSING_FIELD)
    try:
        return SampleMsg(sample=sample_from_msgpack(packed))
    except SchemaError as err:
        raise ProtocolError(f"message 'sample': {err}", problem=ProtocolProblem.BAD_SAMPLE) from err


def _history_msg(body: bytes) -> History:
    try:
        packed = _HISTORY.decode(body)
    except msgspec.ValidationError as err:
        why = schema_error(err, "history")
        raise ProtocolError(f"message 'history': {why}", problem=_envelope_problem(why)) from None
    except msgspec.DecodeError as err:
        raise ProtocolError(f"frame is not valid msgpack: {err}", problem=ProtocolProblem.NOT_MSGPACK) from None
    except RecursionError:
        raise ProtocolError("frame is not valid msgpack: nested too deeply", problem=ProtocolProblem.NOT_MSGPACK) from None
    samples = []
    for i, raw in enumerate(packed.samples):
        try:
            samples.append(sample_from_msgpack(raw))
        except SchemaError as err:  # name the sample: samples[3].gpus[0].power_w
            inner = str(err)[len(err.path) :] if err.path == "sample" else f".{err}"
            raise ProtocolError(f"message 'history': samples[{i}]{inner}", problem=ProtocolProblem.BAD_SAMPLE) from err
    return History(id=packed.id, samples=tuple(samples), last=packed.last)


def _envelope_problem(why: SchemaError) -> ProtocolProblem:
    """The rule a history frame's own fields (``id``, ``samples``, ``last``) break, from msgspec's refusal."""
    if why.expected == "a value (required field missing)":
        return ProtocolProblem.MISSING_FIELD
    if why.expected.startswith(("at most ", "at least ")):
        return ProtocolProblem.OUT_OF_RANGE
    return ProtocolProblem.WRONG_TYPE


def decode_body(body: bytes) -> Message:
    """Decode one frame body (no length prefix) into a typed message.

    Raises:
        ProtocolError: not msgpack, over a size limit, or not a known message.
    """
    try:
        head: _Head | None = _HEAD.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        head = None  # not a map with a string "t": msgpack below says what is wrong
    if head is not None and head.t == "sample":
        return _sample_msg(head.sample)
    if head is not None and head.t == "history":
        return _history_msg(body)
    try:
        obj = msgpack.unpackb(
            body,
            raw=False,
            use_list=True,
            strict_map_key=True,
            max_str_len=MAX_STR_LEN,
            max_bin_len=MAX_BIN_LEN,
            max_array_len=MAX_CONTAINER_LEN,
            max_map_len=MAX_CONTAINER_LEN,
            max_ext_len=0,
        )
    # msgpack raises ValueError subclasses, TypeError (unhashable keys),
    # UnicodeDecodeError and its own StackError for deep nesting: all of
    # them mean "malformed frame" here, and none may escape as a crash.
    except (ValueError, TypeError, OverflowError) as err:
        raise ProtocolError(f"frame is not valid msgpack: {type(err).__name__}: {err}",
                            problem=ProtocolProblem.NOT_MSGPACK) from err
    return from_wire(obj)


_T = TypeVar("_T")


def _get(d: Mapping[str, object], key: str, kind: type[_T], what: str, default: _T | EllipsisType = ...) -> _T:
    """``d[key]``, a ``kind`` (True is no integer); missing: ``default``, or refused without one."""
    if key not in d:
        if isinstance(default, EllipsisType):
            raise ProtocolError(f"message '{d.get('t')}': missing field '{key}'", problem=ProtocolProblem.MISSING_FIELD)
        return default
    return _checked(d, key, (kind,), what)


def _checked(d: Mapping[str, object], key: str, kinds: tuple[type[_T], ...], what: str) -> _T:
    value = d[key]
    if isinstance(value, bool) and bool not in kinds:
        raise ProtocolError(f"message '{d.get('t')}': field '{key}' must be {what}, got {value!r}",
                            problem=ProtocolProblem.WRONG_TYPE)
    if not isinstance(value, kinds):
        shown = repr(value)
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        raise ProtocolError(f"message '{d.get('t')}': field '{key}' must be {what}, got {shown}",
                            problem=ProtocolProblem.WRONG_TYPE)
    return value


def _opt_num(d: Mapping[str, object], key: str) -> float | None:
    if key not in d:
        return None
    value = _checked(d, key, (int, float, type(None)), "a number or nil")
    return float(value) if isinstance(value, (int, float)) else None


def from_wire(obj: object) -> Message:
    """Validate a decoded msgpack object as a message; raises ProtocolError."""
    if not isinstance(obj, dict):
        raise ProtocolError(f"frame body must be a map, got {type(obj).__name__}", problem=ProtocolProblem.NOT_A_MAP)
    tag = obj.get("t")
    if not isinstance(tag, str):
        raise ProtocolError("frame body has no message type ('t')", problem=ProtocolProblem.NO_MESSAGE_TYPE)
    d = obj
    if tag == "hello":
        proto = _get(d, "proto", int, "an integer")
        check_version(proto)
        caps = _get(d, "caps", list, "a list of strings", [])
        if not all(isinstance(c, str) for c in caps):
            raise ProtocolError("message 'hello': field 'caps' must be a list of strings",
                                problem=ProtocolProblem.WRONG_TYPE)
        role = _get(d, "role", str, "a string")
        if role not in ("agent", "viewer"):
            raise ProtocolError(f"message 'hello': role must be 'agent' or 'viewer', got {role[:40]!r}",
                                problem=ProtocolProblem.OUT_OF_RANGE)
        return Hello(
            proto=proto,
            role=role,
            host=_get(d, "host", str, "a string", ""),
            caps=tuple(caps),
            version=_get(d, "version", str, "a string", ""),
            interval_s=_opt_num(d, "interval_s"),
            since=_opt_num(d, "since"),
        )
    if tag == "challenge":
        return Challenge(proto=_get(d, "proto", int, "an integer"), nonce=_get(d, "nonce", bytes, "bytes"))
    if tag == "auth":
        return AuthResponse(cnonce=_get(d, "cnonce", bytes, "bytes"), mac=_get(d, "mac", bytes, "bytes"))
    if tag == "auth_ok":
        return AuthOk(mac=_get(d, "mac", bytes, "bytes"))
    if tag in ("sample", "history"):  # decoded from their bytes by decode_body; here only if unreadable there
        raise ProtocolError(f"message '{tag}': the frame's envelope cannot be read (a repeated key, or nested too deeply)",
                            problem=ProtocolProblem.UNREADABLE_ENVELOPE)
    if tag == "request":
        return Request(
            id=_get(d, "id", int, "an integer"),
            kind=_get(d, "kind", str, "a string"),
            params=_get(d, "params", dict, "a map", {}),
        )
    if tag == "response":
        return Response(
            id=_get(d, "id", int, "an integer"),
            ok=_get(d, "ok", bool, "true or false"),
            result=d.get("result"),
            error=_get(d, "error", str, "a string", ""),
        )
    if tag == "chunk":
        offset = _get(d, "offset", int, "an integer")
        if offset < 0:
            raise ProtocolError("message 'chunk': negative offset", problem=ProtocolProblem.OUT_OF_RANGE)
        return FileChunk(
            id=_get(d, "id", int, "an integer"),
            name=_get(d, "name", str, "a string"),
            offset=offset,
            data=_get(d, "data", bytes, "bytes"),
            last=_get(d, "last", bool, "true or false"),
        )
    if tag == "error":
        return ErrorMsg(code=_get(d, "code", str, "a string"), message=_get(d, "message", str, "a string"))
    raise ProtocolError(f"unknown message type {tag[:40]!r}", problem=ProtocolProblem.UNKNOWN_MESSAGE)
