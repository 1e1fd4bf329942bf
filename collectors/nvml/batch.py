"""Many NVML calls in one crossing from Python into C (``nvbatch.c``).

Through ctypes every NVML call costs a Python-to-C crossing, an argument
conversion and pynvml's wrapper; a GPU's read makes about twenty. A
:class:`CallBatch` holds a list of calls made once (function addresses that
pynvml resolved in the library it loaded, arguments, and output places in one
buffer Python owns) and :meth:`CallBatch.run` makes all of them in one call of
``gpulens_nvml_batch``; the return codes come back as a list, the answers in
:attr:`CallBatch.arena`, read with :mod:`struct`.

The C part is built at install time (setup.py) next to this module as
:data:`LIBRARY`, a plain shared object loaded with ctypes, never imported. Without it (no C compiler when
gpulens was installed) :func:`load` says why and GPUs are read through pynvml
alone. It knows no NVML structure: the caller lays out the outputs and reads
them back.
"""

from __future__ import annotations

import ctypes
import functools
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

P, PO, PIO, PIIO, POO, PCO, POU, POCQ = range(8)
"""Argument shapes, as nvbatch.c names them (GL_P ...): p pointer, i int, u unsigned int, q unsigned
long long, O the output (``out``), C an unsigned int count (``out2``) set to ``cap`` before the call."""
NOT_CALLED = -1
"""The code of a call that was not made (switched off, its ``after`` call failed, or the GPU was lost)."""
LIBRARY = "libgpulens-nvbatch.so.1"
"""What setup.py builds nvbatch.c into, beside this module (a shared object's name: never imported)."""
ALIGN = 8


class _Call(ctypes.Structure):
    """nvbatch.c's gl_call."""

    _fields_ = (
        ("fn", ctypes.c_void_p), ("a0", ctypes.c_void_p), ("out", ctypes.c_void_p), ("out2", ctypes.c_void_p),
        ("i1", ctypes.c_uint64), ("i2", ctypes.c_uint64), ("shape", ctypes.c_uint32), ("cap", ctypes.c_uint32),
        ("after", ctypes.c_int32), ("on", ctypes.c_int32),
    )


VERSION = 2
"""nvbatch.c's GL_VERSION."""
ABI = (VERSION << 16) | ctypes.sizeof(_Call)
"""What ``gpulens_nvml_batch_abi()`` answers when the library was built from this version of nvbatch.c."""
_SIZE, _ON, _I1, _OUT = ctypes.sizeof(_Call), _Call.on.offset, _Call.i1.offset, _Call.out.offset
_I32, _U64 = struct.Struct("=i"), struct.Struct("=Q")
"""nvbatch.c's gl_call: its size and where ``on``, ``i1`` and ``out`` lie (out: a pointer, 8 bytes on the
64-bit machines NVML runs on; :func:`load` refuses others)."""


class _List(ctypes.Structure):
    """nvbatch.c's gl_list."""

    _fields_ = (("calls", ctypes.c_void_p), ("codes", ctypes.c_void_p), ("n", ctypes.c_int32),
                ("pad", ctypes.c_int32))


@functools.cache
def _library() -> ctypes.CDLL | str:
    """The library built beside this module, its functions' signatures set, or why it cannot be had."""
    if ctypes.sizeof(ctypes.c_void_p) != 8:
        return "the NVML call batch needs a 64-bit machine; GPUs are read through pynvml's wrappers alone"
    path = Path(__file__).resolve().parent / LIBRARY
    if not path.is_file():
        return ("the NVML call batch (collectors/nvml/nvbatch.c) was not built when gpulens was installed "
                "(no C compiler then?); GPUs are read through pynvml's wrappers alone")
    try:
        lib = ctypes.CDLL(str(path))
        abi, one, many = lib.gpulens_nvml_batch_abi, lib.gpulens_nvml_batch, lib.gpulens_nvml_batches
    except (OSError, AttributeError) as err:
        return f"the NVML call batch {path.name} does not load: {err}"
    abi.argtypes, abi.restype = (), ctypes.c_int
    if abi() != ABI:  # built from another version of nvbatch.c: never called with a layout it does not know
        return (f"the NVML call batch {path.name} was built from another nvbatch.c (ABI {abi():#x}, "
                f"expected {ABI:#x}); reinstall gpulens (make run) to rebuild it")
    one.argtypes, one.restype = (ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p), ctypes.c_int
    many.argtypes, many.restype = (ctypes.c_void_p, ctypes.c_int), ctypes.c_int
    return lib


def load() -> ctypes._CFuncPtr | str:  # type: ignore[name-defined]  # ctypes's private base class names the type
    """``gpulens_nvml_batch`` from the library built beside this module, or why it cannot be had."""
    lib = _library()
    return lib if isinstance(lib, str) else lib.gpulens_nvml_batch


