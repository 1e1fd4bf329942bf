#!/usr/bin/env bash
# GPU smoke test: the real NVML path of gpulens on a machine with an NVIDIA GPU.
#
#   scripts/gpu_smoke.sh            # from the repository root
#
# 1. makes a venv (SMOKE_VENV; it sees the system's
#    site-packages, so a torch installed there is used; default under $TMPDIR)
#    and installs gpulens into it (editable);
# 2. runs a small CUDA load (a torch matmul loop) on GPU 0 in the background;
# 3. prints a real `gpulens sample --json --count 3` taken while the load runs;
# 4. checks that GPU 0's utilization, memory, power and energy counter are read, and on
#    Hopper (name has H100/H200/GH) that GPM SM activity and tensor activity are read too.
# Exit 0: all checks passed. Non-zero: a line starting "GPU SMOKE FAILED" says why.
# Paste the whole output into docs/gpu-verification.md.
set -euo pipefail

cd "$(dirname "$0")/.."
VENV="${SMOKE_VENV:-${TMPDIR:-/tmp}/gpulens-gpu-smoke-venv}"
PY="${SMOKE_PYTHON:-python3}"
LOAD_SECONDS="${SMOKE_LOAD_SECONDS:-60}"
WORK="$(mktemp -d)"
LOAD_PID=""

