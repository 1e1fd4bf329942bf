"""A Python program with known GPU-memory call shapes, over the fake CUDA driver and runtime (tests/data/fake_cuda).

Usage: ``python gpumem_workload.py LIBDIR``. It prints ``READY`` once the libraries are loaded,
waits for a line on stdin, makes the allocations below, prints ``DONE``, and waits for another line
before it exits. Every allocating line carries an ``# ALLOC name`` marker: the test reads the lines
from this file and expects exactly these stacks and bytes (MiB = 1 << 20):

- ``Model > __init__``: 3 weights of 1 MiB each, through ``cuMemAlloc_v2``, live;
- ``allocate_kv_cache``: 64 MiB through the runtime's ``cudaMalloc`` (which calls ``cuMemAlloc_v2``:
  one allocation), live;
- ``scratch``: 4 MiB allocated and freed at once (allocated, not live);
- ``Model > __init__`` also 1 MiB freed later in another function (``release``): allocated, not live;
- ``worker`` in a second thread: 2 MiB, live;
- ``stream_alloc``: 8 MiB ``cuMemAllocAsync`` freed by ``cuMemFreeAsync``: allocated, not live;
- ``grow_segment``: ``cuMemCreate`` of 2 MiB (PyTorch's expandable segments), live;
- ``pitched``: ``cuMemAllocPitch_v2`` 1000 x 100 rows -> pitch 1024, 102400 bytes, live.
"""

from __future__ import annotations

import ctypes
import sys
import threading

MIB = 1 << 20
lib = sys.argv[1]
cuda = ctypes.CDLL(f"{lib}/libcuda.so.1")
cudart = ctypes.CDLL(f"{lib}/libcudart.so.12")
ptr = ctypes.c_uint64
assert cuda.cuInit(0) == 0  # as every CUDA program does first


def alloc(n: int) -> int:
    p = ptr(0)
    assert cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(n)) == 0
    return p.value


class Model:
    def __init__(self) -> None:
        self.weights = [self.weight() for _ in range(3)]
        self.temp = alloc(1 * MIB)  # ALLOC temp

    def weight(self) -> int:
        return alloc(1 * MIB)  # ALLOC weight


def release(addr: int) -> None:
    cuda.cuMemFree_v2(ptr(addr))


def allocate_kv_cache() -> int:
    p = ctypes.c_void_p(0)
    assert cudart.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(64 * MIB)) == 0  # ALLOC kv
    return p.value or 0


def scratch() -> None:
    a = alloc(4 * MIB)  # ALLOC scratch
    cuda.cuMemFree_v2(ptr(a))


def worker() -> None:
    alloc(2 * MIB)  # ALLOC worker


def stream_alloc() -> None:
    p = ptr(0)
    cuda.cuMemAllocAsync(ctypes.byref(p), ctypes.c_size_t(8 * MIB), None)  # ALLOC async
    cuda.cuMemFreeAsync(p, None)


def grow_segment() -> None:
    h = ctypes.c_uint64(0)
    cuda.cuMemCreate(ctypes.byref(h), ctypes.c_size_t(2 * MIB), None, ctypes.c_ulonglong(0))  # ALLOC create


def pitched() -> None:
    p, pitch, rows = ptr(0), ctypes.c_size_t(0), ctypes.c_size_t(100)
    cuda.cuMemAllocPitch_v2(ctypes.byref(p), ctypes.byref(pitch), ctypes.c_size_t(1000), rows, 4)  # ALLOC pitch


def main() -> None:
    print("READY", flush=True)
    sys.stdin.readline()
    model = Model()
    allocate_kv_cache()
    scratch()
    release(model.temp)
    t = threading.Thread(target=worker)
    t.start()
    t.join()
    stream_alloc()
    grow_segment()
    pitched()
    print("DONE", flush=True)
    sys.stdin.readline()


if __name__ == "__main__":
    main()
