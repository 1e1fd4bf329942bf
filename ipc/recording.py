"""The ``--record`` file format: msgpack, streaming, compact.

A recording is a sequence of msgpack objects: first a header map
``{"format": "gpulens-recording", "version": 2, "created": <unix s>,
"source": <name>, "simulated": <bool>}``, then the records, one map per event:

- ``{"k": "s", "b": <backfill>, "d": <sample>}`` a host sample, in the
  form of :func:`~gpulens.ipc.serialize.sample_to_dict` less every
  field equal to its default (that is what keeps it compact);
- ``{"k": "h", "host", "up", "reason", "time", "address"}`` host status;
- ``{"k": "m", "message", "ok", "time"}`` source status.

Version 1 stores each record as is (7.5 kB per demo sample); version 2 (what
gpulens writes) stores each compressed, against the previous record of the
same host, in blocks that decode on their own (``recording_blocks``: 12x
smaller). Both are read; ``--append`` continues a file in its own version.

Reading is sans-IO friendly (:func:`decode_stream` takes chunks) and bounded:
each record is at most :data:`MAX_RECORD_BYTES` (nesting too: msgpack's own
depth limit; version 2: the limits of ``recording_blocks``). Records are
framed with ``Unpacker.skip`` (which builds nothing) and decoded from their
bytes with msgspec into the fields a record kind has
(:func:`decode_record_bytes`): keys a newer gpulens may add are skipped
without being built, however large (a 4 MiB unknown field of empty maps is
about 540 MiB of Python objects when built), and
every sample is validated by the one sample decoder. Files are
opened with :func:`open_recording`: only regular files, so a FIFO with no
writer or a device is refused instead of blocking or never ending. Anything
else raises :class:`RecordingError`, which carries the events read before
the fault and its reason (``problem``, a :class:`~gpulens.core.errors.RecordingProblem`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, BinaryIO, NamedTuple, TypeVar, overload

import msgpack
import msgspec

from gpulens.core.errors import RecordingError, RecordingProblem, SchemaError
from gpulens.core.events import HostStatusEvent, SampleEvent, SourceEvent, SourceStatusEvent
from gpulens.core.limits import InputRefused, open_regular
from gpulens.core.model import HostSample
from gpulens.ipc.errors import ProtocolError
from gpulens.ipc.recording_blocks import MAX_FRAME_BYTES, MAX_RECORD_BYTES, BlockReader, BlockWriter
from gpulens.ipc.serialize import sample_from_dict, sample_from_msgpack

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_T = TypeVar("_T")

FORMAT = "gpulens-recording"
VERSION = 2
"""The version gpulens writes."""
VERSIONS = (1, 2)
"""The versions gpulens reads."""
_LIMITS: dict[str, int] = {
    "max_buffer_size": MAX_FRAME_BYTES,
    "max_str_len": 1024 * 1024,
    "max_bin_len": MAX_FRAME_BYTES,  # version 2: a compressed record
    "max_array_len": 100_000,
    "max_map_len": 100_000,
    "max_ext_len": 0,
}
UNPACK_LIMITS = _LIMITS
"""The ``msgpack.Unpacker`` limits every reader of a recording uses."""


@overload
def compact(obj: DataclassInstance) -> dict[str, Any]: ...
@overload
def compact(obj: object) -> object: ...
def compact(obj: object) -> object:
    """Plain data for ``obj`` without dataclass fields that equal their default."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(obj):
            v = getattr(obj, f.name)
            if f.default is not dataclasses.MISSING and v == f.default:
                continue
            if f.default_factory is not dataclasses.MISSING and v == f.default_factory():
                continue
            out[f.name] = compact(v)
        return out
    if isinstance(obj, (tuple, list)):
        return [compact(v) for v in obj]
    if isinstance(obj, dict) or hasattr(obj, "items"):
        return {str(k): compact(v) for k, v in obj.items()}
    return obj


