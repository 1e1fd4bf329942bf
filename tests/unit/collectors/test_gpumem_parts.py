"""Issue 28, the parts of the GPU-memory tracer that need no root: events, the live map, line tables, ELF symbols."""

from __future__ import annotations

import ctypes
import dis
import os
import struct
import sys
import types
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpulens.collectors.gpumem import tracer as tracer_module
from gpulens.collectors.gpumem.elf import ElfError, read_elf
from gpulens.collectors.gpumem.libbpf import BpfError
from gpulens.collectors.gpumem.python_stack import PythonNotReadable, line_of
from gpulens.collectors.gpumem.tracer import (
    CALLS,
    MAX_FRAMES,
    MAX_NATIVE,
    Allocations,
    Event,
    GpuMemTracer,
    NoPythonFrames,
    NoPythonFramesKind,
    NoTracing,
    NoTracingKind,
    decode_event,
    folded,
    why_not,
)

CALL = {name: n for n, (name, _, _) in enumerate(CALLS) if name}
EVENT = struct.Struct(f"<IIIIQQQiIII{MAX_FRAMES}Q{MAX_FRAMES}QII{MAX_NATIVE}Q")
"""struct event of collectors/gpumem/bpf/cuda_mem.bpf.c, written out again here."""
NNATIVE_AT = EVENT.size - 8 * MAX_NATIVE - 8


def _raw(op: int, call: int, addr: int, size: int, frames: list[tuple[int, int]], native: tuple[int, ...] = ()) -> bytes:
    codes = [c for c, _ in frames] + [0] * (MAX_FRAMES - len(frames))
    instrs = [i for _, i in frames] + [0] * (MAX_FRAMES - len(frames))
    return EVENT.pack(7, 8, op, call, addr, size, 123, 0, len(frames), 0, 0, *codes, *instrs, len(native), 0,
                      *native, *[0] * (MAX_NATIVE - len(native)))


def test_events_decode_and_malformed_ones_are_refused() -> None:
    e = decode_event(_raw(1, CALL["cuMemAlloc_v2"], 0x7F00, 4096, [(0x10, 0x20), (0x30, 0x40)]))
    assert e is not None and (e.pid, e.tid, e.call, e.addr, e.size) == (7, 8, CALL["cuMemAlloc_v2"], 0x7F00, 4096)
    assert e.frames == ((0x10, 0x20), (0x30, 0x40))
    assert decode_event(b"\0" * 10) is None
    assert decode_event(_raw(4, 1, 0, 0, [])) is None  # no such op
    assert decode_event(_raw(1, 99, 0, 0, [])) is None  # no such call
    bad = bytearray(_raw(1, 1, 0, 0, []))
    struct.pack_into("<I", bad, 44, MAX_FRAMES + 1)  # nframes
    assert decode_event(bytes(bad)) is None
    bad = bytearray(_raw(1, 1, 0, 0, []))
    struct.pack_into("<I", bad, 48, 9)  # no such Python status
    assert decode_event(bytes(bad)) is None
    e = decode_event(_raw(1, 1, 0, 0, [], native=(0x401000, 0x402000)))
    assert e is not None and e.native == (0x401000, 0x402000)
    bad = bytearray(_raw(1, 1, 0, 0, []))
    struct.pack_into("<I", bad, NNATIVE_AT, MAX_NATIVE + 1)  # more native frames than the event holds
    assert decode_event(bytes(bad)) is None


@given(st.binary(min_size=0, max_size=EVENT.size + 8))
def test_any_bytes_decode_or_are_refused(raw: bytes) -> None:
    e = decode_event(raw)
    assert e is None or (0 < e.call < len(CALLS) and len(e.frames) <= MAX_FRAMES)


def test_live_and_total_bytes_frees_and_the_runtime_inside_the_driver() -> None:
    a = Allocations()
    w = ("<module>", "Model > __init__", "cuMemAlloc_v2")
    a.add(1, CALL["cuMemAlloc_v2"], 0x100, 10, w)
    a.add(1, CALL["cuMemAlloc_v2"], 0x200, 5, w)
    a.add(1, CALL["cuMemFree_v2"], 0x200, 0, ())
    kv = ("<module>", "allocate_kv_cache", "cuMemAlloc_v2")
    a.add(1, CALL["cuMemAlloc_v2"], 0x300, 64, kv)  # the driver's call inside cudaMalloc returns first
    a.add(1, CALL["cudaMalloc"], 0x300, 64, ("<module>", "allocate_kv_cache", "cudaMalloc"))
    a.add(1, CALL["cuMemCreate"], 0x100, 2, ("grow", "cuMemCreate"))  # a handle: another address space
    a.add(2, CALL["cuMemAlloc_v2"], 0x100, 7, w)  # another process: another address space
    a.add(1, CALL["cudaFree"], 0x999, 0, ())  # allocated before the probes attached
    named = ("<module>", "allocate_kv_cache", "cudaMalloc", "cuMemAlloc_v2")
    assert a.live_stacks() == {w: 17, named: 64, ("grow", "cuMemCreate"): 2}
    assert a.total == {w: 22, named: 64, ("grow", "cuMemCreate"): 2}
    assert a.unknown_frees == 1 and a.live_bytes(1) == 76 and a.live_bytes() == 83
    a.add(1, CALL["cuMemRelease"], 0x100, 0, ())
    assert a.live_bytes(1) == 74  # the handle went, the device pointer at the same number stays
    assert folded(a.live_stacks().items()).splitlines()[0] == "<module>;allocate_kv_cache;cudaMalloc;cuMemAlloc_v2 64"


