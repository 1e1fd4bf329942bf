"""Native frames of an allocation: return addresses symbolised from the ELF files a process maps.

The BPF program sends the user stack at the allocation's return probe (the
caller's address first, then whatever frame pointers lead to). This module
keeps the frames between the innermost Python frame and the CUDA call: it
stops at the first address in the interpreter (those frames are the Python
ones, read properly elsewhere) or in no file mapping (a frame pointer chain
that left the stack: what follows is not to be trusted), and drops frames in
the CUDA libraries themselves (the stack's leaf already names the call).
Frames read the seed's way: ``libname.so: symbol``, or ``libname.so+0x1f2c``
where the file has no symbol for the address. C++ names are demangled with
``c++filt`` where it is installed, once each.
"""

from __future__ import annotations

import bisect
import os
import re
import shutil
import subprocess
from dataclasses import dataclass

from gpulens.collectors.gpumem.elf import ElfError, ElfFile, read_mapped_elf
from gpulens.core.sanitize import clean_text

INTERPRETER = re.compile(r"/(?:lib)?python3\.\d+[^/]*$")
CUDA = re.compile(r"/lib(?:cuda|cudart)\.so[^/]*$")
MAX_FILES = 256
"""ELF files kept per tracer (a process maps a few dozen)."""
MAX_NAME = 512
MAX_DEMANGLED = 65536
"""C++ names kept demangled (one ``c++filt`` run each, the first time)."""


@dataclass(frozen=True, slots=True)
class Mapping:
    """A file mapping: [start, end) of the process's memory from ``offset`` of ``path``."""

    start: int
    end: int
    offset: int
    path: str
    executable: bool = True


@dataclass(frozen=True, slots=True)
class FunctionTable:
    """A file's functions, sorted by address, for lookups by return address."""

    elf: ElfFile
    starts: tuple[int, ...]
    ends: tuple[int, ...]
    names: tuple[str, ...]

    @classmethod
    def of(cls, elf: ElfFile) -> FunctionTable:
        """The function symbols of ``elf`` (those with a size), sorted."""
        funcs = sorted((s.value, s.value + s.size, s.name) for s in elf.symbols.values() if s.is_function and s.size)
        return cls(elf, tuple(f[0] for f in funcs), tuple(f[1] for f in funcs), tuple(f[2] for f in funcs))

    def name(self, vaddr: int) -> str | None:
        """The function holding ``vaddr`` (the file's own address), or None."""
        i = bisect.bisect_right(self.starts, vaddr) - 1
        return self.names[i] if i >= 0 and vaddr < self.ends[i] else None


def file_mappings(pid: int) -> list[Mapping]:
    """The file mappings of ``pid`` (``/proc/PID/maps``: the one reader of it here), sorted by address.

    Raises:
        OSError: the process is gone or its maps cannot be read.
    """
    out = []
    with open(f"/proc/{pid}/maps") as fh:
        for line in fh:
            parts = line.split(None, 5)
            if len(parts) == 6 and parts[5].startswith("/"):
                lo, hi = (int(x, 16) for x in parts[0].split("-", 1))
                out.append(Mapping(lo, hi, int(parts[2], 16), parts[5].rstrip("\n"), "x" in parts[1]))
    return sorted(out, key=lambda m: m.start)


def executable_mappings(pid: int) -> list[Mapping]:
    """The executable file mappings of ``pid``, sorted by address."""
    return [m for m in file_mappings(pid) if m.executable]


class NativeSymbols:
    """Symbolises return addresses for the processes of one tracer (maps per pid, ELF files shared)."""

    def __init__(self) -> None:
        self._maps: dict[int, tuple[list[Mapping], tuple[int, ...]]] = {}
        """pid -> its executable mappings and their starts (for bisection)."""
        self._files: dict[tuple[int, int], FunctionTable | None] = {}
        """(device, inode) of a mapped file -> its functions: two containers' same path are two files."""
        self._demangled: dict[str, str] = {}
        self._cxxfilt = shutil.which("c++filt")

    def forget(self, pid: int) -> None:
        """A process exited: drop its mappings."""
        self._maps.pop(pid, None)

    def _mapping(self, pid: int, addr: int) -> Mapping | None:
        for attempt in range(2):  # a library loaded since the last read: read the maps again, once
            known = self._maps.get(pid)
            if known is None or attempt:
                try:
                    maps = executable_mappings(pid)
                except OSError:
                    return None
                known = self._maps[pid] = maps, tuple(m.start for m in maps)
            maps, starts = known
            i = bisect.bisect_right(starts, addr) - 1
            if i >= 0 and addr < maps[i].end:
                return maps[i]
        return None

    def _table(self, pid: int, mapping: Mapping) -> FunctionTable | None:
        """The functions of the file mapped there, read through ``/proc/PID/map_files`` (never a path walk)."""
        where = f"/proc/{pid}/map_files/{mapping.start:x}-{mapping.end:x}"
        try:
            st = os.stat(where)
        except OSError:
            return None
        key = (st.st_dev, st.st_ino)
        if key not in self._files:
            if len(self._files) >= MAX_FILES:
                self._files.clear()
            try:
                self._files[key] = FunctionTable.of(read_mapped_elf(pid, mapping.start, mapping.end, mapping.path))
            except (OSError, ElfError):
                self._files[key] = None
        return self._files[key]

    def _demangle(self, name: str) -> str:
        if not name.startswith("_Z") or self._cxxfilt is None:
            return name
        hit = self._demangled.get(name)
        if hit is None:
            if len(self._demangled) >= MAX_DEMANGLED:
                self._demangled.clear()
            try:
                out = subprocess.run([self._cxxfilt, name], capture_output=True, text=True, timeout=2, check=False)
                hit = out.stdout.strip() or name
            except (OSError, subprocess.SubprocessError):
                hit = name
            self._demangled[name] = hit
        return hit

    def label(self, pid: int, mapping: Mapping, addr: int) -> str:
        """``lib.so: symbol`` of return address ``addr``, or ``lib.so+0x…`` (its file offset) without a symbol."""
        lib = os.path.basename(mapping.path)
        offset = addr - 1 - mapping.start + mapping.offset  # a return address: the call is the byte before
        table = self._table(pid, mapping)
        if table is not None:
            for seg in table.elf.segments:
                if seg.offset <= offset < seg.offset + seg.filesz:
                    name = table.name(offset - seg.offset + seg.vaddr)
                    if name is not None:
                        return clean_text(f"{lib}: {self._demangle(name)}"[:MAX_NAME])
                    break
        return clean_text(f"{lib}+{offset:#x}")

    def frames(self, pid: int, addrs: tuple[int, ...]) -> list[str]:
        """The native frames between Python and the CUDA call, outermost first (see the module's rules)."""
        out: list[str] = []
        for addr in addrs:
            mapping = self._mapping(pid, addr)
            if mapping is None or INTERPRETER.search(mapping.path):
                break
            if CUDA.search(mapping.path):
                continue
            out.append(self.label(pid, mapping, addr))
        return out[::-1]


__all__ = ["FunctionTable", "Mapping", "NativeSymbols", "executable_mappings", "file_mappings"]
