"""GPU memory of running processes, from uprobes on the CUDA allocation calls, with Python stacks.

:class:`GpuMemTracer` loads the BPF object shipped beside this module
(``bpf/cuda_mem.bpf.o``, built by ``bpf/build.sh``), attaches to the
allocation and free calls of every CUDA driver (``libcuda.so*``) and runtime
(``libcudart.so*``) mapped by the target processes, tells the BPF program
where each target's CPython keeps its runtime (:mod:`.python_stack`), and
turns the events into :class:`Allocations`: a live map (pid, address) ->
(bytes, stack) and bytes ever allocated per stack, so both **live bytes now**
and **bytes allocated while tracing** can be drawn.

One allocation may be seen twice (``cudaMalloc`` calls ``cuMemAlloc_v2``; the
inner one returns first): a second allocation at an address already live is
the same one, and its stack ends ``… > cudaMalloc > cuMemAlloc_v2``. A free of an address never seen was allocated before the
probes attached: counted, not guessed. Events the ring buffer had no room for
are counted by the BPF program and reported (:attr:`GpuMemTracer.lost`).

Why not is a value, rendered to text where it leaves (a log, a reply, a
stack's frame): :func:`why_not` answers a :class:`NoTracing` (this machine
cannot trace at all), :meth:`GpuMemTracer.watch` a :class:`NoPythonFrames`
(one process's Python frames cannot be read); ``str()`` of either is the
sentence.
"""

from __future__ import annotations

import contextlib
import ctypes
import enum
import os
import re
import struct
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from gpulens.collectors.gpumem.elf import ElfError, read_elf
from gpulens.collectors.gpumem.libbpf import BpfError, BpfObject, Libbpf, RingBuffer
from gpulens.collectors.gpumem.native import NativeSymbols, file_mappings
from gpulens.collectors.gpumem.python_stack import (
    CodeReader,
    PyTarget,
    PythonNotReadable,
    find_python,
)
from gpulens.core.reasons import Reason, ReasonText, rendered
from gpulens.core.sanitize import clean_text

OBJECT = Path(__file__).with_name("bpf") / "cuda_mem.bpf.o"

CALLS: tuple[tuple[str, str, str], ...] = (
    ("", "", ""),  # call numbers start at 1 (bpf/cuda_mem.bpf.c)
    ("cuMemAlloc_v2", "cuda", "dev"), ("cuMemAllocManaged", "cuda", "dev"), ("cuMemAllocHost_v2", "cuda", "host"),
    ("cuMemAllocAsync", "cuda", "dev"), ("cuMemAllocFromPoolAsync", "cuda", "dev"), ("cuMemCreate", "cuda", "handle"),
    ("cudaMalloc", "cudart", "dev"), ("cudaMallocAsync", "cudart", "dev"), ("cuMemAllocPitch_v2", "cuda", "dev"),
    ("cuMemFree_v2", "cuda", "dev"), ("cuMemFreeAsync", "cuda", "dev"), ("cuMemRelease", "cuda", "handle"),
    ("cudaFree", "cudart", "dev"), ("cudaFreeAsync", "cudart", "dev"), ("cuMemFreeHost", "cuda", "host"),
    ("cuInit", "cuda", ""),
)
"""call number -> (symbol, library, address space): a free matches allocations of its space."""
_FREES = frozenset(range(10, 16))
_INIT = 16
_LIBS = {"cuda": re.compile(r"/libcuda\.so[.0-9]*$"), "cudart": re.compile(r"/libcudart\.so[.0-9]*$")}
MAX_FRAMES = 48
MAX_NATIVE = 32
_EVENT = struct.Struct(f"<IIIIQQQiIII{MAX_FRAMES}Q{MAX_FRAMES}QII{MAX_NATIVE}Q")
_PYINFO = struct.Struct("<Q10I")


@dataclass(frozen=True, slots=True)
class Event:
    """One allocation or free, as the BPF program sent it."""

    pid: int
    tid: int
    call: int
    addr: int
    size: int
    py_status: int
    frames: tuple[tuple[int, int], ...]
    """(code object, last instruction) per Python frame, innermost first."""
    native: tuple[int, ...] = ()
    """Return addresses of the user stack at the allocation, innermost first (frame pointers walked)."""


