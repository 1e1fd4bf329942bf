"""Recording format version 2: records compressed in blocks, each record against its predecessor (issue 31, item 20).

A version-1 recording stores each record as its msgpack bytes: 7.5 kB per demo
sample (16 hosts x 8 GPUs at 1 Hz: 431 MB/h). Version 2 stores the same bytes
compressed, and grouped in **blocks** that decode on their own:

- a block starts with the map ``{"block": <n>}`` (``n`` counts the blocks one
  writer started; informational);
- then one **frame** per record, the msgpack array ``[z, [ref, ...]]``: ``z``
  is the record's msgpack bytes (a version-1 record) compressed as a raw
  deflate stream (:data:`WBITS`: no zlib header or checksum, which cost 40 % of
  the decompression time; as in version 1, the record's bytes are checked by
  its decoders), with as preset dictionary (``zdict``) the records ``ref``
  frames back in the same block, joined in the order listed, last
  :data:`ZDICT_BYTES` bytes; no refs: none.

The writer (:class:`BlockWriter`) refers each record to the previous frame
and to the last record of the same key (a host's previous sample), so a
sample costs what changed since that host's last one: 36.8 MB/h for the demo
(``benchmarks/recording_size.py``). A single zlib stream cannot do that: its
32 KiB window holds the last four samples, of other hosts. Each frame is
written when its event comes (nothing waits for a block to fill), so a crash
loses no more than before: the file's unflushed tail. A block ends before the
record that would take it over :data:`BLOCK_BYTES` decompressed or
:data:`BLOCK_RECORDS` records; ``--append`` starts a new block.

Reading a record needs only its block: the block's frames up to it,
decompressed in order (:class:`BlockReader`, :func:`read_block`); a replay
index keeps each record's block offset and place in it. Reading is bounded
for hostile files: a frame decompresses to at most :data:`MAX_RECORD_BYTES`
and a block to at most :data:`MAX_BLOCK_BYTES` (``decompressobj`` with
``max_length``: a decompression bomb is refused, never inflated), a block has
at most :data:`MAX_BLOCK_RECORDS` records and a frame at most :data:`MAX_REFS`
refs, each inside its block. Every fault raises :class:`RecordingError`, its ``problem`` the rule
broken (``BAD_BLOCK``, ``CORRUPT``, ``TOO_LARGE``; ``TRUNCATED`` for a read that ends inside a record).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Annotated

import msgpack
import msgspec

from gpulens.core.errors import RecordingError, RecordingProblem

MAX_RECORD_BYTES = 16 * 1024 * 1024
"""The most one record (its msgpack bytes, decompressed) may hold, in every version."""
MAX_FRAME_BYTES = MAX_RECORD_BYTES + (1 << 16)
"""The most one framed object may hold: a record compressed can be a little larger than the record."""
MAX_BLOCK_BYTES = MAX_RECORD_BYTES
"""Reading: the most a block may decompress to (the writer keeps blocks to BLOCK_BYTES, or one record)."""
MAX_BLOCK_STORED = MAX_BLOCK_BYTES + (1 << 20)
"""Reading: the most bytes of the file a block may take (what a seek reads back)."""
MAX_BLOCK_RECORDS = 4096
"""Reading: the most records a block may hold."""
MAX_REFS = 4
"""Reading: the most records one frame's dictionary may join."""
ZDICT_BYTES = 32 * 1024
"""The preset dictionary is the last this many bytes of the referenced records (zlib's window)."""
BLOCK_BYTES = 4 * 1024 * 1024
"""Writing: a block ends before the record that would take it over this many bytes decompressed
(about 35 s of the 16-host demo)."""
BLOCK_RECORDS = 2048
"""Writing: a block ends after this many records."""
WBITS = -15
"""A raw deflate stream with zlib's largest window (32 KiB)."""
LEVEL = 6
"""The zlib level the writer uses (on the demo, 9 is 1 % smaller for 1.5x the CPU; 4 misses 40 MB/h)."""


class _Frame(msgspec.Struct, array_like=True):
    z: bytes
    refs: Annotated[tuple[Annotated[int, msgspec.Meta(ge=1)], ...], msgspec.Meta(max_length=MAX_REFS)] = ()


class _Start(msgspec.Struct):
    block: int


