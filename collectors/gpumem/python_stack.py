"""CPython in another process: where its runtime is, how its frames are laid out, what a code object says.

The BPF program walks a thread's frames with the offsets of :class:`PyLayout`
(per CPython version; each verified against that real interpreter by
tests/integration/test_gpumem_python.py, which compiles ``offsetof`` from the
interpreter's own internal headers) and sends code object addresses and last
instructions. This module turns them into frames the seed's way (``Class >
method (file:line)``), reading the target's memory through
``/proc/PID/mem`` (root, or the target's own user) once per code object.

CPython 3.10 to 3.12 come from a table, 3.13 from the ``_Py_DebugOffsets`` the
interpreter publishes (:mod:`.layouts`). Other versions are refused with the
reason, so their allocations still show, under ``<python frames not read: …>``.
CPython's own frames (3.12's shim code object, 3.13's entry frames, whose
executable is ``None``) read ``<interpreter trampoline>``, as the seed labels them.
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass

from gpulens.collectors.gpumem.elf import ElfError, read_mapped_elf
from gpulens.collectors.gpumem.layouts import (
    DEBUG_OFFSETS,
    DIRECT,
    LAYOUTS,
    LayoutError,
    PyLayout,
    debug_layout,
    pthread_tid_offset,
)
from gpulens.collectors.gpumem.native import file_mappings
from gpulens.core.errors import GpulensError
from gpulens.core.sanitize import clean_text

_LIB = re.compile(r"/(?:lib)?python3\.(\d+)[^/]*$")
MAX_TEXT = 1024
"""Characters of a name or file read at most."""
MAX_LINETABLE = 64 * 1024
TRAMPOLINE = "<interpreter trampoline>"


@dataclass(frozen=True, slots=True)
class PyTarget:
    """One traced Python process: its version, layout and the address of ``_PyRuntime``."""

    pid: int
    version: tuple[int, int]
    layout: PyLayout
    runtime: int
    code_type: int = 0
    """Address of ``PyCode_Type`` in the process (0: unknown, frames are not checked to be code)."""
    pthread_tid: int = DIRECT
    """Where glibc's ``struct pthread`` holds the thread id (3.10); :data:`DIRECT` otherwise."""


class PythonNotReadable(GpulensError):
    """Why a process's Python frames cannot be read (the message is shown in its flame)."""

    title = "Python frames not readable"


def find_python(pid: int) -> PyTarget:
    """Where ``pid``'s interpreter keeps its runtime, and which layout it has.

    Raises:
        PythonNotReadable: not a CPython process, an unknown version, or unreadable.
    """
    try:
        maps = file_mappings(pid)
    except OSError as err:
        raise PythonNotReadable(f"/proc/{pid}/maps: {err.strerror}") from None
    tried: list[str] = []
    for path in dict.fromkeys(m.path for m in maps):
        m = _LIB.search(path)
        if m is None:
            continue
        version = (3, int(m.group(1)))
        first = next(m for m in maps if m.path == path)
        try:
            elf = read_mapped_elf(pid, first.start, first.end, path)
        except (OSError, ElfError) as err:
            tried.append(f"{path}: {err}")
            continue
        sym = elf.symbols.get("_PyRuntime")
        if sym is None:
            tried.append(f"{path}: no _PyRuntime symbol")
            continue
        base = next(m.start for m in maps if m.path == path and m.offset == 0) - elf.first_vaddr
        code_type = elf.symbols.get("PyCode_Type")
        return _target(pid, version, base + sym.value, base + code_type.value if code_type is not None else 0)
    raise PythonNotReadable("not a CPython process" + (f" ({'; '.join(tried)})" if tried else ""))


def _target(pid: int, version: tuple[int, int], runtime: int, code_type: int) -> PyTarget:
    """``pid``'s interpreter: its layout from the table, or from 3.13's debug offsets; 3.10's pthread offset."""
    try:
        with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
            def read(addr: int, size: int) -> bytes:
                mem.seek(addr)
                data = mem.read(size)
                if len(data) != size:
                    raise OSError(f"short read at {addr:#x}")
                return data

            if version >= (3, 13):
                found, layout = debug_layout(read(runtime, DEBUG_OFFSETS.size))
                if found != version:
                    raise LayoutError(f"the library says CPython {version[0]}.{version[1]}, its runtime "
                                      f"{found[0]}.{found[1]}")
                return PyTarget(pid, version, layout, runtime, code_type)
            known = LAYOUTS.get(version)
            if known is None:
                raise LayoutError(f"CPython {version[0]}.{version[1]}: frame layout not known to gpulens (known: "
                                  f"{', '.join(f'{a}.{b}' for a, b in sorted(LAYOUTS))}, and 3.13 at run time)")
            if not known.tid_via_pthread:
                return PyTarget(pid, version, known, runtime, code_type)
            tids = {int(t) for t in os.listdir(f"/proc/{pid}/task")}
            return PyTarget(pid, version, known, runtime, code_type,
                            pthread_tid_offset(read, runtime, known, tids, pid))
    except LayoutError as err:
        raise PythonNotReadable(str(err)) from None
    except (OSError, struct.error) as err:
        raise PythonNotReadable(f"pid {pid}: its interpreter's memory: {err}") from None