class NoPythonFramesKind(enum.Enum):
    """Why a process's Python frames cannot be read; both fill ``detail`` of :class:`NoPythonFrames`."""

    NOT_READABLE = "not-readable"  # detail: PythonNotReadable's words (not CPython, an unknown version, ...)
    OS_ERROR = "os-error"  # detail: the OSError's words (its /proc files, its memory)


@dataclass(frozen=True, slots=True)
class NoPythonFrames(Reason):
    """Why one process's Python frames cannot be read: ``kind`` and the words (cleaned: they may quote
    paths the traced process mapped); ``str()`` is the sentence its stacks and the reply carry."""

    kind: NoPythonFramesKind
    detail: str = ""

    TEXT: ClassVar[ReasonText] = {
        NoPythonFramesKind.NOT_READABLE: "{0.detail}",
        NoPythonFramesKind.OS_ERROR: "{0.detail}",
    }


class NoTracingKind(enum.Enum):
    """Why GPU memory cannot be traced on this machine; the comment says which fields of :class:`NoTracing` it fills."""

    NOT_ROOT = "not-root"  # eBPF needs root (or CAP_BPF+CAP_PERFMON)
    NO_OBJECT = "no-object"  # path: the BPF object that is not built
    NO_UPROBES = "no-uprobes"  # the kernel has no uprobe PMU
    NO_LIBBPF = "no-libbpf"  # detail: the BpfError's words (libbpf missing or unusable)


@dataclass(frozen=True, slots=True)
class NoTracing(Reason):
    """Why this machine cannot trace GPU memory: ``kind`` and the facts its sentence names; ``str()`` is the
    one line the command, the agent's reply and its log give."""

    kind: NoTracingKind
    path: str = ""
    detail: str = ""

    TEXT: ClassVar[ReasonText] = {
        NoTracingKind.NOT_ROOT: "GPU memory tracing loads eBPF: it needs root (or CAP_BPF+CAP_PERFMON)",
        NoTracingKind.NO_OBJECT: "the BPF object {0.path} is missing (build it: collectors/gpumem/bpf/build.sh)",
        NoTracingKind.NO_UPROBES: "this kernel has no uprobe PMU (CONFIG_UPROBE_EVENTS)",
        NoTracingKind.NO_LIBBPF: "{0.detail}",  # libbpf's words
    }


def decode_event(raw: bytes) -> Event | None:
    """An event from the ring buffer's bytes; None for a malformed one (counted by the caller)."""
    if len(raw) < _EVENT.size:
        return None
    v = _EVENT.unpack_from(raw)
    pid, tid, op, call, addr, size, _t, _res, n, status = v[:10]
    if op not in (1, 2, 3) or not 0 < call < len(CALLS) or n > MAX_FRAMES or status > 3:
        return None
    codes, instrs = v[11:11 + MAX_FRAMES], v[11 + MAX_FRAMES:11 + 2 * MAX_FRAMES]
    nnative, native = v[11 + 2 * MAX_FRAMES], v[13 + 2 * MAX_FRAMES:]
    if nnative > MAX_NATIVE:
        return None
    return Event(pid, tid, call, addr, size, status, tuple(zip(codes[:n], instrs[:n], strict=True)),
                 tuple(native[:nnative]))


