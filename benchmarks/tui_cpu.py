"""Viewer CPU: ``gpulens --demo`` (16 hosts x 8 GPUs, 1 s) vs ``btop`` (update_ms = 1000).

Both run at the same time in their own 160x45 tmux panes for 60 s; CPU is
utime + stime from /proc/PID/stat (the process and its threads), as % of one
core. Target for gpulens: <= 3 %. The ``--seconds`` are measured as
``--windows`` back-to-back windows (default 3 of 20 s); printed: each
window's figure, the median per side and the ratio of the medians.

Usage: .venv/bin/python benchmarks/tui_cpu.py [--seconds 60] [--windows 3]
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

TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def tmux(sock: str, *args: str) -> str:
    return subprocess.run(["tmux", "-L", sock, *args], capture_output=True, text=True, check=True).stdout


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60, help="measured in all (default 60)")
    parser.add_argument("--windows", type=int, default=3, help="windows the seconds are cut into (default 3)")
    args = parser.parse_args()
    gpulens = Path(sys.executable).parent / "gpulens"
    if shutil.which("tmux") is None or shutil.which("btop") is None:
        print("needs tmux and btop")
        return 1
    sock = f"gpulens-bench-{os.getpid()}"
    conf = tempfile.mkdtemp()
    (Path(conf) / "btop").mkdir()
    (Path(conf) / "btop" / "btop.conf").write_text("update_ms = 1000\n")
    (Path(conf) / "gpulens").mkdir()
    env = f"XDG_CONFIG_HOME={conf}"
    tmux(sock, "new-session", "-d", "-s", "g", "-x", "160", "-y", "45", f"{env} exec {gpulens} --demo --interval 1")
    tmux(sock, "new-session", "-d", "-s", "b", "-x", "160", "-y", "45", f"{env} exec btop")
    try:
        pids = {n: int(tmux(sock, "display", "-p", "-t", f"{n}:0.0", "#{pane_pid}").strip()) for n in ("g", "b")}
        time.sleep(8)  # start-up and the demo's history backfill are not the steady state
        size = tmux(sock, "display", "-p", "-t", "g:0.0", "#{pane_width}x#{pane_height}").strip()
        assert size == "160x45", size
        per: dict[str, list[float]] = {"g": [], "b": []}
        wall = 0.0
        for _ in range(args.windows):  # back-to-back windows of the same run
            start = {n: cpu_s(p) for n, p in pids.items()}
            t0 = time.monotonic()
            time.sleep(args.seconds / args.windows)
            dt = time.monotonic() - t0
            wall += dt
            for n, p in pids.items():
                per[n].append((cpu_s(p) - start[n]) / dt * 100)
    finally:
        tmux(sock, "kill-server")
    used = {n: statistics.median(v) for n, v in per.items()}

    def spread(n: str) -> str:
        return f"median {used[n]:.2f} % of one core ({', '.join(f'{x:.2f}' for x in per[n])})"

    print(f"{args.windows} windows of {wall / args.windows:.0f} s, both at the same time, 160x45 tmux")
    print(f"gpulens --demo (16 hosts x 8 GPUs, 1 s): {spread('g')}")
    print(f"btop (update_ms = 1000)               : {spread('b')}")
    print(f"ratio of medians gpulens / btop: {used['g'] / max(used['b'], 0.01):.1f} (per window: "
          f"{', '.join(f'{g / max(b, 0.01):.1f}' for g, b in zip(per['g'], per['b'], strict=True))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
