"""TEST DOUBLE: build and load the C stand-in for libnvidia-ml.so.1 (``libnvml_standin.c``).

The real ``pynvml`` (nvidia-ml-py) is pointed at the stand-in instead of the
driver's library, so its ctypes wrappers, error classes and structures run
unchanged: :func:`standin_pynvml` sets ``pynvml.nvmlLib`` (and empties its
function cache) for the life of a context, and puts both back after it, so
code that imports pynvml later still finds no NVIDIA library on this machine.

The stand-in has no cost of its own beyond a C call (no system call); a real
driver adds its ioctl time to every call. Without a C compiler :func:`build`
says why, and the tests that need the stand-in skip with that reason.
"""

from __future__ import annotations

import ctypes
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

SOURCE = Path(__file__).with_name("libnvml_standin.c")
LIBRARY = "libnvml-standin.so"
"""Built without the soname libnvidia-ml.so.1: loaded under that soname, it would answer every later
``dlopen("libnvidia-ml.so.1")`` in the process, pynvml's own included, after the context ended."""


def compiler() -> list[str]:
    """The C compiler to build with, as a command ($CC split as a shell would, else cc, gcc or clang);
    empty: none here."""
    return shlex.split(os.environ.get("CC", "")) or [
        found for found in (shutil.which(c) for c in ("cc", "gcc", "clang")) if found][:1]


def build(into: Path) -> Path | str:
    """Compile the stand-in into ``into``; its path, or why it could not be built (no C compiler)."""
    cc = compiler()
    if not cc:
        return "no C compiler (cc, gcc or clang) to build the libnvidia-ml stand-in"
    out = into / LIBRARY
    try:
        done = subprocess.run([*cc, "-O2", "-shared", "-fPIC", "-o", str(out), str(SOURCE)],
                              capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"{' '.join(cc)} could not build the libnvidia-ml stand-in: {err}"
    if done.returncode != 0:
        return f"{' '.join(cc)} could not build the libnvidia-ml stand-in: {done.stderr.strip()[-500:]}"
    return out


class Standin:
    """The loaded stand-in and its knobs (C functions outside NVML's names)."""

    def __init__(self, path: Path) -> None:
        # A fresh copy per load: each Standin starts from the library's initial state.
        self.lib = ctypes.CDLL(str(path), mode=os.RTLD_LOCAL)
        self.lib.gpulensStandinAddProcess.argtypes = [
            ctypes.c_int, ctypes.c_uint, ctypes.c_ulonglong, ctypes.c_uint, ctypes.c_uint]
        self.lib.gpulensStandinInjectXid.argtypes = [ctypes.c_int, ctypes.c_ulonglong]
        self.lib.gpulensStandinSetMigMode.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint]
        self.lib.gpulensStandinFail.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
        self.lib.gpulensStandinCalls.restype = ctypes.c_ulonglong
        self.lib.gpulensStandinSetTime.argtypes = [ctypes.c_double]
        self.lib.gpulensStandinSetTime.restype = None
        self.now = 1000.0
        """The time the counters follow once :meth:`clock` is handed to a collector."""

    def clock(self) -> float:
        """A collector's clock that the stand-in's counters follow (move it with :meth:`advance`)."""
        self.lib.gpulensStandinSetTime(self.now)
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.lib.gpulensStandinSetTime(self.now)

    def _ok(self, code: int, what: str) -> None:
        if code != 0:
            raise ValueError(f"stand-in refused {what} (code {code})")

    def add_process(self, gpu: int, pid: int, used_bytes: int, sm: int = 0, mem: int = 0) -> None:
        self._ok(self.lib.gpulensStandinAddProcess(gpu, pid, used_bytes, sm, mem), f"process {pid}")

    def answering_links(self, gpu: int, n: int) -> None:
        """Only links below ``n`` of ``gpu`` answer their NVLink counters (the others: NOT_SUPPORTED)."""
        self._ok(self.lib.gpulensStandinAnsweringLinks(gpu, n), f"{n} answering links")

    def set_mig_mode(self, gpu: int, current: int, pending: int) -> None:
        """The MIG mode (current, pending) ``gpu`` answers from now on (1: enabled)."""
        self._ok(self.lib.gpulensStandinSetMigMode(gpu, current, pending), f"MIG mode {current}, {pending}")

    def inject_xid(self, gpu: int, xid: int) -> None:
        self._ok(self.lib.gpulensStandinInjectXid(gpu, xid), f"XID {xid}")

    def fail(self, name: str, code: int, gpu: int = -1) -> None:
        """``name`` (the C symbol, e.g. ``nvmlDeviceGetPowerUsage``) returns ``code`` on ``gpu`` (-1: all);
        again for the same name and GPU: the new code (0: it answers again)."""
        self._ok(self.lib.gpulensStandinFail(name.encode(), gpu, code), f"failing {name}")

    def calls(self) -> int:
        return int(self.lib.gpulensStandinCalls())


def fresh_copy(built: Path, into: Path) -> Path:
    """A copy of the built library under a new name: dlopen gives a copy its own state."""
    fd, name = tempfile.mkstemp(prefix="standin-", suffix=".so", dir=into)
    os.close(fd)
    shutil.copyfile(built, name)
    return Path(name)


@contextmanager
def standin_pynvml(path: Path) -> Iterator[tuple[ModuleType, Standin]]:
    """The real pynvml bound to the stand-in at ``path`` (a fresh copy: see :func:`fresh_copy`)."""
    import pynvml

    standin = Standin(path)
    saved_lib, saved_cache = pynvml.nvmlLib, pynvml._nvmlGetFunctionPointer_cache
    saved_strings = dict(pynvml.NVMLError._errcode_to_string)  # an error's text, cached per code
    pynvml.nvmlLib = standin.lib
    pynvml._nvmlGetFunctionPointer_cache = {}
    try:
        yield pynvml, standin
    finally:
        pynvml.nvmlLib = saved_lib
        pynvml._nvmlGetFunctionPointer_cache = saved_cache
        pynvml.NVMLError._errcode_to_string.clear()
        pynvml.NVMLError._errcode_to_string.update(saved_strings)
