"""GPU smoke step: the NVML call batch against pynvml's own wrappers, on a real driver.

The batched read (collectors/nvml/fastread.py, over collectors/nvml/nvbatch.c) lays out nvml.h's
structures as pynvml declares them and calls the driver's functions in one crossing; without a GPU
it is tested only over the C stand-in of libnvidia-ml. Here two collectors read every GPU, one
batched and one through pynvml alone, in turns; the figures that cannot move between two reads a
moment apart (name, UUID, total memory, power limit, the process list's pids) must be the same,
and the moving ones close (utilization within 25 points, memory used within 1 GiB).

Run by scripts/gpu_smoke.sh while its CUDA load runs. Exit 0: passed; otherwise a line starting
"GPU BATCH SMOKE FAILED" says why.
"""

from __future__ import annotations

import sys
import time

from gpulens.collectors.nvml import batch
from gpulens.collectors.nvml.collector import NvmlCollector

GIB = 1 << 30
PAUSE_S = 1.0
"""Between the reads (a test over the stand-in shortens it)."""


def main() -> int:
    loaded = batch.load()
    if isinstance(loaded, str):
        print(f"GPU BATCH SMOKE FAILED: {loaded}")
        return 1
    batched, plain = NvmlCollector(), NvmlCollector()
    try:
        for device in plain._devices:
            device._fast = None
        flags = [d.batched for d in batched._devices]
        print(f"  GPUs read through the call batch: {sum(flags)} of {len(flags)}")
        if not flags:
            print(f"GPU BATCH SMOKE FAILED: no GPU ({batched.read().unavailable.get('gpus')})")
            return 1
        if not all(flags):
            print("GPU BATCH SMOKE FAILED: not every GPU is batched (see the collector's log)")
            return 1
        bad: list[str] = []
        for _ in range(3):
            time.sleep(PAUSE_S)
            a, b = batched.read(), plain.read()
            for x, y in zip(a.gpus, b.gpus, strict=True):
                same = ("name", "uuid", "mem_total_bytes", "power_limit_w")
                for field in same:
                    if getattr(x, field) != getattr(y, field):
                        bad.append(f"gpu{x.index} {field}: batched {getattr(x, field)!r}, pynvml {getattr(y, field)!r}")
                if {p.pid for p in x.processes} != {p.pid for p in y.processes}:
                    bad.append(f"gpu{x.index} processes: batched {x.processes}, pynvml {y.processes}")
                if (x.utilization_percent is None) != (y.utilization_percent is None) or abs(
                        (x.utilization_percent or 0) - (y.utilization_percent or 0)) > 25:
                    bad.append(f"gpu{x.index} utilization: {x.utilization_percent} / {y.utilization_percent}")
                if abs((x.mem_used_bytes or 0) - (y.mem_used_bytes or 0)) > GIB:
                    bad.append(f"gpu{x.index} memory used: {x.mem_used_bytes} / {y.mem_used_bytes}")
                if set(x.unavailable) != set(y.unavailable):
                    bad.append(f"gpu{x.index} reasons: batched {sorted(x.unavailable)}, pynvml {sorted(y.unavailable)}")
        g = a.gpus[0]
        print(f"  gpu0 batched: util {g.utilization_percent} %, power {g.power_w} W, NVLink rx "
              f"{g.nvlink_rx_bytes_per_s} B/s, SM activity {g.sm_activity_percent} %, processes {g.processes}")
        if bad:
            print("GPU BATCH SMOKE FAILED: " + "; ".join(sorted(set(bad))[:10]))
            return 1
        print("NVML call batch checks passed: the batched read agrees with pynvml's")
        return 0
    finally:
        batched.close()
        plain.close()


if __name__ == "__main__":
    sys.exit(main())
