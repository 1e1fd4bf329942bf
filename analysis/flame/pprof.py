"""google/pprof's ``profile.proto`` in and out (gzipped), for CPU time, samples, perf event counts and
GPU-memory bytes (issue 32 item 13).

The wire format is written and read here by hand (varints and length-delimited
fields, the few messages a flame graph needs), so no protobuf package is
needed. Field numbers are those of ``proto/profile.proto`` in google/pprof:

``Profile``: sample_type 1, sample 2, location 4, function 5, string_table 6,
time_nanos 9, duration_nanos 10, default_sample_type 14 · ``ValueType``: type 1,
unit 2 · ``Sample``: location_id 1 (leaf first), value 2, label 3 ·
``Label``: key 1, str 2 · ``Location``: id 1, line 4 · ``Line``: function_id 1,
line 2 · ``Function``: id 1, name 2, system_name 3, filename 4.

A frame ``Class > method (file.py:42)`` is written as function
``Class > method``, file ``file.py``, line 42, so ``go tool pprof`` shows it
as pprof users expect; reading joins them back. Angle brackets in a name
(``<module>``) are written as ``‹›``, which pprof's display keeps (it strips
``<…>`` as C++ template arguments), and read back as ``<>``. Reading is bounded: at most
:data:`MAX_BYTES` uncompressed, :data:`MAX_ITEMS` messages, nesting as the
format has it; anything malformed is a :class:`FlameFormatError`.
"""

from __future__ import annotations

import gzip
import re
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from gpulens.analysis.flame.errors import FlameFormatError, FlameProblem
from gpulens.analysis.flame.model import Profile, build_from_stacks
from gpulens.analysis.flame.units import unit_event

MAX_BYTES = 512 << 20
MAX_ITEMS = 20_000_000
_FRAME = re.compile(r"^(?P<name>.*) \((?P<file>[^()]*):(?P<line>\d+)\)$")
UNITS = {"bytes": ("space", "bytes"), "samples": ("samples", "count"), "seconds": ("cpu", "nanoseconds")}
"""Profile unit -> pprof (type, unit); seconds are written as integer nanoseconds."""
_SCALE = {"bytes": 1.0, "samples": 1.0, "seconds": 1e9}


def sample_type(unit: str) -> tuple[str, str]:
    """The pprof (type, unit) a profile in ``unit`` is written with: :data:`UNITS`, and
    ``events:NAME`` as (NAME, ``count``), e.g. ``("cycles", "count")``."""
    event = unit_event(unit)
    return (event, "count") if event else UNITS[unit]
_BRACKETS = re.compile(r"<([^<>]*)>")
"""pprof's display strips C++ template arguments, ``<...>``: ``<module>`` would read ``<unknown>``."""
_QUOTES = re.compile(r"‹([^‹›]*)›")


# -- writing --------------------------------------------------------------------------------------
def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # int64 fields: two's complement, as protobuf writes negative numbers
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(num: int, value: int) -> bytes:
    return _varint(num << 3) + _varint(value)


def _bytes(num: int, data: bytes) -> bytes:
    return _varint(num << 3 | 2) + _varint(len(data)) + data


def _packed(num: int, values: Iterable[int]) -> bytes:
    return _bytes(num, b"".join(_varint(v) for v in values))


class _Strings:
    def __init__(self) -> None:
        self.index: dict[str, int] = {"": 0}

    def __call__(self, s: str) -> int:
        got = self.index.get(s)
        if got is None:
            got = self.index[s] = len(self.index)
        return got