_FRAME = msgspec.msgpack.Decoder(_Frame)
_START = msgspec.msgpack.Decoder(_Start)
_MAPS = frozenset([*range(0x80, 0x90), 0xDE, 0xDF])
"""First bytes of a msgpack map: a block start; anything else must be a frame."""


def block_start(n: int) -> bytes:
    """The object that starts block ``n``."""
    data: bytes = msgpack.packb({"block": n})
    return data


def frame(record: bytes, zdict: bytes = b"", refs: Sequence[int] = (), level: int = LEVEL) -> bytes:
    """One record as a frame: compressed with ``zdict`` (the records ``refs`` name, joined; see above)."""
    c = zlib.compressobj(level, zlib.DEFLATED, WBITS, 9, zlib.Z_DEFAULT_STRATEGY, zdict) if zdict else \
        zlib.compressobj(level, zlib.DEFLATED, WBITS, 9)
    data: bytes = msgpack.packb([c.compress(record) + c.flush(), list(refs)])
    return data


def zdict_of(records: Sequence[bytes], refs: Sequence[int]) -> bytes:
    """The preset dictionary of a frame with ``refs`` after ``records`` (its block's, before it)."""
    n = len(records)
    return b"".join(records[n - r][-ZDICT_BYTES:] for r in refs)[-ZDICT_BYTES:]


class BlockWriter:
    """The bytes to append for each record: a frame, after a block start when a block begins.

    Keeps the current block's records that later frames refer to: the last
    one of each key and the previous one (at most ``block_bytes`` in all, or one record).
    """

    def __init__(self, *, level: int = LEVEL, block_bytes: int = BLOCK_BYTES,
                 block_records: int = BLOCK_RECORDS) -> None:
        self.level = level
        self.block_bytes = min(block_bytes, MAX_BLOCK_BYTES)
        self.block_records = min(block_records, MAX_BLOCK_RECORDS)
        self.blocks = 0
        """Blocks started so far."""
        self._count = 0
        self._raw = 0
        self._last: dict[str, tuple[int, bytes]] = {}
        self._prev: tuple[int, bytes] | None = None

    def new_block(self) -> None:
        """The next record starts a new block."""
        self._count = self._raw = 0
        self._last = {}
        self._prev = None

    def add(self, record: bytes, key: str) -> bytes:
        """The bytes that append ``record`` (one record's msgpack bytes); ``key`` names its series (a host)."""
        out = b""
        if self._count and (self._count >= self.block_records or self._raw + len(record) > self.block_bytes):
            self.new_block()
        if not self._count:
            out = block_start(self.blocks)
            self.blocks += 1
        refs: list[int] = []
        parts: list[bytes] = []
        for ref in (self._prev, self._last.get(key)):  # the previous record, then this key's last (nearest)
            if ref is not None and self._count - ref[0] not in refs:
                refs.append(self._count - ref[0])
                parts.append(ref[1][-ZDICT_BYTES:])
        out += frame(record, b"".join(parts)[-ZDICT_BYTES:], refs, self.level)
        self._prev = self._last[key] = (self._count, record)
        self._count += 1
        self._raw += len(record)
        return out


