"""Issue 32 item 1 for real: ``gpulens trace --pid TORCHRUN --children`` on a 4-rank torchrun (gloo, CPU).

torchrun inherits ``KINETO_USE_DAEMON=1`` and polls too; the ranks start
polling seconds apart. Every rank must be traced once, torchrun not at all.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

FAKES = Path(__file__).resolve().parents[1] / "fakes"
TORCHRUN = Path(sys.executable).with_name("torchrun")


@pytest.mark.torch
@pytest.mark.timeout(300)
def test_children_traces_every_rank_and_not_the_launcher(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="needs the PyTorch CPU build")
    if not TORCHRUN.exists():
        pytest.skip(f"needs torchrun next to {sys.executable} (it comes with torch)")
    short = Path(tempfile.mkdtemp(prefix="gc", dir="/tmp"))
    (short / "k.conf").write_text("ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS=1\n")
    (short / "s").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KINETO", "TORCHELASTIC", "SLURM"))}
    env.update(HOME=str(tmp_path), GPULENS_NO_PRUNE="1", OMP_NUM_THREADS="1")
    ranks_env = {**env, "KINETO_IPC_SOCKET_DIR": str(short / "s"), "KINETO_USE_DAEMON": "1",
                 "KINETO_CONFIG": str(short / "k.conf")}
    launcher = subprocess.Popen(
        [str(TORCHRUN), "--standalone", "--nproc-per-node=4", str(FAKES / "ddp_workload.py"), "--seconds", "150"],
        env=ranks_env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        out = tmp_path / "out"
        out.mkdir()
        res = subprocess.run(
            [sys.executable, "-m", "gpulens", "trace", "--pid", str(launcher.pid), "--children", "--ipc-socket-dir",
             str(short / "s"), "--duration-ms", "300", "--timeout", "120", "-o", str(out / "trace.json")],
            capture_output=True, text=True, timeout=240, env=env)
        assert launcher.stdout is not None
        ready: dict[int, int] = {}
        while len(ready) < 4:
            line = launcher.stdout.readline()
            assert line, f"torchrun ended before 4 ranks were ready: {res.stderr}"
            for rank, pid in re.findall(r"READY (\d+) (\d+)", line):  # the ranks share one pipe
                ready[int(rank)] = int(pid)
        assert res.returncode == 0, res.stderr
        traced = res.stderr.split("tracing ", 1)[1].split()[0] if "tracing " in res.stderr else ""
        assert sorted(int(p) for p in traced.split(",")) == sorted(ready.values()), res.stderr
        assert str(launcher.pid) not in traced.split(",")
        assert "warning:" not in res.stderr
        files = sorted(p.name for p in out.iterdir())
        assert len(files) == 4 and all(any(str(pid) in f for f in files) for pid in ready.values()), files
        # Issue 32 item 3: one start time for every pid of the request, as --job gives its ranks.
        assert "4 processes start their window together at " in res.stderr
        ends = []
        for f in out.iterdir():
            doc = json.loads(f.read_bytes())
            mark = next(e for e in doc["traceEvents"] if e.get("name") == "Record Window End")
            ends.append(float(doc["baseTimeNanoseconds"]) / 1e9 + float(mark["ts"]) / 1e6)
        assert max(ends) - min(ends) < 0.25, ends
    finally:
        launcher.kill()
        launcher.wait()
        subprocess.run(["pkill", "-9", "-f", str(FAKES / "ddp_workload.py")], check=False)
        shutil.rmtree(short, ignore_errors=True)
