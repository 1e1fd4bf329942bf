#!/usr/bin/env bash
# GPU smoke test of on-demand Kineto tracing (issue 5) on a machine with an NVIDIA GPU.
#
#   scripts/gpu_trace_smoke.sh          # from the repository root; after scripts/gpu_smoke.sh
#                                       # (reuses its venv, SMOKE_VENV, with CUDA torch)
#
# 1. starts a small CUDA training loop with KINETO_USE_DAEMON=1 and a private
#    KINETO_IPC_SOCKET_DIR (polling every second);
# 2. `gpulens trace` takes a 500 ms trace (warm-up 1 s for CUPTI) to a .json.gz;
# 3. checks the trace has kernel, gpu_memcpy and ac2g events, and `gpulens analyze`
#    reports GPU busy % > 0 and kernels;
# 4. a --profile-memory request: checks that the memory snapshot pickle appears
#    (/tmp/memory_snapshot_<pid>.pickle, written by CUDA builds).
# Exit 0: all checks passed. Non-zero: a line starting "GPU TRACE SMOKE FAILED" says why.
set -euo pipefail

cd "$(dirname "$0")/.."
VENV="${SMOKE_VENV:-${TMPDIR:-/tmp}/gpulens-gpu-smoke-venv}"
PY="$VENV/bin/python"
WORK="$(mktemp -d /tmp/gts.XXXX)"   # short: libkineto's socket names must fit in 108 bytes
LOAD_PID=""
fail() { echo "GPU TRACE SMOKE FAILED: $*" >&2; exit 1; }
cleanup() {
    if [[ -n "$LOAD_PID" ]]; then kill "$LOAD_PID" 2>/dev/null || true; wait "$LOAD_PID" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT

[[ -x "$PY" ]] || fail "no venv at $VENV: run scripts/gpu_smoke.sh first (or set SMOKE_VENV)"
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" || fail "torch cannot see a CUDA device"
"$PY" -c "import msgspec" 2>/dev/null || "$VENV/bin/pip" install -q msgspec || fail "msgspec missing"

mkdir -p "$WORK/s"
echo "ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS=1" >"$WORK/kineto.conf"
cat >"$WORK/train.py" <<'PYEOF'
import time, torch
dev = "cuda:0"
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
host = torch.randn(256, 1024)
end = time.monotonic() + 120
print("READY", flush=True)
while time.monotonic() < end:
    x = host.to(dev, non_blocking=False)          # a real HtoD copy every step
    opt.zero_grad()
    model(x).square().mean().backward()
    opt.step()
    torch.cuda.synchronize()
PYEOF
env KINETO_USE_DAEMON=1 KINETO_IPC_SOCKET_DIR="$WORK/s" KINETO_CONFIG="$WORK/kineto.conf" \
    "$PY" "$WORK/train.py" >"$WORK/train.log" 2>&1 &
LOAD_PID=$!
for _ in $(seq 1 60); do grep -q READY "$WORK/train.log" && break; sleep 0.5; done
grep -q READY "$WORK/train.log" || { cat "$WORK/train.log"; fail "the CUDA training loop did not start"; }

echo "== gpulens trace (500 ms, warm-up 1 s)"
"$PY" -m gpulens trace --pid "$LOAD_PID" --duration-ms 500 --warmup-s 1 --ipc-socket-dir "$WORK/s" \
    --timeout 60 -o "$WORK/trace.json.gz" || fail "gpulens trace failed"
"$PY" - "$WORK/trace.json.gz" <<'PYEOF' || fail "the trace lacks GPU events"
import collections, gzip, json, sys
doc = json.loads(gzip.open(sys.argv[1]).read())
cats = collections.Counter(e.get("cat") for e in doc["traceEvents"])
print({k: cats[k] for k in ("cpu_op", "cuda_runtime", "kernel", "gpu_memcpy", "ac2g")})
sys.exit(0 if cats["kernel"] and cats["gpu_memcpy"] and cats["ac2g"] else 1)
PYEOF

echo "== gpulens analyze"
"$PY" -m gpulens analyze "$WORK/trace.json.gz" | head -40
"$PY" -m gpulens analyze --json "$WORK/trace.json.gz" >"$WORK/summary.json" || fail "gpulens analyze failed"
"$PY" - "$WORK/summary.json" <<'PYEOF' || fail "analyze shows no GPU busy time or kernels"
import json, sys
p = json.load(open(sys.argv[1]))["processes"][0]
print("GPU busy %", p["gpu"] and p["gpu"]["busy_pct"], "kernels", len(p["kernels"]))
sys.exit(0 if p["gpu"] and p["gpu"]["busy_pct"] > 0 and p["kernels"] else 1)
PYEOF

echo "== profile-memory request"
rm -f "/tmp/memory_snapshot_${LOAD_PID}.pickle"
"$PY" -m gpulens trace --pid "$LOAD_PID" --duration-ms 1000 --warmup-s 1 --profile-memory \
    --ipc-socket-dir "$WORK/s" --timeout 60 -o "$WORK/mem.json.gz" || fail "profile-memory trace failed"
for _ in $(seq 1 30); do [[ -s "/tmp/memory_snapshot_${LOAD_PID}.pickle" ]] && break; sleep 1; done
[[ -s "/tmp/memory_snapshot_${LOAD_PID}.pickle" ]] || fail "no /tmp/memory_snapshot_${LOAD_PID}.pickle"
ls -la "/tmp/memory_snapshot_${LOAD_PID}.pickle"
echo "GPU TRACE SMOKE PASSED"