@dataclass(slots=True)
class Allocations:
    """What the events say: live allocations and bytes allocated per stack (stacks root first)."""

    live: dict[tuple[int, str, int], tuple[int, tuple[str, ...]]] = field(default_factory=dict)
    total: dict[tuple[str, ...], int] = field(default_factory=dict)
    by_pid: dict[int, dict[tuple[str, ...], int]] = field(default_factory=dict)
    """The same totals per process (a viewer is shown only its own processes')."""
    unknown_frees: int = 0
    """Frees of addresses allocated before the probes attached."""

    def add(self, pid: int, call: int, addr: int, size: int, stack: tuple[str, ...]) -> None:
        """Apply one event (an allocation when ``call`` allocates, else a free)."""
        space = CALLS[call][2]
        key = (pid, space, addr)
        if call in _FREES:
            if self.live.pop(key, None) is None:
                self.unknown_frees += 1
            return
        held = self.live.get(key)
        mine = self.by_pid.setdefault(pid, {})
        if held is not None:  # the runtime's call and the driver's inside it: one allocation, named by both
            was_size, was = held
            if was and stack and was[-1] != stack[-1] and CALLS[call][1] == "cudart":
                named = (*was[:-1], stack[-1], was[-1])
                self.live[key] = (was_size, named)
                for table in (self.total, mine):
                    table[was] -= was_size
                    if not table[was]:
                        del table[was]
                    table[named] = table.get(named, 0) + was_size
            return
        self.live[key] = (size, stack)
        self.total[stack] = self.total.get(stack, 0) + size
        mine[stack] = mine.get(stack, 0) + size

    def totals(self, pids: set[int]) -> dict[tuple[str, ...], int]:
        """Bytes allocated per stack by ``pids``."""
        out: dict[tuple[str, ...], int] = {}
        for pid in pids:
            for stack, n in self.by_pid.get(pid, {}).items():
                out[stack] = out.get(stack, 0) + n
        return out

    def live_stacks(self, pids: set[int] | None = None) -> dict[tuple[str, ...], int]:
        """Bytes live now per stack (of ``pids``)."""
        out: dict[tuple[str, ...], int] = {}
        for (pid, _, _), (size, stack) in self.live.items():
            if pids is None or pid in pids:
                out[stack] = out.get(stack, 0) + size
        return out

    def live_bytes(self, pid: int | None = None) -> int:
        """Bytes live now (of one process)."""
        return sum(size for (p, _, _), (size, _) in self.live.items() if pid is None or p == pid)


def libraries(pid: int) -> dict[str, str]:
    """``cuda`` / ``cudart`` -> the path of that library as ``pid`` maps it (its mount namespace's view)."""
    found: dict[str, str] = {}
    for m in file_mappings(pid):
        for lib, pattern in _LIBS.items():
            if lib not in found and pattern.search(m.path):
                found[lib] = m.path
    return found


