"""Where CPython 3.10–3.13 keep their threads, frames and code objects: offsets per version, or read at run time.

Up to 3.12 the offsets come from a table, one entry per version, each verified
against that real interpreter's internal headers by
tests/integration/test_gpumem_python.py (it compiles ``offsetof`` of each
field). From 3.13 the interpreter publishes them itself: ``_Py_DebugOffsets``
sits at the start of ``_PyRuntime`` (a cookie ``xdebugpy``, the version, then
one block of offsets per structure), so :func:`debug_layout` reads them from
the traced process's memory, and the same test checks what it reads against
``offsetof`` too.

What differs between versions, beyond the numbers:

- 3.10 has frame objects (``PyThreadState.frame`` → ``PyFrameObject``, linked by
  ``f_back``) whose ``f_lasti`` is an instruction index, a line table of byte
  pairs (PEP 626), no ``co_qualname``, and no ``native_thread_id``: its thread
  state holds the ``pthread_t``, whose thread id glibc keeps at an offset found
  once per process (:func:`pthread_tid_offset`).
- 3.11 and 3.12 reach the frame through ``_PyCFrame.current_frame``; 3.13 holds
  it in the thread state (``cframe_frame`` is :data:`DIRECT`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from gpulens.core.errors import GpulensError

DIRECT = 0xFFFFFFFF
"""``cframe_frame``/``pthread_tid`` value: no indirection (what the BPF program reads as "none")."""


@dataclass(frozen=True, slots=True)
class PyLayout:
    """Offsets into CPython's runtime, thread state, frame and code objects (bytes)."""

    interp_head: int
    threads_head: int
    tstate_next: int
    tstate_native_tid: int
    """``native_thread_id``, or (3.10, :attr:`tid_via_pthread`) ``thread_id``: the ``pthread_t``."""
    tstate_frame: int
    cframe_frame: int
    frame_code: int
    frame_previous: int
    frame_instr: int
    code_filename: int
    code_name: int
    code_qualname: int
    """0: the version has no ``co_qualname`` (3.10): frames are named by ``co_name``."""
    code_firstlineno: int
    code_linetable: int
    code_adaptive: int
    ascii_data: int
    """sizeof(PyASCIIObject): a compact ASCII string's characters follow it."""
    compact_data: int
    """sizeof(PyCompactUnicodeObject): other compact strings' characters follow it."""
    bytes_data: int = 32
    """offsetof(PyBytesObject, ob_sval)."""
    lasti: bool = False
    """3.10: ``frame_instr`` is ``f_lasti`` (an int, in code units) and the line table is 3.10's."""
    tid_via_pthread: bool = False
    """3.10: the thread's id is read through its ``pthread_t`` (see :func:`pthread_tid_offset`)."""


LAYOUTS: dict[tuple[int, int], PyLayout] = {
    # CPython 3.10 (x86_64): Include/cpython/{pystate,frameobject,code}.h, internal/pycore_runtime.h.
    (3, 10): PyLayout(interp_head=32, threads_head=8, tstate_next=8, tstate_native_tid=176, tstate_frame=24,
                      cframe_frame=DIRECT, frame_code=32, frame_previous=24, frame_instr=96, code_filename=104,
                      code_name=112, code_qualname=0, code_firstlineno=40, code_linetable=120, code_adaptive=0,
                      ascii_data=48, compact_data=72, lasti=True, tid_via_pthread=True),
    # CPython 3.11 (x86_64), from Include/internal/pycore_{runtime,interp,frame}.h and cpython/code.h.
    (3, 11): PyLayout(interp_head=40, threads_head=16, tstate_next=8, tstate_native_tid=160, tstate_frame=56,
                      cframe_frame=8, frame_code=32, frame_previous=48, frame_instr=56, code_filename=112,
                      code_name=120, code_qualname=128, code_firstlineno=72, code_linetable=136,
                      code_adaptive=184, ascii_data=48, compact_data=72),
    # CPython 3.12 (x86_64): same headers; the frame's f_code moved first, strings lost wstr.
    (3, 12): PyLayout(interp_head=40, threads_head=72, tstate_next=8, tstate_native_tid=144, tstate_frame=56,
                      cframe_frame=0, frame_code=0, frame_previous=8, frame_instr=56, code_filename=112,
                      code_name=120, code_qualname=128, code_firstlineno=68, code_linetable=136,
                      code_adaptive=192, ascii_data=40, compact_data=56),
}

DEBUG_VERSIONS = ((3, 13),)
"""Versions whose ``_Py_DebugOffsets`` has the field order below (3.14 added fields in the middle)."""

_DEBUG_FIELDS = (
    "version", "free_threaded", "rt_size", "rt_finalizing", "rt_interpreters_head", "is_size", "is_id", "is_next",
    "is_threads_head", "is_gc", "is_imports_modules", "is_sysdict", "is_builtins", "is_ceval_gil",
    "is_gil_runtime_state", "is_gil_enabled", "is_gil_locked", "is_gil_holder", "ts_size", "ts_prev", "ts_next",
    "ts_interp", "ts_current_frame", "ts_thread_id", "ts_native_thread_id", "ts_datastack_chunk", "ts_status",
    "fr_size", "fr_previous", "fr_executable", "fr_instr_ptr", "fr_localsplus", "fr_owner", "co_size", "co_filename",
    "co_name", "co_qualname", "co_linetable", "co_firstlineno", "co_argcount", "co_localsplusnames",
    "co_localspluskinds", "co_code_adaptive", "ob_size", "ob_type", "ty_size", "ty_name", "ty_repr", "ty_flags",
    "tu_size", "tu_item", "tu_ob_size", "li_size", "li_item", "li_ob_size", "di_size", "di_keys", "di_values",
    "fl_size", "fl_fval", "lo_size", "lo_tag", "lo_digit", "by_size", "by_ob_size", "by_sval", "un_size", "un_state",
    "un_length", "un_ascii_size", "gc_size", "gc_collecting",
)
DEBUG_OFFSETS = struct.Struct(f"<8s{len(_DEBUG_FIELDS)}Q")
"""CPython 3.13's ``_Py_DebugOffsets`` (Include/internal/pycore_runtime.h): a cookie, then uint64 fields."""