def header(source: str, simulated: bool, created: float, version: int = VERSION) -> bytes:
    """The first object of a recording."""
    data: bytes = msgpack.packb({"format": FORMAT, "version": version, "created": created,
                                 "source": source, "simulated": simulated})
    return data


def event_key(event: SourceEvent) -> str:
    """The series an event belongs to: its records are compressed against each other (version 2)."""
    if isinstance(event, SampleEvent):
        return f"s:{event.sample.host}"
    if isinstance(event, HostStatusEvent):
        return f"h:{event.host}"
    return "m"


class EventEncoder:
    """The bytes that append each event to a recording of ``version`` (after its header)."""

    def __init__(self, version: int = VERSION) -> None:
        if version not in VERSIONS:
            raise ValueError(f"recording version {version} is not supported")
        self.version = version
        self.blocks = BlockWriter() if version >= 2 else None

    def encode(self, event: SourceEvent, record: bytes | None = None) -> bytes:
        """The bytes to append: version 1: the record; version 2: its frame (after a block start when one
        begins). ``record``: the event's :func:`encode_event` bytes when already made."""
        data = encode_event(event) if record is None else record
        return data if self.blocks is None else self.blocks.add(data, event_key(event))


def encode_event(event: SourceEvent) -> bytes:
    """One event as one msgpack object (a version-1 record; the bytes a version-2 frame compresses)."""
    if isinstance(event, SampleEvent):
        rec: dict[str, Any] = {"k": "s", "b": event.backfill, "d": compact(event.sample)}
    elif isinstance(event, HostStatusEvent):
        rec = {"k": "h", "host": event.host, "up": event.up, "reason": event.reason,
               "time": event.time, "address": event.address}
    else:
        rec = {"k": "m", "message": event.message, "ok": event.ok, "time": event.time}
    data: bytes = msgpack.packb(rec)
    return data


def _field(rec: dict[Any, Any], name: str, kind: type[_T], where: str) -> _T:
    v = rec.get(name)
    if not isinstance(v, kind):
        raise RecordingError(f"{where}: field '{name}' has the wrong type ({type(v).__name__})",
                             problem=RecordingProblem.WRONG_TYPE)
    return v


def _number(rec: dict[Any, Any], name: str, where: str) -> float:
    v = rec.get(name)
    if not isinstance(v, int | float) or isinstance(v, bool):
        raise RecordingError(f"{where}: field '{name}' has the wrong type ({type(v).__name__})",
                             problem=RecordingProblem.WRONG_TYPE)
    return float(v)


def decode_record(obj: object, where: str) -> SourceEvent:
    """Validate one decoded object as an event; raises RecordingError."""
    if not isinstance(obj, dict):
        raise RecordingError(f"{where}: expected a map, got {type(obj).__name__}",
                             problem=RecordingProblem.WRONG_TYPE)
    kind = obj.get("k")
    try:
        if kind == "s":
            sample: HostSample = sample_from_dict(obj.get("d"))
            return SampleEvent(sample=sample, backfill=bool(obj.get("b", False)))
        if kind == "h":
            return HostStatusEvent(
                host=_field(obj, "host", str, where), up=_field(obj, "up", bool, where),
                reason=_field(obj, "reason", str, where),
                time=_number(obj, "time", where), address=str(obj.get("address", "")))
        if kind == "m":
            return SourceStatusEvent(
                message=_field(obj, "message", str, where), ok=_field(obj, "ok", bool, where),
                time=_number(obj, "time", where))
    except SchemaError as err:
        raise RecordingError(f"{where}: {err}", problem=RecordingProblem.BAD_SAMPLE) from err
    raise RecordingError(f"{where}: unknown record kind {kind!r}", problem=RecordingProblem.UNKNOWN_KIND)


