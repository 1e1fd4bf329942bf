"""A thin ctypes layer over the system's ``libbpf.so.1``: open, load, attach uprobes, read a ring buffer.

Only the calls gpulens needs, with libbpf 1.x's error convention (NULL or a
negative errno; ``errno`` set). bcc would need kernel headers at run time;
this needs only the BPF object shipped in the package and libbpf (Debian
``libbpf1``). Every failure is a :class:`BpfError` whose message says which
step failed and why (``permission denied: needs root or CAP_BPF+CAP_PERFMON``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
from collections.abc import Callable
from typing import Any, TypeVar

from gpulens.core.errors import GpulensError

_R = TypeVar("_R")

SONAMES = ("libbpf.so.1", "libbpf.so")

RingCallback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)


class BpfError(GpulensError):
    """A BPF step failed; the message names the step and the reason."""

    title = "eBPF error"


def _why(err: int) -> str:
    if err in (errno.EPERM, errno.EACCES):
        return "permission denied: loading BPF needs root or CAP_BPF+CAP_PERFMON"
    if err == errno.ENOENT:
        return "not found (no such symbol, file or uprobe support in this kernel)"
    return os.strerror(err) if err else "unknown error"


def _load() -> ctypes.CDLL:
    for name in (*SONAMES, ctypes.util.find_library("bpf")):
        if not name:
            continue
        try:
            return ctypes.CDLL(name, use_errno=True)
        except OSError:
            continue
    raise BpfError("libbpf is not installed (Debian package libbpf1): GPU memory tracing needs it")


class Libbpf:
    """The loaded library with its prototypes; one per process is enough."""

    def __init__(self) -> None:
        lib = self.lib = _load()
        vp, cp, i, sz = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_size_t
        sig: dict[str, tuple[Any, list[Any]]] = {
            "bpf_object__open_file": (vp, [cp, vp]),
            "bpf_object__load": (i, [vp]),
            "bpf_object__close": (None, [vp]),
            "bpf_object__find_program_by_name": (vp, [vp, cp]),
            "bpf_object__find_map_by_name": (vp, [vp, cp]),
            "bpf_map__fd": (i, [vp]),
            "bpf_program__attach_uprobe": (vp, [vp, ctypes.c_bool, i, cp, sz]),
            "bpf_link__destroy": (i, [vp]),
            "bpf_map_update_elem": (i, [i, vp, vp, ctypes.c_uint64]),
            "bpf_map_delete_elem": (i, [i, vp]),
            "bpf_map_lookup_elem": (i, [i, vp, vp]),
            "ring_buffer__new": (vp, [i, RingCallback, vp, vp]),
            "ring_buffer__poll": (i, [vp, i]),
            "ring_buffer__free": (None, [vp]),
            "libbpf_set_print": (vp, [vp]),
        }
        for name, (res, args) in sig.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        lib.libbpf_set_print(None)  # libbpf's own chatter off: errors come back as values

    def call(self, step: str, fn: Callable[..., _R], *args: object) -> _R:
        """``fn(*args)``; a NULL pointer or a negative result raises BpfError naming ``step``."""
        ctypes.set_errno(0)
        got = fn(*args)
        if got is None or (isinstance(got, int) and got < 0 and getattr(fn, "restype", None) is ctypes.c_int):
            err = -got if isinstance(got, int) and got < 0 else ctypes.get_errno()
            raise BpfError(f"{step}: {_why(err)}")
        return got


class BpfObject:
    """A loaded BPF object: programs attach to uprobes, maps are reached by name."""

    def __init__(self, lib: Libbpf, path: str) -> None:
        self.lib = lib
        raw = lib.lib
        self.obj = lib.call(f"open {path}", raw.bpf_object__open_file, path.encode(), None)
        try:
            lib.call("load the BPF object (the kernel's verifier)", raw.bpf_object__load, self.obj)
        except BpfError:
            raw.bpf_object__close(self.obj)
            raise
        self.links: list[int] = []

    def map_fd(self, name: str) -> int:
        """The file descriptor of map ``name``."""
        raw = self.lib.lib
        m = self.lib.call(f"map {name}", raw.bpf_object__find_map_by_name, self.obj, name.encode())
        fd: int = self.lib.call(f"map {name} fd", raw.bpf_map__fd, m)
        return fd

    def attach_uprobe(self, program: str, binary: str, offset: int, *, retprobe: bool = False, pid: int = -1) -> None:
        """Attach ``program`` at file offset ``offset`` of ``binary`` (all processes: ``pid`` -1)."""
        raw = self.lib.lib
        prog = self.lib.call(f"program {program}", raw.bpf_object__find_program_by_name, self.obj, program.encode())
        link = self.lib.call(f"attach {program} to {binary}+{offset:#x}", raw.bpf_program__attach_uprobe,
                             prog, retprobe, pid, binary.encode(), offset)
        self.links.append(link)

    def close(self) -> None:
        """Detach every probe and free the object (idempotent)."""
        raw = self.lib.lib
        for link in self.links:
            raw.bpf_link__destroy(link)
        self.links.clear()
        if self.obj:
            raw.bpf_object__close(self.obj)
            self.obj = None


class RingBuffer:
    """Events of a BPF ring buffer map, handed to ``on_event(bytes)`` by :meth:`poll`."""

    def __init__(self, lib: Libbpf, map_fd: int, on_event: Callable[[bytes], None]) -> None:
        self.lib = lib

        def trampoline(_ctx: int | None, data: int | None, size: int) -> int:
            if data:
                on_event(ctypes.string_at(data, size))
            return 0

        self._callback = RingCallback(trampoline)  # kept: libbpf holds the pointer
        self.rb = lib.call("ring buffer", lib.lib.ring_buffer__new, map_fd, self._callback, None, None)

    def poll(self, timeout_ms: int) -> int:
        """Hand over what is there (waiting up to ``timeout_ms``); the number of events."""
        got: int = self.lib.lib.ring_buffer__poll(self.rb, timeout_ms)
        if got < 0 and -got != errno.EINTR:
            raise BpfError(f"ring buffer poll: {_why(-got)}")
        return max(got, 0)

    def close(self) -> None:
        """Free it (idempotent)."""
        if self.rb:
            self.lib.lib.ring_buffer__free(self.rb)
            self.rb = None