class GpuMemTracer:
    """Traces CUDA allocations until :meth:`close`; read :meth:`snapshot` meanwhile.

    ``pids``: probes on the libraries each of these processes maps, for it alone (``gpulens gpumem``).
    ``libraries``: probes on these library files for every process that maps them, now or later
    (the agent's ``--gpumem``); a process is known from its first event on.
    ``native``: put the native frames between the innermost Python frame and the CUDA call
    (:mod:`.native`; as py-spy's ``--native``).

    Raises:
        BpfError: libbpf missing, not root, the object refused by the kernel, nothing to attach to.
    """

    def __init__(self, pids: Sequence[int] = (), *, libraries: Sequence[str] = (),
                 bpf_object: Path = OBJECT, native: bool = False) -> None:
        self.pids = tuple(pids)
        self.native = NativeSymbols() if native else None
        self.allocations = Allocations()
        self.python: dict[int, NoPythonFrames | None] = {}
        """pid -> why its Python frames cannot be read (None: they can)."""
        self.attached: dict[int, list[str]] = {}
        """pid (-1: every process) -> the calls probed."""
        self.malformed = 0
        self._readers: dict[int, CodeReader] = {}
        self._lock = threading.Lock()
        self._lib = Libbpf()
        self._obj = BpfObject(self._lib, str(bpf_object))
        self._pyinfo = self._obj.map_fd("pyinfo")
        with contextlib.ExitStack() as undo:  # anything raised, Ctrl-C included: the BPF object goes
            undo.callback(self._obj.close)
            for pid in self.pids:
                self._attach_pid(pid)
            for path in libraries:
                self.attach_library(path)
            self._rb = RingBuffer(self._lib, self._obj.map_fd("events"), self._on_event)
            undo.pop_all()

    def _attach_pid(self, pid: int) -> None:
        try:
            libs = libraries(pid)
        except OSError as err:
            raise BpfError(f"pid {pid}: {err.strerror or err}") from None
        done: list[str] = []
        for lib, path in libs.items():
            done += self._attach_file(f"/proc/{pid}/root{path}", lib, pid)
        if not done:
            raise BpfError(f"pid {pid} maps no CUDA driver or runtime (libcuda.so / libcudart.so shared): "
                           "nothing to trace (a statically linked CUDA runtime cannot be probed)")
        self.attached[pid] = done
        self.watch(pid)

    def attach_library(self, path: str) -> list[str]:
        """Probe the CUDA calls of library file ``path`` in every process (its name says driver or runtime)."""
        lib = next((name for name, pattern in _LIBS.items() if pattern.search("/" + os.path.basename(path))), None)
        if lib is None:
            raise BpfError(f"{path}: not a CUDA driver (libcuda.so*) or runtime (libcudart.so*)")
        done = self._attach_file(path, lib, -1)
        self.attached.setdefault(-1, []).extend(done)
        return done

    def _attach_file(self, binary: str, lib: str, pid: int) -> list[str]:
        try:
            elf = read_elf(binary)
        except (OSError, ElfError) as err:
            raise BpfError(f"{binary}: {err}") from None
        done: list[str] = []
        for call, (name, owner, _space) in enumerate(CALLS):
            sym = elf.symbols.get(name)
            if owner != lib or sym is None or not sym.is_function:
                continue
            offset = elf.file_offset(sym.value)
            if call == _INIT:
                if pid == -1:  # per-process probes know their process already
                    self._obj.attach_uprobe(f"init_{name}", binary, offset, pid=pid)
                continue
            if call in _FREES:
                self._obj.attach_uprobe(f"free_{name}", binary, offset, pid=pid)
            else:
                self._obj.attach_uprobe(f"enter_{name}", binary, offset, pid=pid)
                self._obj.attach_uprobe(f"leave_{name}", binary, offset, retprobe=True, pid=pid)
            done.append(name)
        return done

    def watch(self, pid: int) -> NoPythonFrames | None:
        """Tell the BPF program where ``pid``'s CPython frames are (once); why they cannot be read, or None."""
        if pid in self.python:
            return self.python[pid]
        try:
            target = find_python(pid)
            reader = CodeReader(target)
        except (PythonNotReadable, OSError) as err:
            kind = NoPythonFramesKind.NOT_READABLE if isinstance(err, PythonNotReadable) else NoPythonFramesKind.OS_ERROR
            why = self.python[pid] = NoPythonFrames(kind, clean_text(str(err)))  # it may quote paths the process mapped
            return why
        self._readers[pid] = reader
        self.python[pid] = None
        self._set_layout(pid, target)
        return None

    def forget(self, pid: int) -> None:
        """A process exited: drop its allocations, its frames' reader and its layout entry."""
        with self._lock:
            for key in [k for k in self.allocations.live if k[0] == pid]:
                del self.allocations.live[key]
        if self.native is not None:
            self.native.forget(pid)
        reader = self._readers.pop(pid, None)
        if reader is not None:
            reader.close()
        self.python.pop(pid, None)
        pid_key = ctypes.c_uint32(pid)
        self._lib.lib.bpf_map_delete_elem(self._pyinfo, ctypes.byref(pid_key))

    def _set_layout(self, pid: int, target: PyTarget) -> None:
        lay = target.layout
        value = _PYINFO.pack(target.runtime, lay.interp_head, lay.threads_head, lay.tstate_next, lay.tstate_native_tid,
                             lay.tstate_frame, lay.cframe_frame, lay.frame_code, lay.frame_previous, lay.frame_instr,
                             target.pthread_tid)
        key = ctypes.c_uint32(pid)
        buf = ctypes.create_string_buffer(value, len(value))
        self._lib.call(f"pid {pid}: set its Python layout", self._lib.lib.bpf_map_update_elem,
                       self._pyinfo, ctypes.byref(key), buf, 0)

    def _stack(self, e: Event) -> tuple[str, ...]:
        native = self.native.frames(e.pid, e.native) if self.native is not None and e.native else []
        return (*self._python(e), *native, CALLS[e.call][0])

    def _python(self, e: Event) -> list[str]:
        """The Python frames of an allocation, outermost first, or the one frame that says why there are none."""
        if e.py_status == 1:  # the program had no layout for this process when it allocated
            why = self.watch(e.pid) if e.pid not in self.python else self.python[e.pid]
            return [f"<python frames not read: {rendered(why) or 'the process was not known yet at this allocation'}>"]
        reader = self._readers.get(e.pid)
        if reader is None:
            return [f"<python frames not read: {rendered(self.python.get(e.pid)) or 'not a traced process'}>"]
        if e.py_status == 2:
            return ["<no Python thread state for this thread: a native thread>"]
        frames = [reader.frame(code, instr) for code, instr in reversed(e.frames)]
        if e.py_status == 3:
            frames.insert(0, f"<deeper than {MAX_FRAMES} frames: cut>")
        return frames

    def _on_event(self, raw: bytes) -> None:
        e = decode_event(raw)
        if e is None:
            self.malformed += 1
            return
        if e.call == _INIT:
            self.watch(e.pid)
            return
        stack = () if e.call in _FREES else self._stack(e)
        with self._lock:
            self.allocations.add(e.pid, e.call, e.addr, e.size, stack)

    def poll(self, timeout_ms: int = 100) -> int:
        """Take the events waiting (up to ``timeout_ms``); how many."""
        return self._rb.poll(timeout_ms)

    @property
    def lost(self) -> int:
        """Events the ring buffer had no room for (the BPF program counted them)."""
        key, value = ctypes.c_uint32(0), ctypes.c_uint64(0)
        self._lib.lib.bpf_map_lookup_elem(self._obj.map_fd("lost"), ctypes.byref(key), ctypes.byref(value))
        return value.value

    def snapshot(self, pids: Iterable[int] | None = None) -> tuple[dict[tuple[str, ...], int], dict[tuple[str, ...], int]]:
        """(live bytes per stack, bytes allocated per stack) now, of ``pids`` (None: all)."""
        with self._lock:
            if pids is None:
                return self.allocations.live_stacks(), dict(self.allocations.total)
            return self.allocations.live_stacks(set(pids)), self.allocations.totals(set(pids))

    def live_pids(self) -> list[int]:
        """Processes holding memory the probes saw them allocate."""
        with self._lock:
            return sorted({pid for pid, _, _ in self.allocations.live})

    def close(self) -> None:
        """Detach and free everything (idempotent)."""
        rb = getattr(self, "_rb", None)
        if rb is not None:
            rb.close()
        self._obj.close()
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()