def to_pprof(stacks: Iterable[tuple[Sequence[str], float]], unit: str, *,
             labels: Mapping[str, str] | None = None, duration_s: float = 0.0) -> bytes:
    """A gzipped ``profile.proto`` of ``stacks`` (frames root first) in ``unit`` (:func:`sample_type`)."""
    kind, written_unit = sample_type(unit)
    scale = _SCALE.get(unit, 1.0)
    strings = _Strings()
    functions: dict[tuple[str, str], int] = {}
    locations: dict[tuple[str, str, int], int] = {}
    fn_msgs: list[bytes] = []
    loc_msgs: list[bytes] = []
    samples: list[bytes] = []
    label_msgs = b"".join(_bytes(3, _field(1, strings(k)) + _field(2, strings(v)))
                          for k, v in sorted((labels or {}).items()))
    for frames, value in stacks:
        ids = []
        for frame in reversed(frames):  # pprof: the leaf first
            m = _FRAME.match(frame)
            name, file, line = (m["name"], m["file"], int(m["line"])) if m else (frame, "", 0)
            name = _BRACKETS.sub(r"‹\1›", name)
            fid = functions.get((name, file))
            if fid is None:
                fid = functions[(name, file)] = len(functions) + 1
                fn_msgs.append(_bytes(5, _field(1, fid) + _field(2, strings(name)) + _field(3, strings(name))
                                      + _field(4, strings(file))))
            lid = locations.get((name, file, line))
            if lid is None:
                lid = locations[(name, file, line)] = len(locations) + 1
                loc_msgs.append(_bytes(4, _field(1, lid) + _bytes(4, _field(1, fid) + _field(2, line))))
            ids.append(lid)
        samples.append(_bytes(2, _packed(1, ids) + _packed(2, [round(value * scale)]) + label_msgs))
    head = _bytes(1, _field(1, strings(kind)) + _field(2, strings(written_unit)))
    tail = _field(9, time.time_ns()) + (_field(10, round(duration_s * 1e9)) if duration_s else b"")
    table = b"".join(_bytes(6, s.encode()) for s in strings.index)
    return gzip.compress(head + b"".join(samples) + b"".join(loc_msgs) + b"".join(fn_msgs) + table + tail, 6)


# -- reading --------------------------------------------------------------------------------------
def looks_like_pprof(data: bytes) -> bool:
    """Uncompressed pprof begins with its first ``sample_type``: field 1, length-delimited, a short
    ``ValueType`` whose first field is a varint (``0a LL 08``); no text format starts so."""
    return len(data) > 3 and data[0] == 0x0A and data[1] < 0x40 and data[2] == 0x08

def _read_varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(data) or shift > 63:
            raise FlameFormatError("pprof: truncated or overlong varint",
                                   problem=FlameProblem.TRUNCATED if i >= len(data) else FlameProblem.MALFORMED)
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, i


def _fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of one message: an int for varints, bytes for length-delimited fields."""
    i, n = 0, 0
    while i < len(data):
        key, i = _read_varint(data, i)
        num, wire = key >> 3, key & 7
        n += 1
        if n > MAX_ITEMS:
            raise FlameFormatError(f"pprof: over {MAX_ITEMS} fields in one message", problem=FlameProblem.TOO_LARGE)
        if wire == 0:
            value, i = _read_varint(data, i)
            yield num, value
        elif wire == 2:
            size, i = _read_varint(data, i)
            if i + size > len(data):
                raise FlameFormatError("pprof: a field runs past the end of its message", problem=FlameProblem.TRUNCATED)
            yield num, data[i:i + size]
            i += size
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            raise FlameFormatError(f"pprof: wire type {wire} is not protobuf's")


def _ints(value: int | bytes) -> list[int]:
    """A repeated integer field's values, packed or not."""
    if isinstance(value, int):
        return [value]
    out, i = [], 0
    while i < len(value):
        v, i = _read_varint(value, i)
        out.append(v)
    return out


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _unzipped(raw: bytes, source: str) -> bytes:
    """``raw`` gunzipped when it is gzip, within :data:`MAX_BYTES` either way."""
    if raw[:2] == b"\x1f\x8b":
        unzip = zlib.decompressobj(wbits=47)
        try:
            data = unzip.decompress(raw, MAX_BYTES)
        except zlib.error as err:
            raise FlameFormatError(f"{source}: not a gzip stream: {err}", problem=FlameProblem.TRUNCATED) from None
        if unzip.unconsumed_tail:
            raise FlameFormatError(f"{source}: over {MAX_BYTES >> 20} MiB uncompressed", problem=FlameProblem.TOO_LARGE)
        return data
    if len(raw) > MAX_BYTES:
        raise FlameFormatError(f"{source}: over {MAX_BYTES >> 20} MiB", problem=FlameProblem.TOO_LARGE)
    return raw