def check_header(obj: object) -> dict[str, Any]:
    """Validate the header object; raises RecordingError."""
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise RecordingError("not a gpulens recording (no 'gpulens-recording' header)",
                             problem=RecordingProblem.NOT_A_RECORDING)
    if obj.get("version") not in VERSIONS or isinstance(obj.get("version"), bool):
        raise RecordingError(f"recording version {obj.get('version')!r} is not supported (expected "
                             f"{' or '.join(map(str, VERSIONS))})", problem=RecordingProblem.UNSUPPORTED_VERSION)
    return obj


def decode_stream(chunks: Iterable[bytes]) -> Iterator[dict[str, Any] | SourceEvent]:
    """Yield the header, then each event; raises RecordingError at the first fault.

    A file that ends inside a record (truncated) raises too, after yielding
    every complete record before it.
    """
    for item, _place in decode_spans(chunks):
        yield item


class Place(NamedTuple):
    """Where a record is: what to read back to decode it (a replay index keeps this)."""

    block: int
    """The byte offset of its block (version 1: of the record itself, a block of one)."""
    ordinal: int
    """Its place in the block (version 1: 0)."""
    end: int
    """The byte offset after it (version 2: after its frame; a seek reads ``block`` to ``end``)."""


def decode_spans(chunks: Iterable[bytes]) -> Iterator[tuple[dict[str, Any] | SourceEvent, Place]]:
    """As :func:`decode_stream`, with where each record is (a replay index); the header's place is (0, 0, its end).

    A fault in the first object is ``NOT_A_RECORDING`` (but for an empty file or an unsupported
    version), as :func:`~gpulens.sources.replay.read_header` says of it.

    Memory: the bytes of the object being decoded (at most :data:`MAX_FRAME_BYTES`
    plus one chunk, twice), what its known fields hold and, in version 2, the
    current block's records (``recording_blocks.MAX_BLOCK_BYTES``); nothing else is kept.
    """
    framer = msgpack.Unpacker(max_buffer_size=MAX_FRAME_BYTES)  # only skip(): it builds no objects
    held = bytearray()  # the file's bytes from offset ``base`` on: the record being framed
    index = start = offset = base = 0
    blocks: BlockReader | None = None
    for chunk in chunks:
        offset += len(chunk)
        try:
            framer.feed(chunk)
        except msgpack.BufferFull as err:
            raise RecordingError(f"record {index}: larger than {MAX_FRAME_BYTES} bytes",
                                 problem=_first_or(index, RecordingProblem.TOO_LARGE)) from err
        held += chunk
        while True:
            try:
                framer.skip()
            except msgpack.OutOfData:
                break
            except (ValueError, msgpack.UnpackException, TypeError) as err:
                raise RecordingError(f"record {index} (before byte {offset}): corrupt data: {err}",
                                     problem=_first_or(index, RecordingProblem.CORRUPT)) from err
            end = framer.tell()
            data = bytes(memoryview(held)[start - base : end - base])
            where = f"record {index}"
            if index == 0:
                head = decode_header_bytes(data)
                blocks = BlockReader() if head["version"] >= 2 else None
                yield head, Place(0, 0, end)
            elif blocks is None:
                if end - start > MAX_RECORD_BYTES:
                    raise RecordingError(f"{where}: larger than {MAX_RECORD_BYTES} bytes",
                                         problem=RecordingProblem.TOO_LARGE)
                yield decode_record_bytes(data, where), Place(start, 0, end)
            else:
                record = blocks.feed(data, start, where)
                if record is not None:
                    yield decode_record_bytes(record, where), Place(blocks.start, len(blocks.records) - 1, end)
            index, start = index + 1, end
        del held[: start - base]
        base = start
    if index == 0:  # no bytes, or the file ends inside its first object (the sentence says "empty" of both)
        raise RecordingError("empty file: not a gpulens recording",
                             problem=RecordingProblem.EMPTY if offset == 0 else RecordingProblem.NOT_A_RECORDING)
    if start < offset:
        raise RecordingError(f"truncated after record {index - 1} (file ends inside a record)",
                             problem=RecordingProblem.TRUNCATED)


