"""The few ELF facts the GPU-memory tracer needs: where a symbol is, in the file and in memory.

A 64-bit little-endian ELF's section headers, ``.dynsym`` / ``.symtab`` and
``PT_LOAD`` segments, read with ``struct`` from at most :data:`MAX_BYTES` of
the file (a libcuda is ~30 MiB; symbol tables are read by offset, not the
whole file). A malformed file raises :class:`ElfError`, never anything else.
"""

from __future__ import annotations

import os
import stat
import struct
from dataclasses import dataclass

from gpulens.core.errors import GpulensError

MAX_BYTES = 1 << 31
MAX_SYMBOLS = 2_000_000


class ElfError(GpulensError):
    """Not an ELF file this reader understands, or a malformed one."""

    title = "ELF file not readable"


@dataclass(frozen=True, slots=True)
class Symbol:
    """A symbol's address in the file's own address space and its size."""

    name: str
    value: int
    size: int
    is_function: bool


@dataclass(frozen=True, slots=True)
class Segment:
    """A ``PT_LOAD`` segment: where file bytes land in the image."""

    vaddr: int
    offset: int
    filesz: int
    memsz: int


@dataclass(frozen=True, slots=True)
class ElfFile:
    """Symbols by name and the loaded segments of one ELF file."""

    path: str
    symbols: dict[str, Symbol]
    segments: tuple[Segment, ...]

    def file_offset(self, vaddr: int) -> int:
        """The file offset of address ``vaddr`` (for a uprobe).

        Raises:
            ElfError: no segment holds it.
        """
        for s in self.segments:
            if s.vaddr <= vaddr < s.vaddr + s.filesz:
                return vaddr - s.vaddr + s.offset
        raise ElfError(f"{self.path}: address {vaddr:#x} is in no loaded segment")

    @property
    def first_vaddr(self) -> int:
        """The lowest segment's page-aligned address (the load base maps the file's offset 0 there)."""
        return min((s.vaddr - s.offset for s in self.segments), default=0)


def _read(fh: object, offset: int, size: int) -> bytes:
    if offset < 0 or size < 0 or offset + size > MAX_BYTES:
        raise ElfError(f"read past the limit at {offset:#x}")
    fh.seek(offset)  # type: ignore[attr-defined]
    data: bytes = fh.read(size)  # type: ignore[attr-defined]
    if len(data) != size:
        raise ElfError(f"truncated at {offset:#x} (wanted {size} bytes)")
    return data


def read_elf(path: str) -> ElfFile:
    """Symbols (``.symtab`` over ``.dynsym``) and ``PT_LOAD`` segments of ``path``.

    Raises:
        ElfError: not a 64-bit little-endian ELF, or malformed.
        OSError: the file cannot be read, or is a link (``O_NOFOLLOW``).
    """
    # The root agent opens files a traced process names (in its own mount namespace): never a FIFO that would
    # block it, a device, or a last-component link the process planted after mapping the library.
    return read_elf_fd(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC), path)


def read_mapped_elf(pid: int, start: int, end: int, shown: str) -> ElfFile:
    """The ELF file ``pid`` has mapped at ``[start, end)``, opened through ``/proc/PID/map_files``.

    That entry is the mapped file itself (a magic link the kernel resolves to
    the open file, no path walk): a traced process cannot send the root agent
    to another file with links planted in its own root, its mount namespace or
    the agent's. ``shown`` names it in errors and in :attr:`ElfFile.path`.

    Raises:
        ElfError, OSError: as :func:`read_elf`.
    """
    fd = os.open(f"/proc/{pid}/map_files/{start:x}-{end:x}", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    return read_elf_fd(fd, shown)


def read_elf_fd(fd: int, path: str) -> ElfFile:
    """:func:`read_elf` of an open descriptor (taken over and closed); a regular file only."""
    try:
        is_file = stat.S_ISREG(os.fstat(fd).st_mode)
    except OSError:
        os.close(fd)
        raise
    if not is_file:
        os.close(fd)
        raise ElfError(f"{path}: not a regular file")
    with os.fdopen(fd, "rb") as fh:
        head = _read(fh, 0, 64)
        if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
            raise ElfError(f"{path}: not a 64-bit little-endian ELF file")
        phoff, shoff = struct.unpack_from("<QQ", head, 32)
        phentsize, phnum, shentsize, shnum, _shstrndx = struct.unpack_from("<HHHHH", head, 54)
        if phentsize not in (0, 56) or shentsize not in (0, 64) or phnum > 4096 or shnum > 65535:
            raise ElfError(f"{path}: unexpected header sizes")
        segments = _segments(fh, phoff, phnum)
        sections = [struct.unpack("<IIQQQQIIQQ", _read(fh, shoff + k * 64, 64)) for k in range(shnum)]
        symbols: dict[str, Symbol] = {}
        for want in (11, 2):  # SHT_DYNSYM, then SHT_SYMTAB (its entries win: it has the local ones too)
            for sec in sections:
                if sec[1] == want and sec[9] == 24 and sec[6] < len(sections):
                    _add_symbols(fh, sec, sections[sec[6]], symbols)
        return ElfFile(path, symbols, tuple(segments))


def _segments(fh: object, phoff: int, phnum: int) -> list[Segment]:
    """The ``PT_LOAD`` program headers."""
    segments = []
    for k in range(phnum):
        p_type, _flags, off, vaddr, _paddr, filesz, memsz, _align = struct.unpack(
            "<IIQQQQQQ", _read(fh, phoff + k * 56, 56))
        if p_type == 1:
            segments.append(Segment(vaddr, off, filesz, memsz))
    return segments


def _add_symbols(fh: object, sec: tuple[int, ...], strtab: tuple[int, ...], symbols: dict[str, Symbol]) -> None:
    """The named, defined symbols of one symbol table section into ``symbols`` (bounded: :data:`MAX_SYMBOLS`)."""
    strings = _read(fh, strtab[4], min(strtab[5], 256 << 20))
    count = min(sec[5] // 24, MAX_SYMBOLS)
    table = _read(fh, sec[4], count * 24)
    for j in range(count):
        st_name, st_info, _other, shndx, value, size = struct.unpack_from("<IBBHQQ", table, j * 24)
        if not st_name or shndx == 0 or st_name >= len(strings):
            continue
        end = strings.find(b"\0", st_name)
        name = strings[st_name:end if end >= 0 else len(strings)].decode("utf-8", "replace")
        symbols[name.split("@", 1)[0]] = Symbol(name, value, size, (st_info & 0xF) == 2)