@dataclass(frozen=True, slots=True)
class Call:
    """One call of a batch: ``fn`` (an address) in ``shape``, with its outputs in the arena.

    ``out``/``out2``: bytes the call writes, placed in the arena (0: none), or ``out_ptr``: an
    address the caller owns, passed as is (a GPM sample). ``after``: the index of an earlier call
    that must have answered 0 for this one to be made (-1: none).
    """

    fn: int
    shape: int
    a0: int
    out: int = 0
    out2: int = 0
    i1: int = 0
    i2: int = 0
    cap: int = 0
    after: int = -1
    out_ptr: int | None = None


class CallBatch:
    """A fixed list of calls, made in one crossing; not for two threads at once."""

    __slots__ = ("_args", "_calls", "_codes", "_fn", "_raw", "arena", "offsets", "switched_on")

    def __init__(self, fn: ctypes._CFuncPtr, calls: Sequence[Call]) -> None:  # type: ignore[name-defined]
        self._fn = fn
        self.offsets: list[tuple[int, int]] = []
        """Each call's (out, out2) offset in :attr:`arena` (-1: none)."""
        size = 0
        for call in calls:
            if call.shape in (PCO, POCQ) and not call.out2:
                raise ValueError("a list call needs its count (out2)")
            places = []
            for n in (call.out if call.out_ptr is None else 0, call.out2):
                if n:
                    places.append(size)
                    size += -(-n // ALIGN) * ALIGN
                else:
                    places.append(-1)
            self.offsets.append((places[0], places[1]))
        self.arena = (ctypes.c_char * max(size, ALIGN))()
        """The calls' outputs, at :attr:`offsets`; read with ``struct.unpack_from``."""
        base = ctypes.addressof(self.arena)
        self._calls = (_Call * len(calls))()
        for slot, call, (out, out2) in zip(self._calls, calls, self.offsets, strict=True):
            slot.fn, slot.a0, slot.shape, slot.cap = call.fn, call.a0, call.shape, call.cap
            slot.out = call.out_ptr if call.out_ptr is not None else (base + out if out >= 0 else None)
            slot.out2 = base + out2 if out2 >= 0 else None
            slot.i1, slot.i2, slot.after, slot.on = call.i1, call.i2, call.after, 1
        self._codes = (ctypes.c_int32 * len(calls))()
        self._args = (ctypes.byref(self._calls), len(calls), ctypes.byref(self._codes))
        self._raw = memoryview(self._calls).cast("B")
        """The calls' memory: the setters below write a field in place (no ctypes proxy per call)."""
        self.switched_on = [True] * len(calls)
        """Whether each call is made (:meth:`set_on`)."""

    def set_on(self, index: int, on: bool) -> None:
        """Make call ``index`` (True) or skip it (False: its code is NOT_CALLED)."""
        _I32.pack_into(self._raw, index * _SIZE + _ON, int(on))
        self.switched_on[index] = on

    def set_i1(self, index: int, value: int) -> None:
        """Change call ``index``'s first integer argument (a timestamp) for the next runs."""
        _U64.pack_into(self._raw, index * _SIZE + _I1, value)

    def set_out(self, index: int, address: int) -> None:
        """Change call ``index``'s output address (one the caller owns) for the next runs."""
        _U64.pack_into(self._raw, index * _SIZE + _OUT, address)

    def run(self) -> list[int]:
        """Make every call that is on; each call's return code, in order (NOT_CALLED: not made)."""
        self._fn(*self._args)
        return self._codes[:]

    def codes(self) -> list[int]:
        """The codes of the last run, made here or by a :class:`ManyBatches` that holds this batch."""
        return self._codes[:]


class ManyBatches:
    """Several batches (one a GPU) made in one crossing; it holds them, so their memory outlives it."""

    __slots__ = ("_args", "_batches", "_fn", "_lists")

    def __init__(self, batches: Sequence[CallBatch]) -> None:
        lib = _library()
        if isinstance(lib, str):
            raise ValueError(lib)
        self._fn = lib.gpulens_nvml_batches
        self._batches = tuple(batches)
        self._lists = (_List * len(batches))()
        for slot, one in zip(self._lists, self._batches, strict=True):
            slot.calls = ctypes.addressof(one._calls)
            slot.codes = ctypes.addressof(one._codes)
            slot.n = len(one._codes)
        self._args = (ctypes.byref(self._lists), len(self._batches))

    def run(self) -> None:
        """Run every batch once, in order; each one's codes from its :meth:`CallBatch.codes`."""
        self._fn(*self._args)
