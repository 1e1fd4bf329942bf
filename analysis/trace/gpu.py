"""GPU-side numbers of one process: busy/idle breakdown, kernels, copies, launches, memory."""

from __future__ import annotations

import functools
import re
from collections import defaultdict
from collections.abc import Iterable

from gpulens.analysis.trace.events import Event
from gpulens.analysis.trace.summary import (
    GpuBreakdown,
    KernelRow,
    LaunchStats,
    MemcpyRow,
    MemoryPeak,
)

KERNEL_CATS = frozenset({"kernel", "Kernel"})
COPY_CATS = frozenset({"gpu_memcpy", "gpu_memset", "Memcpy", "Memset"})
LAUNCH_NAMES = frozenset(
    {
        "cudaLaunchKernel",
        "cudaLaunchKernelExC",
        "cudaLaunchCooperativeKernel",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cudaGraphLaunch",
        "hipLaunchKernel",
        "hipExtLaunchKernel",
        "hipModuleLaunchKernel",
        "hipExtModuleLaunchKernel",
        "hipGraphLaunch",
    }
)
_COMM = re.compile(r"nccl|rccl|all_?reduce|all_?gather|reduce_?scatter|sendrecv", re.IGNORECASE)
_COPY_KIND = re.compile(r"^(Memcpy|Memset)\s+(\w+)")
DEVICE_TYPES = {0: "cpu", 1: "cuda", 2: "mkldnn", 3: "opengl", 4: "opencl", 5: "ideep", 6: "hip"}


@functools.lru_cache(maxsize=4096)
def is_comm(name: str) -> bool:
    """True for collective-communication kernels (NCCL / RCCL); cached: names repeat."""
    return _COMM.search(name) is not None


def _device(ev: Event) -> object:
    dev = ev.args.device if ev.args is not None else None
    return dev if dev is not None else ev.pid


def _union(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by possibly overlapping [start, end) intervals."""
    intervals.sort()
    total = 0.0
    cur_s = cur_e = None
    for s, e in intervals:
        if cur_e is None or s > cur_e:
            if cur_e is not None and cur_s is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        elif e > cur_e:
            cur_e = e
    if cur_e is not None and cur_s is not None:
        total += cur_e - cur_s
    return total


def gpu_breakdown(events: list[Event]) -> GpuBreakdown:
    """Busy / compute / communication / memcpy time, summed over devices."""
    per_dev: dict[object, dict[str, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    for ev in events:
        iv = (ev.ts, ev.ts + ev.dur)
        parts = per_dev[_device(ev)]
        parts["all"].append(iv)
        if ev.cat in COPY_CATS:
            parts["memcpy"].append(iv)
        elif is_comm(ev.name):
            parts["comm"].append(iv)
        else:
            parts["compute"].append(iv)
    window = busy = compute = comm = memcpy = 0.0
    for parts in per_dev.values():
        alls = parts["all"]
        window += max(e for _, e in alls) - min(s for s, _ in alls)
        busy += _union(alls)
        compute += _union(parts["compute"])
        comm += _union(parts["comm"])
        memcpy += _union(parts["memcpy"])
    return GpuBreakdown(len(per_dev), window, busy, compute, comm, memcpy)


def kernel_rows(events: Iterable[Event], busy_us: float) -> list[KernelRow]:
    """Kernels grouped by name, longest total first."""
    calls: dict[str, int] = defaultdict(int)
    total: dict[str, float] = defaultdict(float)
    for ev in events:
        if ev.cat in KERNEL_CATS:
            calls[ev.name] += 1
            total[ev.name] += ev.dur
    rows = [
        KernelRow(n, calls[n], total[n], total[n] / calls[n], 100.0 * total[n] / busy_us if busy_us else 0.0)
        for n in calls
    ]
    rows.sort(key=lambda r: -r.total_us)
    return rows


def _as_int(v: object) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.isdigit():
        return int(v)
    return None


def memcpy_rows(events: Iterable[Event]) -> list[MemcpyRow]:
    """Copies and sets grouped by kind (HtoD, DtoH, DtoD, Device, ...)."""
    count: dict[str, int] = defaultdict(int)
    nbytes: dict[str, int] = defaultdict(int)
    known: dict[str, bool] = defaultdict(bool)
    dur: dict[str, float] = defaultdict(float)
    for ev in events:
        if ev.cat not in COPY_CATS:
            continue
        m = _COPY_KIND.match(ev.name)
        kind = f"{m.group(1)} {m.group(2)}" if m else ev.name
        count[kind] += 1
        dur[kind] += ev.dur
        b = _as_int(ev.args.bytes) if ev.args is not None else None
        if b is not None:
            nbytes[kind] += b
            known[kind] = True
    rows = [
        MemcpyRow(k, count[k], nbytes[k], dur[k], nbytes[k] / (dur[k] * 1e3) if known[k] and dur[k] > 0 else None)
        for k in count
    ]
    rows.sort(key=lambda r: -r.total_us)
    return rows


def launch_stats(runtime: list[tuple[float, float, str, int | None]], gpu: list[Event]) -> LaunchStats | None:
    """Kernel-launch calls ``(ts, -dur, name, correlation)``: CPU cost, delay until the kernel ran."""
    launches = [ev for ev in runtime if ev[2] in LAUNCH_NAMES]
    if not launches:
        return None
    start_of: dict[int, float] = {}
    for ev in gpu:
        corr = ev.args.correlation if ev.args is not None else None
        if isinstance(corr, int) and ev.cat in KERNEL_CATS:
            start_of[corr] = ev.ts
    delays = [start_of[c] - ts for ts, _d, _n, c in launches if c is not None and c in start_of]
    total = -sum(ev[1] for ev in launches)  # compact CPU events carry the negated duration
    return LaunchStats(
        count=len(launches),
        total_cpu_us=total,
        mean_cpu_us=total / len(launches),
        mean_delay_us=sum(delays) / len(delays) if delays else None,
        max_delay_us=max(delays) if delays else None,
    )


def memory_peaks(events: list[Event]) -> list[MemoryPeak]:
    """Peak allocated (and reserved) bytes per device from ``[memory]`` instant events."""
    peak_alloc: dict[str, int] = {}
    peak_res: dict[str, int] = {}
    running: dict[str, int] = defaultdict(int)
    relative: dict[str, bool] = {}
    for ev in sorted(events, key=lambda e: e.ts):
        a = ev.args
        if a is None:
            continue
        dtype = _as_int(a.device_type)
        did = _as_int(a.device_id) if a.device_id is not None else None
        name = DEVICE_TYPES.get(dtype if dtype is not None else -1, f"type{dtype}")
        dev = name if did is None or did < 0 else f"{name}:{did}"
        total = _as_int(a.total_allocated)
        if total is not None:
            relative[dev] = False
        else:
            delta = a.mem_bytes if isinstance(a.mem_bytes, int) else 0
            running[dev] += delta
            total = running[dev]
            relative.setdefault(dev, True)
        peak_alloc[dev] = max(peak_alloc.get(dev, total), total)
        res = _as_int(a.total_reserved)
        if res is not None:
            peak_res[dev] = max(peak_res.get(dev, res), res)
    return [MemoryPeak(d, peak_alloc[d], peak_res.get(d), relative[d]) for d in sorted(peak_alloc)]
