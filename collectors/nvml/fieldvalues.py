"""``nvmlDeviceGetFieldValues`` for a fixed list of fields, without pynvml's per-call Python.

pynvml's wrapper (nvidia-ml-py) builds a new ``c_nvmlFieldValue_t`` array on
every call and sets two attributes per field, and its structures answer every
attribute read in Python (``_PrintableStructure.__getattribute__``). For the
36 NVLink fields of an 18-link GPU that is most of the GPU's read. A
:class:`RawFieldValues` calls the C function pynvml loaded into one array made
once (the field ids and scopes are inputs NVML does not change), and reads the
answers back as raw records with :mod:`struct`.

It is made only for the real binding: a module with ``nvmlLib`` (the loaded
library) and a ``c_nvmlFieldValue_t`` ctypes structure of nvml.h's size, with
``nvmlReturn`` and the value where nvml.h has them. A call that does not answer
0 gives None: the caller asks again through pynvml's wrapper, which turns the
code into the error :class:`~.query.Query` handles. One reader is one array:
not for two threads at once (the sampler reads GPUs from its one thread).
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Callable

RECORD = struct.Struct("=28xIQ")
"""nvml.h's nvmlFieldValue_t (40 bytes), the two parts read back: nvmlReturn at 28 and the value
at 32 (a union of 8 bytes: ``ullVal`` for the counters read here); fieldId, scopeId, timestamp,
latencyUsec and valueType before them are skipped."""
_OFFSETS = (28, 32)


def _offsets(record: type[ctypes.Structure]) -> tuple[int, ...]:
    """Where the binding's structure holds nvmlReturn and the value (-1: it has no field so named)."""
    return tuple(getattr(getattr(record, name, None), "offset", -1) for name in ("nvmlReturn", "value"))


class RawFieldValues:
    """The C ``nvmlDeviceGetFieldValues`` for fixed (field id, scope) pairs, into an array made once."""

    __slots__ = ("_all", "_args", "_array", "_bytes", "_fn")

    def __init__(self, fn: Callable[..., int], handle: object, array: ctypes.Array[ctypes.Structure]) -> None:
        self._fn = fn
        self._array = array
        self._args = (handle, ctypes.c_int32(len(array)), ctypes.byref(array))
        self._bytes = memoryview(array).cast("B")  # the array's memory, read after each call
        self._all = struct.Struct("=" + RECORD.format[1:] * len(array))
        """Every record's (nvmlReturn, value) in one unpack, flat."""

    @classmethod
    def make(cls, nvml: object, handle: object, ids: list[tuple[int, int]]) -> RawFieldValues | None:
        """The reader, or None where the binding is not nvidia-ml-py's ctypes one (a test double)."""
        lib = getattr(nvml, "nvmlLib", None)
        record = getattr(nvml, "c_nvmlFieldValue_t", None)
        if (lib is None or not ids or not isinstance(record, type) or not issubclass(record, ctypes.Structure)
                or ctypes.sizeof(record) != RECORD.size or _offsets(record) != _OFFSETS):
            return None
        fn = getattr(lib, "nvmlDeviceGetFieldValues", None)
        if fn is None:  # a driver without it: pynvml's wrapper says so, through Query
            return None
        array = (record * len(ids))()
        for slot, (field_id, scope) in zip(array, ids, strict=True):
            slot.fieldId, slot.scopeId = field_id, scope
        return cls(fn, handle, array)

    def columns(self, start: int, stop: int) -> tuple[memoryview, memoryview] | None:
        """Views of fields ``start`` to ``stop``: their return codes (uint32) and values (uint64), read in
        place after each call (``any``/``sum`` over them run in C, no tuple made); None where the array's
        size is not a whole number of 8-byte words."""
        if self._bytes.nbytes % 8:
            return None
        stride = RECORD.size
        codes = self._bytes.cast("I")[_OFFSETS[0] // 4::stride // 4]
        values = self._bytes.cast("Q")[_OFFSETS[1] // 8::stride // 8]
        return codes[start:stop], values[start:stop]

    @property
    def address(self) -> int:
        """Where the array is (for a batch that makes the call: collectors.nvml.fastread)."""
        return ctypes.addressof(self._array)

    def __len__(self) -> int:
        return len(self._array)

    def read(self) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """(each field's return code, each field's value as ``ullVal``) in the order asked, or None
        when the call did not answer 0."""
        if self._fn(*self._args) != 0:
            return None
        return self.answers()

    def answers(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """What the last call, made here or by a batch, left in the array (as :meth:`read` gives it)."""
        flat = self._all.unpack_from(self._bytes)
        return flat[0::2], flat[1::2]