class LayoutError(GpulensError):
    """Why a process's CPython layout cannot be known (the message names what was found)."""

    title = "unknown CPython layout"


def debug_layout(raw: bytes) -> tuple[tuple[int, int], PyLayout]:
    """The version and layout a 3.13+ interpreter publishes in the ``_Py_DebugOffsets`` at ``_PyRuntime``.

    Raises:
        LayoutError: no cookie, a version whose debug offsets gpulens does not know, a free-threaded build.
    """
    if len(raw) < DEBUG_OFFSETS.size or not raw.startswith(b"xdebugpy"):
        raise LayoutError("_PyRuntime does not start with _Py_DebugOffsets (no 'xdebugpy' cookie)")
    _cookie, *values = DEBUG_OFFSETS.unpack_from(raw)
    f = dict(zip(_DEBUG_FIELDS, values, strict=True))
    version = ((f["version"] >> 24) & 0xFF, (f["version"] >> 16) & 0xFF)
    if version not in DEBUG_VERSIONS:
        raise LayoutError(f"CPython {version[0]}.{version[1]}: its _Py_DebugOffsets are not known to gpulens "
                          f"(known: {', '.join(f'{a}.{b}' for a, b in DEBUG_VERSIONS)})")
    if f["free_threaded"]:
        raise LayoutError("a free-threaded CPython build: its objects are laid out differently (not supported)")
    # sizeof(PyCompactUnicodeObject) = sizeof(PyASCIIObject) + utf8_length + utf8 (two words) since 3.12.
    return version, PyLayout(
        interp_head=f["rt_interpreters_head"], threads_head=f["is_threads_head"], tstate_next=f["ts_next"],
        tstate_native_tid=f["ts_native_thread_id"], tstate_frame=f["ts_current_frame"], cframe_frame=DIRECT,
        frame_code=f["fr_executable"], frame_previous=f["fr_previous"], frame_instr=f["fr_instr_ptr"],
        code_filename=f["co_filename"], code_name=f["co_name"], code_qualname=f["co_qualname"],
        code_firstlineno=f["co_firstlineno"], code_linetable=f["co_linetable"],
        code_adaptive=f["co_code_adaptive"], ascii_data=f["un_ascii_size"], compact_data=f["un_ascii_size"] + 16,
        bytes_data=f["by_sval"])


PTHREAD_SPAN = 1024
"""Bytes of a ``struct pthread`` searched for its thread id (glibc keeps it at 720 on x86_64; the struct is 2,304)."""
MAX_THREAD_STATES = 256


def thread_states(read_ptr: Callable[[int], int], runtime: int, layout: PyLayout) -> list[int]:
    """The thread states of the main interpreter (at most :data:`MAX_THREAD_STATES`)."""
    interp = read_ptr(runtime + layout.interp_head)
    ts = read_ptr(interp + layout.threads_head) if interp else 0
    out: list[int] = []
    while ts and len(out) < MAX_THREAD_STATES and ts not in out:
        out.append(ts)
        ts = read_ptr(ts + layout.tstate_next)
    return out


def pthread_tid_offset(read: Callable[[int, int], bytes], runtime: int, layout: PyLayout, tids: set[int],
                       pid: int) -> int:
    """Where glibc's ``struct pthread`` holds the kernel thread id, found in this process (3.10's way to a thread).

    Each thread state's ``thread_id`` is its thread's ``pthread_t``: the address of
    its ``struct pthread``. The offset is the one where, for every thread state,
    the 32-bit value is one of the process's thread ids, and the main
    thread's is the process id.

    Raises:
        LayoutError: no thread state, or no offset that fits every thread.
    """
    def ptr(addr: int) -> int:
        value: int = struct.unpack("<Q", read(addr, 8))[0]
        return value

    states = thread_states(ptr, runtime, layout)
    if not states:
        raise LayoutError("no Python thread state found (the interpreter is not initialised yet?)")
    fits: set[int] | None = None
    main: set[int] = set()
    for ts in states:
        handle = ptr(ts + layout.tstate_native_tid)
        if not handle:
            continue
        words = struct.unpack(f"<{PTHREAD_SPAN // 4}I", read(handle, PTHREAD_SPAN))
        here = {4 * i for i, w in enumerate(words) if w in tids}
        fits = here if fits is None else fits & here
        main |= {4 * i for i, w in enumerate(words) if w == pid}
    found = (fits or set()) & main
    if not found:
        raise LayoutError("the thread id in glibc's struct pthread was not found (not glibc?)")
    return 720 if 720 in found else min(found)


__all__ = ["DEBUG_OFFSETS", "DIRECT", "LAYOUTS", "LayoutError", "PyLayout", "debug_layout", "pthread_tid_offset",
           "thread_states"]