def folded(stacks: Iterable[tuple[tuple[str, ...], int]]) -> str:
    """Folded stacks (``a;b;c 123``), integer bytes, the heaviest first; ``;`` in a frame becomes ``:``."""
    lines = sorted(((";".join(f.replace(";", ":") for f in s), n) for s, n in stacks if n > 0),
                   key=lambda item: (-item[1], item[0]))
    return "".join(f"{s} {n}\n" for s, n in lines)


def why_not() -> NoTracing | None:
    """Why tracing cannot work on this machine (None: it may): root, the object, the kernel's uprobes, libbpf."""
    if os.geteuid() != 0:
        return NoTracing(NoTracingKind.NOT_ROOT)
    if not OBJECT.exists():
        return NoTracing(NoTracingKind.NO_OBJECT, path=str(OBJECT))
    if not Path("/sys/bus/event_source/devices/uprobe").exists():
        return NoTracing(NoTracingKind.NO_UPROBES)
    try:
        Libbpf()
    except BpfError as err:
        return NoTracing(NoTracingKind.NO_LIBBPF, detail=str(err))
    return None


__all__ = ["CALLS", "MAX_FRAMES", "MAX_NATIVE", "Allocations", "BpfError", "GpuMemTracer", "NoPythonFrames",
           "NoPythonFramesKind", "NoTracing", "NoTracingKind", "PyTarget", "decode_event", "folded",
           "why_not"]