def _first_or(index: int, problem: RecordingProblem) -> RecordingProblem:
    """``problem``, but NOT_A_RECORDING for a fault in the first object (``index`` 0), where the header goes."""
    return RecordingProblem.NOT_A_RECORDING if index == 0 else problem


# -- one record from its bytes: known fields only ----------------------------------------------


class _Fields(msgspec.Struct):
    """Every field any record kind has, each left as its msgpack bytes; other keys are skipped unbuilt."""

    k: msgspec.Raw = msgspec.Raw()
    b: msgspec.Raw = msgspec.Raw()
    d: msgspec.Raw = msgspec.Raw()
    host: msgspec.Raw = msgspec.Raw()
    up: msgspec.Raw = msgspec.Raw()
    reason: msgspec.Raw = msgspec.Raw()
    time: msgspec.Raw = msgspec.Raw()
    address: msgspec.Raw = msgspec.Raw()
    message: msgspec.Raw = msgspec.Raw()
    ok: msgspec.Raw = msgspec.Raw()


class _HeaderFields(msgspec.Struct):
    format: msgspec.Raw = msgspec.Raw()
    version: msgspec.Raw = msgspec.Raw()
    created: msgspec.Raw = msgspec.Raw()
    source: msgspec.Raw = msgspec.Raw()
    simulated: msgspec.Raw = msgspec.Raw()


_FIELDS = msgspec.msgpack.Decoder(_Fields)
_SAMPLE, _TRUE, _FALSE = msgspec.Raw(b"\xa1s"), msgspec.Raw(b"\xc3"), msgspec.Raw(b"\xc2")
"""A sample record's ``k`` and ``b`` as msgpack: decoded without :func:`_scalars` (most records)."""
_HEADER_FIELDS = msgspec.msgpack.Decoder(_HeaderFields)
_SCALAR = str | bool | int | float | None
_MAX_SCALAR_BYTES = 64 * 1024
_GOT = {"object": "map", "array": "list", "str": "str", "int": "int", "float": "float", "bool": "bool",
        "null": "NoneType", "bytes": "bytes", "ext": "ext"}


def _got(err: msgspec.ValidationError) -> str:
    """The received type a msgspec error names (``Expected `str`, got `int``` -> ``int``)."""
    text = str(err)
    got = text.split("got `", 1)[1].split("`", 1)[0] if "got `" in text else "something else"
    return _GOT.get(got, got)


def _fields_of(data: bytes | memoryview, decoder: msgspec.msgpack.Decoder[_T], where: str) -> _T:
    try:
        return decoder.decode(data)
    except msgspec.ValidationError as err:
        got = "a map with keys that are not strings" if "`key`" in str(err) else _got(err)
        raise RecordingError(f"{where}: expected a map, got {got}", problem=RecordingProblem.WRONG_TYPE) from None
    except msgspec.DecodeError as err:
        raise RecordingError(f"{where}: corrupt data: {err}", problem=RecordingProblem.CORRUPT) from None
    except RecursionError:
        raise RecordingError(f"{where}: corrupt data: nested too deeply", problem=RecordingProblem.CORRUPT) from None


def _scalars(fields: msgspec.Struct, where: str) -> dict[str, Any]:
    """The fields present, as plain values: each must be a string, number, boolean or null."""
    out: dict[str, Any] = {}
    for name in fields.__struct_fields__:
        raw: msgspec.Raw = getattr(fields, name)
        if not len(raw) or name == "d":
            continue
        if len(raw) > _MAX_SCALAR_BYTES:
            raise RecordingError(f"{where}: field '{name}' has the wrong type (over {_MAX_SCALAR_BYTES} bytes)",
                                 problem=RecordingProblem.TOO_LARGE)
        try:
            out[name] = msgspec.msgpack.decode(raw, type=_SCALAR)
        except msgspec.ValidationError as err:
            raise RecordingError(f"{where}: field '{name}' has the wrong type ({_got(err)})",
                                 problem=RecordingProblem.WRONG_TYPE) from None
        except msgspec.DecodeError as err:  # pragma: no cover - the framer saw the whole record
            raise RecordingError(f"{where}: corrupt data: {err}", problem=RecordingProblem.CORRUPT) from None
    return out