def _sample_functions() -> list[types.CodeType]:
    import json.decoder
    import threading

    def nested(x: int) -> int:
        y = [i * 2
             for i in range(x)
             if i % 3]
        try:
            return sum(y) // (x - 5)
        except ZeroDivisionError:
            return -1

    return [nested.__code__, threading.Thread.run.__code__, vars(threading.Thread)["_bootstrap_inner"].__code__,
            json.decoder.JSONDecoder.raw_decode.__code__, dis.dis.__code__]


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the location table parser is 3.11's format")
def test_line_table_parser_equals_the_interpreters_own_positions() -> None:
    for code in _sample_functions():
        for index, (line, *_cols) in enumerate(code.co_positions()):
            if line is None:
                continue
            assert line_of(code.co_linetable, code.co_firstlineno, index) == line, (code.co_name, index)


def test_elf_symbols_equal_what_the_loader_resolves() -> None:
    libc = ctypes.CDLL(None)
    maps = Path("/proc/self/maps").read_text().splitlines()
    path = next(line.split()[-1] for line in maps if "/libc.so" in line or "/libc-" in line)
    elf = read_elf(path)
    base = next(int(line.split("-")[0], 16) for line in maps if line.split()[-1] == path and int(line.split()[2], 16) == 0)
    for name in ("malloc", "free", "getpid"):
        addr = ctypes.cast(getattr(libc, name), ctypes.c_void_p).value
        assert base + elf.symbols[name].value - elf.first_vaddr == addr, name
        assert elf.symbols[name].is_function
        assert elf.file_offset(elf.symbols[name].value) >= 0


def test_a_non_elf_or_truncated_file_is_an_elf_error(tmp_path: Path) -> None:
    p = tmp_path / "x"
    p.write_bytes(b"not an elf at all, just text" * 4)
    with pytest.raises(ElfError, match="not a 64-bit little-endian ELF"):
        read_elf(str(p))
    p.write_bytes(b"\x7fELF\x02\x01" + b"\0" * 10)
    with pytest.raises(ElfError, match="truncated"):
        read_elf(str(p))


def test_a_planted_fifo_or_link_is_refused_without_blocking(tmp_path: Path) -> None:
    """The root agent reads libraries a traced process names: a FIFO would block it, a link redirect it."""
    import os

    fifo = tmp_path / "libcuda.so.1"
    os.mkfifo(fifo)
    with pytest.raises(ElfError, match="not a regular file"):
        read_elf(str(fifo))
    link = tmp_path / "libcudart.so.12"
    link.symlink_to("/etc/passwd")
    with pytest.raises(OSError):
        read_elf(str(link))


def _fails(err: BaseException) -> object:
    def call(*_: object) -> object:
        raise err
    return call


def test_why_frames_cannot_be_read_is_a_value_kept_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    tracer = object.__new__(GpuMemTracer)  # no BPF: only what watch() keeps
    tracer.python, tracer._readers, tracer.native = {}, {}, None
    monkeypatch.setattr(tracer_module, "find_python", _fails(PythonNotReadable("not a CPython process (\x1b[2J)")))
    why = tracer.watch(7)
    assert why == NoPythonFrames(NoPythonFramesKind.NOT_READABLE, "not a CPython process ()")  # cleaned
    assert tracer.watch(7) is why and tracer.python == {7: why}  # asked once
    monkeypatch.setattr(tracer_module, "find_python", _fails(PermissionError(13, "Permission denied")))
    assert tracer.watch(8) == NoPythonFrames(NoPythonFramesKind.OS_ERROR, "[Errno 13] Permission denied")
    # Its stacks carry the words (pinned on purpose: the one frame that says why).
    assert tracer._python(Event(7, 7, 1, 0, 0, 1, ())) == ["<python frames not read: not a CPython process ()>"]


def test_why_this_machine_cannot_trace_is_a_value(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert why_not() == NoTracing(NoTracingKind.NOT_ROOT)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(tracer_module, "OBJECT", tmp_path / "cuda_mem.bpf.o")
    assert why_not() == NoTracing(NoTracingKind.NO_OBJECT, path=str(tmp_path / "cuda_mem.bpf.o"))
    (tmp_path / "cuda_mem.bpf.o").write_bytes(b"")
    monkeypatch.setattr(tracer_module, "Path", lambda _: tmp_path / "no-uprobe")
    assert why_not() == NoTracing(NoTracingKind.NO_UPROBES)
    monkeypatch.setattr(tracer_module, "Path", lambda _: tmp_path)
    monkeypatch.setattr(tracer_module, "Libbpf", _fails(BpfError("libbpf.so.1: not found")))
    assert why_not() == NoTracing(NoTracingKind.NO_LIBBPF, detail="libbpf.so.1: not found")
    monkeypatch.setattr(tracer_module, "Libbpf", lambda: None)
    assert why_not() is None