class BlockReader:
    """Sans-IO: the objects of a version-2 recording after its header, in order -> each record's bytes.

    Holds the current block's decompressed records (bounded: MAX_BLOCK_BYTES,
    MAX_BLOCK_RECORDS), which its later frames refer to.
    """

    def __init__(self) -> None:
        self.start = -1
        """The byte offset of the current block's start (-1: before the first block)."""
        self.records: list[bytes] = []
        """The current block's records so far (``records[i]``: the record at place ``i``)."""
        self.end = -1
        """The byte offset after the last object fed."""
        self._raw = 0

    def feed(self, data: bytes | memoryview, offset: int, where: str) -> bytes | None:
        """One object (its bytes, at byte ``offset``): None for a block start, else the record it holds.

        Raises:
            RecordingError: not a block start or frame, a frame outside a block, a ref outside the
                block, compressed data that is corrupt, or a record or block over its limit.
        """
        try:
            if data[0] in _MAPS:
                _START.decode(data)
                self.start, self.records, self._raw, self.end = offset, [], 0, offset + len(data)
                return None
            obj = _FRAME.decode(data)
        except (msgspec.ValidationError, msgspec.DecodeError) as err:  # of another shape; bytes not msgpack
            problem = RecordingProblem.BAD_BLOCK if isinstance(err, msgspec.ValidationError) else RecordingProblem.CORRUPT
            raise RecordingError(f"{where}: not a block start or compressed record ({err})", problem=problem) from None
        except RecursionError:
            raise RecordingError(f"{where}: not a block start or compressed record (nested too deeply)",
                                 problem=RecordingProblem.CORRUPT) from None
        if self.start < 0:
            raise RecordingError(f"{where}: a compressed record before any block start", problem=RecordingProblem.BAD_BLOCK)
        n = len(self.records)
        if n >= MAX_BLOCK_RECORDS:
            raise RecordingError(f"{where}: its block holds more than {MAX_BLOCK_RECORDS} records",
                                 problem=RecordingProblem.TOO_LARGE)
        if offset + len(data) - self.start > MAX_BLOCK_STORED:
            raise RecordingError(f"{where}: its block takes more than {MAX_BLOCK_STORED} bytes of the file",
                                 problem=RecordingProblem.TOO_LARGE)
        if obj.refs and max(obj.refs) > n:
            raise RecordingError(f"{where}: refers to a record before its block (refs {list(obj.refs)}, "
                                 f"{n} records before it in the block)", problem=RecordingProblem.BAD_BLOCK)
        record = inflate(obj.z, zdict_of(self.records, obj.refs) if obj.refs else b"",
                         min(MAX_RECORD_BYTES, MAX_BLOCK_BYTES - self._raw), where)
        self.records.append(record)
        self._raw += len(record)
        self.end = offset + len(data)
        return record


def inflate(z: bytes, zdict: bytes, limit: int, where: str) -> bytes:
    """``z`` decompressed, at most ``limit`` bytes: a bomb is refused after ``limit + 1`` bytes made.

    Raises:
        RecordingError: more than ``limit`` bytes, corrupt, incomplete, or followed by other bytes.
    """
    try:
        d = zlib.decompressobj(WBITS, zdict=zdict) if zdict else zlib.decompressobj(WBITS)
        out = d.decompress(z, limit + 1)
    except zlib.error as err:
        raise RecordingError(f"{where}: corrupt compressed data ({err})", problem=RecordingProblem.CORRUPT) from None
    if len(out) > limit:
        raise RecordingError(f"{where}: it decompresses to more than {limit} bytes (at most {MAX_RECORD_BYTES} "
                             f"a record, {MAX_BLOCK_BYTES} a block, less what came before it in its block)",
                             problem=RecordingProblem.TOO_LARGE)
    if not d.eof:
        raise RecordingError(f"{where}: the compressed record is incomplete", problem=RecordingProblem.CORRUPT)
    if d.unused_data:
        raise RecordingError(f"{where}: {len(d.unused_data)} bytes after the compressed record",
                             problem=RecordingProblem.CORRUPT)
    return out


def read_block(reader: BlockReader, data: bytes, offset: int, where: str) -> None:
    """Feed ``reader`` the whole objects of ``data`` (the file's bytes from ``offset``): a block's start and
    frames to a new reader, more frames of the same block to one that has read its start.

    Raises:
        RecordingError: a partial object, no block start or another one, or what :meth:`BlockReader.feed`
            refuses.
    """
    framer = msgpack.Unpacker(max_buffer_size=max(MAX_FRAME_BYTES, len(data)))
    framer.feed(data)
    view = memoryview(data)
    fresh, at = reader.start < 0, 0
    while at < len(data):
        try:
            framer.skip()
        except msgpack.OutOfData:
            raise RecordingError(f"{where}: ends inside a record", problem=RecordingProblem.TRUNCATED) from None
        except (ValueError, msgpack.UnpackException, TypeError) as err:
            raise RecordingError(f"{where}: corrupt data: {err}", problem=RecordingProblem.CORRUPT) from None
        end = framer.tell()
        if (reader.feed(view[at:end], offset + at, where) is None) != (fresh and not at):
            raise RecordingError(f"{where}: not one block (a block start missing, or another one inside)",
                                 problem=RecordingProblem.BAD_BLOCK)
        at = end