def decode_header_bytes(data: bytes | memoryview) -> dict[str, Any]:
    """Validate a recording's first object (its bytes); raises RecordingError (NOT_A_RECORDING, or
    UNSUPPORTED_VERSION)."""
    try:
        fields = _fields_of(data, _HEADER_FIELDS, "not a gpulens recording (header)")
    except RecordingError as err:
        raise RecordingError(str(err), problem=RecordingProblem.NOT_A_RECORDING) from None
    try:
        head = _scalars(fields, "header")
    except RecordingError as err:
        raise RecordingError(f"not a gpulens recording ({err})", problem=RecordingProblem.NOT_A_RECORDING) from None
    return check_header(head)


def decode_record_bytes(data: bytes | memoryview, where: str) -> SourceEvent:
    """Validate one record (its msgpack bytes) as an event; raises RecordingError.

    Only the fields a record kind has are decoded; any other key is skipped
    without building it. The sample of a ``"s"`` record goes straight from its
    bytes to the model (:func:`~gpulens.ipc.serialize.sample_from_msgpack`).
    """
    f: _Fields = _fields_of(data, _FIELDS, where)
    if (f.k == _SAMPLE and (f.b == _TRUE or f.b == _FALSE or not len(f.b)) and len(f.d)
            and not (len(f.host) or len(f.up) or len(f.reason) or len(f.time) or len(f.address)
                     or len(f.message) or len(f.ok))):
        plain: dict[str, Any] = {"k": "s", "b": f.b == _TRUE}  # what _scalars makes of a plain sample record
    else:
        plain = _scalars(f, where)
    if plain.get("k") != "s":
        return decode_record(plain, where)
    try:
        sample = sample_from_msgpack(f.d) if len(f.d) else sample_from_dict(None)
    except (SchemaError, ProtocolError) as err:  # a sample that does not fit the model; one not msgpack
        problem = RecordingProblem.BAD_SAMPLE if isinstance(err, SchemaError) else RecordingProblem.CORRUPT
        raise RecordingError(f"{where}: {err}", problem=problem) from err
    return SampleEvent(sample=sample, backfill=bool(plain.get("b", False)))


def open_recording(path: str) -> BinaryIO:
    """Open a recording for reading: a regular file only (never blocks on a FIFO).

    Raises:
        RecordingError: missing, unreadable, or not a regular file.
    """
    try:
        fd, _size = open_regular(path, "recording")
    except InputRefused as err:
        raise RecordingError(str(err), problem=RecordingProblem.NOT_OPENED, refused=err.problem) from None
    return os.fdopen(fd, "rb")


def read_recording(path: str, chunk_size: int = 1 << 16) -> tuple[dict[str, Any], list[SourceEvent]]:
    """Read a whole recording file.

    Raises:
        RecordingError: the file is unreadable, not a regular file, not a
            recording, corrupt or truncated; ``err.events`` holds the events
            read before the fault.
    """
    events: list[SourceEvent] = []
    head: dict[str, Any] = {}
    fh = open_recording(path)
    try:
        with fh:
            for item in decode_stream(iter(lambda: fh.read(chunk_size), b"")):
                if isinstance(item, dict):
                    head = item
                else:
                    events.append(item)
    except OSError as err:
        raise RecordingError(f"{path}: cannot read: {err.strerror}", problem=RecordingProblem.UNREADABLE) from err
    except RecordingError as err:
        err.events = events
        err.args = (f"{path}: {err}",)
        raise
    return head, events