class _Tables:
    """The ``Profile`` messages a flame graph needs, decoded one top-level field at a time."""

    def __init__(self) -> None:
        self.strings: list[str] = []
        self.types: list[tuple[int, int]] = []
        self.samples: list[tuple[list[int], list[int]]] = []
        self.locations: dict[int, list[tuple[int, int]]] = {}
        self.functions: dict[int, tuple[int, int]] = {}
        self.default = 0

    def add(self, num: int, value: int | bytes) -> None:
        if isinstance(value, bytes):
            decode = _MESSAGES.get(num)
            if decode is not None:
                decode(self, value)
        elif num == 14:
            self.default = value

    def string(self, value: bytes) -> None:
        self.strings.append(value.decode("utf-8", "replace"))

    def value_type(self, value: bytes) -> None:
        f = dict(_fields(value))
        self.types.append((int(f.get(1, 0)), int(f.get(2, 0))))

    def sample(self, value: bytes) -> None:
        ids: list[int] = []
        vals: list[int] = []
        for num, v in _fields(value):
            if num == 1:
                ids += _ints(v)
            elif num == 2:
                vals += [_signed(x) for x in _ints(v)]
        self.samples.append((ids, vals))

    def location(self, value: bytes) -> None:
        lid, lines = 0, []
        for num, v in _fields(value):
            if num == 1 and isinstance(v, int):
                lid = v
            elif num == 4 and isinstance(v, bytes):
                line = dict(_fields(v))
                lines.append((int(line.get(1, 0)), _signed(int(line.get(2, 0)))))
        self.locations[lid] = lines

    def function(self, value: bytes) -> None:
        f = dict(_fields(value))
        self.functions[int(f.get(1, 0))] = (int(f.get(2, 0)), int(f.get(4, 0)))


_MESSAGES: dict[int, Callable[[_Tables, bytes], None]] = {
    6: _Tables.string, 1: _Tables.value_type, 2: _Tables.sample, 4: _Tables.location, 5: _Tables.function,
}
"""``Profile`` field number -> the decoder of its length-delimited message."""
_OUR_UNITS = {"bytes": ("bytes", 1.0), "nanoseconds": ("seconds", 1e-9), "microseconds": ("seconds", 1e-6)}
"""pprof unit -> (our unit, scale); anything else is counted as samples."""


class _Stacks:
    """Frames (root first) of samples, with strings looked up and bounds-checked."""

    def __init__(self, tables: _Tables, source: str) -> None:
        self.tables = tables
        self.source = source

    def text(self, i: int) -> str:
        strings = self.tables.strings
        if not 0 <= i < len(strings):
            raise FlameFormatError(f"{self.source}: string index {i} outside the table of {len(strings)}", problem=FlameProblem.BAD_REFERENCE)
        return strings[i]

    def frames(self, ids: list[int]) -> list[str]:
        out: list[str] = []
        for lid in reversed(ids):  # root first
            for fid, line in reversed(self.tables.locations.get(lid, [(0, 0)])):  # inlined: the caller's line last
                name_i, file_i = self.tables.functions.get(fid, (0, 0))
                name, file = _QUOTES.sub(r"<\1>", self.text(name_i)) or f"0x{lid:x}", self.text(file_i)
                out.append(f"{name} ({file}:{line})" if file and line else name)
        return out


def read_pprof(raw: bytes, source: str = "input") -> Profile:
    """A profile from pprof bytes (gzipped or not); its default sample type, else its last one.

    Raises:
        FlameFormatError: not pprof, malformed, or over the bounds.
    """
    tables = _Tables()
    for num, value in _fields(_unzipped(raw, source)):
        tables.add(num, value)
    types, default = tables.types, tables.default
    if not types or not tables.strings or tables.strings[0] != "":
        raise FlameFormatError(f"{source}: not a pprof profile (no sample type or string table)", problem=FlameProblem.UNSUPPORTED)
    stacks_of = _Stacks(tables, source)
    which = next((k for k, (t, _) in enumerate(types) if default and t == default), len(types) - 1)
    kind, unit = stacks_of.text(types[which][0]), stacks_of.text(types[which][1])
    ours, scale = _OUR_UNITS.get(unit, ("samples", 1.0))
    stacks = ((stacks_of.frames(ids), vals[which] * scale)
              for ids, vals in tables.samples if len(vals) > which and vals[which] > 0)
    return build_from_stacks(stacks, ours, f"{source} ({kind}, {unit})")