class CodeReader:
    """Code objects of one process, read once each from ``/proc/PID/mem``."""

    def __init__(self, target: PyTarget) -> None:
        self.target = target
        self._fd = os.open(f"/proc/{target.pid}/mem", os.O_RDONLY)
        self._code: dict[int, tuple[str, str, int, bytes, int]] = {}
        self._types: dict[int, bool] = {}

    def close(self) -> None:
        """Release the process's memory file (idempotent)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _read(self, addr: int, size: int) -> bytes:
        data = os.pread(self._fd, size, addr)
        if len(data) != size:
            raise OSError(f"short read at {addr:#x}")
        return data

    def _ptr(self, addr: int) -> int:
        value: int = struct.unpack("<Q", self._read(addr, 8))[0]
        return value

    def _str(self, obj: int) -> str:
        lay = self.target.layout
        length, _hash, state = struct.unpack("<qqI", self._read(obj + 16, 20))
        length = max(0, min(length, MAX_TEXT))
        kind, compact, ascii_ = (state >> 2) & 7, (state >> 5) & 1, (state >> 6) & 1
        if not compact or kind not in (1, 2, 4):
            return "?"
        start = obj + (lay.ascii_data if ascii_ else lay.compact_data)
        raw = self._read(start, length * kind)
        codec = {1: "latin-1", 2: "utf-16-le", 4: "utf-32-le"}[kind]
        return raw.decode(codec, "replace")

    def code(self, addr: int) -> tuple[str, str, int, bytes, int]:
        """(qualname, filename, first line, line table, first instruction's address) of code object ``addr``."""
        hit = self._code.get(addr)
        if hit is None:
            lay = self.target.layout
            # A traced program names its own functions and files: cleaned here, before any terminal sees them.
            qual = clean_text(self._str(self._ptr(addr + (lay.code_qualname or lay.code_name))))
            filename = clean_text(self._str(self._ptr(addr + lay.code_filename)))
            first = struct.unpack("<i", self._read(addr + lay.code_firstlineno, 4))[0]
            table = self._ptr(addr + lay.code_linetable)
            size = min(max(struct.unpack("<q", self._read(table + 16, 8))[0], 0), MAX_LINETABLE)
            lines = self._read(table + lay.bytes_data, size)
            hit = self._code[addr] = (qual, filename, first, lines, addr + lay.code_adaptive)
        return hit

    def is_code(self, addr: int) -> bool:
        """Whether the object at ``addr`` is a code object (3.13's entry frames hold ``None``); True if unknown."""
        if not self.target.code_type:
            return True
        hit = self._types.get(addr)
        if hit is None:
            hit = self._types[addr] = self._ptr(addr + 8) == self.target.code_type
        return hit

    def frame(self, code: int, instr: int) -> str:
        """One frame's label: ``Class > method (file:line)``, ``fn (file:line)``, ``<module> (file:line)``.

        CPython 3.10 has no qualified names: its frames read ``method (file:line)``, as py-spy shows them.
        """
        try:
            if not self.is_code(code):
                return TRAMPOLINE
            qual, filename, first, table, start = self.code(code)
        except (OSError, struct.error):
            return f"<code object {code:#x}: unreadable>"
        if qual == TRAMPOLINE:  # 3.12's shim code object
            return TRAMPOLINE
        if self.target.layout.lasti:
            lasti = instr & 0xFFFFFFFF
            line = line_of_310(table, first, 2 * lasti) if lasti < 1 << 31 else first
        else:
            line = line_of(table, first, (instr - start) // 2) if instr >= start else first
        return f"{qual.replace('.', ' > ').replace('<locals> > ', '')} ({filename}:{line})"


def _varint(table: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while i < len(table):
        b = table[i]
        i += 1
        value |= (b & 63) << shift
        shift += 6
        if not b & 64:
            break
    return value, i


def line_of_310(table: bytes, first_line: int, offset: int) -> int:
    """The source line at byte ``offset`` of the bytecode, from a 3.10 line table (Objects/lnotab_notes.txt).

    The table is pairs (bytes advanced, signed line delta); a delta of -128 is "no line".
    """
    line = current = first_line
    end = 0
    for i in range(0, len(table) - 1, 2):
        start, end = end, end + table[i]
        delta = table[i + 1] - 256 if table[i + 1] > 127 else table[i + 1]
        if delta != -128:
            line += delta
            current = line
        if start <= offset < end:
            return current
    return current


def line_of(table: bytes, first_line: int, index: int) -> int:
    """The source line of code unit ``index``, from a 3.11 location table (Objects/locations.md)."""
    line, unit, i = first_line, 0, 0
    while i < len(table):
        head = table[i]
        i += 1
        code, length = (head >> 3) & 15, (head & 7) + 1
        delta = 0
        if code == 15:  # no location
            pass
        elif code == 14:  # long form: line delta, end line, column, end column
            raw, i = _varint(table, i)
            delta = -(raw >> 1) if raw & 1 else raw >> 1
            for _ in range(3):
                _, i = _varint(table, i)
        elif code == 13:  # no column: line delta
            raw, i = _varint(table, i)
            delta = -(raw >> 1) if raw & 1 else raw >> 1
        elif code >= 10:  # one-line forms: line delta code - 10, two column bytes
            delta, i = code - 10, i + 2
        else:  # short forms: same line, one column byte
            i += 1
        line += delta
        if unit <= index < unit + length:
            return line
        unit += length
    return line


__all__ = ["LAYOUTS", "TRAMPOLINE", "CodeReader", "PyLayout", "PyTarget", "PythonNotReadable", "find_python", "line_of",
           "line_of_310"]
