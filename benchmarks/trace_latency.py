"""Request-to-file latency of an on-demand trace through gpulens' Kineto endpoint.

Starts the tests' PyTorch training loop (CPU build) with KINETO_USE_DAEMON=1,
serves the endpoint, and times ``request_trace`` until the trace file is on
disk, for a 500 ms trace. Compared in the same run: warm-up 0 (gpulens'
default) against Kineto's default 5 s warm-up (what ``dyno gputrace``
gets), and a 1 s against the default 5 s poll interval. Bound from the
issue: one poll interval + duration + 4 s.

Usage: .venv/bin/python benchmarks/trace_latency.py [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
WORKLOAD = ROOT / "tests" / "fakes" / "kineto_workload.py"


def measure(poll_s: int, warmup_s: float, runs: int) -> list[float]:
    """Latencies (s) of ``runs`` 500 ms traces of one fresh workload."""
    from gpulens.ipc.kineto.requests import TraceRequest
    from gpulens.ipc.kineto.service import LocalTraceService

    d = Path(tempfile.mkdtemp(prefix="gkb", dir="/tmp"))
    cfg = d / "kineto.conf"
    cfg.write_text(f"ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS={poll_s}\n")
    svc = LocalTraceService(socket_dir=str(d / "s"), use_dynolog=False)
    svc.start()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KINETO")}
    env.update(KINETO_USE_DAEMON="1", KINETO_IPC_SOCKET_DIR=str(d / "s"), KINETO_CONFIG=str(cfg))
    proc = subprocess.Popen([sys.executable, str(WORKLOAD), "--seconds", "600"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    out = []
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "READY"
        deadline = time.monotonic() + 30
        while proc.pid not in svc.polling_pids() and time.monotonic() < deadline:
            time.sleep(0.05)
        for _ in range(runs):
            t0 = time.monotonic()
            fut = svc.request_trace(TraceRequest(pids=(proc.pid,), duration_ms=500, warmup_s=warmup_s, timeout_s=60))
            fut.result(timeout=120)
            out.append(time.monotonic() - t0)
    finally:
        proc.kill()
        proc.wait()
        svc.stop()
        shutil.rmtree(d, ignore_errors=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    rows = []
    for poll_s, warmup in ((1, 0.0), (5, 0.0), (1, 5.0)):
        lat = measure(poll_s, warmup, args.runs)
        bound = poll_s + 0.5 + 4
        rows.append((poll_s, warmup, lat))
        print(f"poll {poll_s} s, warm-up {warmup:.0f} s: median {statistics.median(lat):.2f} s, "
              f"max {max(lat):.2f} s over {len(lat)} runs (bound poll+duration+4 s = {bound:.1f} s"
              f"{'' if warmup else (', within' if max(lat) <= bound else ', EXCEEDED')})", flush=True)
    ours = statistics.median(rows[0][2])
    peer = statistics.median(rows[2][2])
    print(f"=> warm-up 0 is {peer / ours:.1f}x faster than Kineto's default 5 s warm-up ({ours:.2f} s vs {peer:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
