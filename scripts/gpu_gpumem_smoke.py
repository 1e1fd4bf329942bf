"""GPU smoke, issue 28: the live GPU-memory flame of a real torch CUDA program, traced with eBPF (root).

A torch program makes its CUDA context, then (after the probes attach) allocates a KV-cache-like
tensor in ``Runner._allocate_kv_cache_tensors`` and four weight matrices. The live flame's total must
equal what PyTorch took from the driver meanwhile (``torch.cuda.memory_reserved()`` growth) within
1 % + 2 MiB, and the largest stack must pass through ``Runner > _allocate_kv_cache_tensors``.
Run by scripts/gpu_smoke.sh with the smoke venv's python. Prints one "GPU GPUMEM SMOKE ..." verdict.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

PROGRAM = r"""
import json, sys
import torch
torch.zeros(1, device="cuda")  # the context exists before the probes attach
print("READY", flush=True)
sys.stdin.readline()
base = torch.cuda.memory_reserved()

class Runner:
    def _allocate_kv_cache_tensors(self):
        return torch.empty((2, 32, 4096, 1024), dtype=torch.float16, device="cuda")

kv = Runner()._allocate_kv_cache_tensors()
weights = [torch.randn(4096, 4096, device="cuda") for _ in range(4)]
torch.cuda.synchronize()
print(json.dumps({"reserved": torch.cuda.memory_reserved() - base}), flush=True)
sys.stdin.readline()
"""


def main() -> int:
    if os.geteuid() != 0:
        print("GPU GPUMEM SMOKE SKIPPED: needs root for eBPF")
        return 0
    from gpulens.collectors.gpumem.tracer import GpuMemTracer, folded, why_not
    from gpulens.core.reasons import rendered

    why = why_not()
    if why:
        print(f"GPU GPUMEM SMOKE FAILED: {why}")
        return 1
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as fh:
        fh.write(PROGRAM)
    proc = subprocess.Popen([sys.executable, fh.name], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        if proc.stdout.readline().strip() != "READY":
            print("GPU GPUMEM SMOKE FAILED: the torch program did not start")
            return 1
        began = time.monotonic()
        tracer = GpuMemTracer([proc.pid], native=True)  # the C++ of PyTorch's allocator under the Python frames
        python = {pid: rendered(w) for pid, w in tracer.python.items()}
        print(f"attached in {time.monotonic() - began:.2f} s: {tracer.attached}; python: {python}")
        proc.stdin.write("go\n")
        proc.stdin.flush()
        reserved = json.loads(proc.stdout.readline())["reserved"]
        while tracer.poll(100):
            pass
        live, _ = tracer.snapshot()
        print(folded(live.items()))
        print(f"lost {tracer.lost}, malformed {tracer.malformed}, unknown frees {tracer.allocations.unknown_frees}")
        tracer.close()
    finally:
        proc.kill()
        proc.wait()
    got = sum(live.values())
    top = max(live.items(), key=lambda kv: kv[1])[0] if live else ()
    print(f"live flame total {got:,} bytes; torch.cuda.memory_reserved() grew {reserved:,} bytes")
    native = [f for f in top if not f.endswith(")") and not f.startswith("<") and f not in ("cudaMalloc", "cuMemAlloc_v2")]
    print(f"native frames of the largest stack (--native; informative): {native or 'none'}")
    bad = []
    if abs(got - reserved) > reserved * 0.01 + (2 << 20):
        bad.append(f"total {got:,} != reserved {reserved:,}")
    if not any(f.startswith("Runner > _allocate_kv_cache_tensors (") for f in top):
        bad.append(f"the largest stack does not pass through the KV-cache function: {top}")
    if bad:
        print("GPU GPUMEM SMOKE FAILED: " + "; ".join(bad))
        return 1
    print("GPU GPUMEM SMOKE PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
