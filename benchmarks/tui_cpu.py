"""Viewer CPU: ``gpulens --demo`` (16 hosts x 8 GPUs, 1 s) vs ``btop`` (update_ms = 1000).

Both run at the same time in their own 160x45 tmux panes for 60 s; CPU is
utime + stime from /proc/PID/stat (the process and its threads), as % of one
core. Target for gpulens: <= 3 %.

Usage: .venv/bin/python benchmarks/tui_cpu.py [--seconds 60]
"""

from __future__ import annotations

import argparse
import os
import shutil
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
    parser.add_argument("--seconds", type=float, default=60)
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
        start = {n: cpu_s(p) for n, p in pids.items()}
        t0 = time.monotonic()
        time.sleep(args.seconds)
        wall = time.monotonic() - t0
        used = {n: (cpu_s(p) - start[n]) / wall * 100 for n, p in pids.items()}
    finally:
        tmux(sock, "kill-server")
    print(f"gpulens --demo (16 hosts x 8 GPUs, 1 s), 160x45 tmux: {used['g']:.2f} % of one core over {wall:.0f} s")
    print(f"btop (update_ms = 1000), 160x45 tmux, same {wall:.0f} s: {used['b']:.2f} % of one core")
    print(f"ratio gpulens / btop: {used['g'] / max(used['b'], 0.01):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