fail() { echo "GPU SMOKE FAILED: $*" >&2; exit 1; }
cleanup() {
    if [[ -n "$LOAD_PID" ]] && kill -0 "$LOAD_PID" 2>/dev/null; then
        kill "$LOAD_PID" 2>/dev/null || true
        wait "$LOAD_PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

echo "== machine"
date -u
command -v nvidia-smi >/dev/null || fail "nvidia-smi not found: is this an NVIDIA GPU machine with a driver?"
nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total --format=csv

echo "== venv $VENV"
if [[ ! -x "$VENV/bin/python" ]]; then
    "$PY" -m venv --system-site-packages "$VENV" || fail "cannot create a venv with $PY"
fi
if ! "$VENV/bin/pip" install -q -e .; then
    # Offline machines: use what the system already has and install only gpulens itself.
    echo "pip install -e . failed (offline?); retrying with --no-deps --no-build-isolation"
    "$VENV/bin/pip" install -q --no-deps --no-build-isolation -e . || fail "cannot install gpulens"
fi
"$VENV/bin/python" -c "import pynvml, psutil, msgpack" \
    || fail "runtime dependencies missing (nvidia-ml-py, psutil, msgpack); install them into $VENV"
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
    echo "torch not found; trying pip install torch"
    "$VENV/bin/pip" install -q torch || fail "torch is needed for the CUDA load and cannot be installed"
fi
"$VENV/bin/python" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" \
    || fail "torch cannot see a CUDA device (CPU-only build or driver problem)"
"$VENV/bin/python" -c "import torch, pynvml; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nvidia-ml-py', getattr(pynvml, '__version__', '?'))" || true

echo "== CUDA load on GPU 0 for up to ${LOAD_SECONDS}s"
# PCI bus order makes cuda:0 the GPU that NVML calls index 0.
export CUDA_DEVICE_ORDER=PCI_BUS_ID
cat >"$WORK/load.py" <<'EOF'
import sys, time
import torch
end = time.monotonic() + float(sys.argv[1])
a = torch.randn(8192, 8192, device="cuda:0", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda:0", dtype=torch.bfloat16)
print("load running", flush=True)
while time.monotonic() < end:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
EOF
"$VENV/bin/python" "$WORK/load.py" "$LOAD_SECONDS" >"$WORK/load.log" 2>&1 &
LOAD_PID=$!
for _ in $(seq 1 60); do
    grep -q "load running" "$WORK/load.log" 2>/dev/null && break
    kill -0 "$LOAD_PID" 2>/dev/null || { cat "$WORK/load.log"; fail "the CUDA load exited early"; }
    sleep 0.5
done
grep -q "load running" "$WORK/load.log" || fail "the CUDA load did not start within 30 s"
sleep 3  # let utilization and power settle under load

echo "== gpulens sample --json --count 3 --interval 1"
"$VENV/bin/gpulens" sample --json --count 3 --interval 1 | tee "$WORK/samples.jsonl" \
    || fail "gpulens sample exited with an error"

echo "== checks (GPU 0, last sample)"
"$VENV/bin/python" - "$WORK/samples.jsonl" <<'EOF'
import json, sys
lines = [l for l in open(sys.argv[1]) if l.strip()]
if len(lines) != 3:
    sys.exit(f"GPU SMOKE FAILED: expected 3 JSON lines, got {len(lines)}")
last = json.loads(lines[-1])
gpus = last.get("gpus") or []
if not gpus:
    sys.exit(f"GPU SMOKE FAILED: no GPUs in the sample; reason: {last.get('unavailable', {}).get('gpus')}")
g = next((x for x in gpus if x["index"] == 0), gpus[0])
hopper = any(tag in g["name"] for tag in ("H100", "H200", "GH"))
checks = [("utilization_percent", True), ("mem_used_bytes", True), ("mem_total_bytes", True),
          ("power_w", True), ("energy_joules", True), ("sm_activity_percent", hopper),
          ("tensor_active_percent", hopper)]
bad = []
for field, required in checks:
    value = g.get(field)
    why = g.get("unavailable", {}).get(field, "")
    print(f"  gpu{g['index']} {field:22} = {value!r:>22}  {why}")
    if required and value is None:
        bad.append(f"{field} is null ({why or 'no reason given'})")
if g.get("utilization_percent") == 0:
    bad.append("utilization_percent is 0 while the CUDA load runs")
if hopper and g.get("sm_activity_percent") == 0:
    bad.append("sm_activity_percent is 0 while the CUDA load runs")
if hopper and g.get("tensor_active_percent") == 0:
    bad.append("tensor_active_percent is 0 while a bfloat16 matmul loop runs")
print("  other fields:", {k: g[k] for k in ("temperature_c", "sm_clock_mhz", "pcie_rx_bytes_per_s",
      "nvlink_rx_bytes_per_s", "ecc_uncorrected", "throttle_reasons", "sm_occupancy_percent",
      "dram_bw_util_percent", "xid_events")})
print("  processes:", g.get("processes"))
print("  unavailable:", g.get("unavailable"))
if bad:
    sys.exit("GPU SMOKE FAILED: " + "; ".join(bad))
print(f"NVML checks passed on {g['name']} (hopper={hopper})")
EOF
echo "== MIG mode and MIG device UUIDs per GPU, as gpulens reads them (compare: nvidia-smi -L)"
"$VENV/bin/python" -c "from gpulens.collectors.nvml.collector import NvmlCollector; c = NvmlCollector(); r = c.read(); [print(f'  gpu{g.index} {g.uuid}: ' + g.unavailable.get('mig', 'MIG off or not supported')) for g in r.gpus]; print('  MIG device -> GPU:', dict(r.mig_parents)); c.close()" || fail "reading the MIG layout raised"

echo "== the NVML call batch against pynvml's wrappers (scripts/gpu_batch_smoke.py)"
"$VENV/bin/python" scripts/gpu_batch_smoke.py || fail "the batched NVML read disagrees with pynvml's (see above)"

# ---------------------------------------------------------------------------
# PROFILER CHECKS (to be appended by the profiler issue): Kineto trace of the
# running load through the gpulens IPC path, py-spy stacks, etc.
# Keep each check failing with a "GPU SMOKE FAILED: ..." line.
# ---------------------------------------------------------------------------

echo "== profiler: on-demand CUDA trace, Analyze, memory snapshot (scripts/gpu_trace_smoke.sh)"
SMOKE_VENV="$VENV" bash scripts/gpu_trace_smoke.sh || fail "profiler checks failed (see the GPU TRACE SMOKE line above)"
# END OF PROFILER CHECKS

echo "== GPU memory by Python stack, eBPF (scripts/gpu_gpumem_smoke.py; issue 28)"
"$VENV/bin/python" scripts/gpu_gpumem_smoke.py || fail "GPU memory tracing checks failed (see the GPU GPUMEM SMOKE line above)"
echo "GPU SMOKE PASSED"
