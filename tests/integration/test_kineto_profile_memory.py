"""``gpulens trace --profile-memory`` against a real PyTorch (CPU build) training loop (issue 28).

The CLI hands libkineto ``PROFILE_PROFILE_MEMORY=true`` (not the snapshot
request ``PROFILE_MEMORY=true``, which left an empty ``trace_<pid>.json.tmp``
and failed every request): the trace is written and complete. PyTorch 2.13's
on-demand profiler records no ``[memory]`` events (its global profiler state
is not the thread-local reporter c10's allocators tell of allocations), so
the result says so; a PyTorch that records them must give ``[memory]``
events with byte counts that open as a memory flame graph. The importer's
half is also checked on ``[memory]`` events torch writes for a profiler
started in the program.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpulens.analysis.flame.importers import load_profile
from gpulens.ipc.kineto.jobtext import NO_MEMORY_NOTE
from tests.paths import KINETO_WORKLOAD

torch = pytest.importorskip("torch", reason="needs the PyTorch CPU build (pip install torch==2.13.0)")
pytestmark = [pytest.mark.torch, pytest.mark.slow, pytest.mark.timeout(150)]


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A socket dir short enough for libkineto's client names (sun_path is 108 bytes)."""
    d = Path(tempfile.mkdtemp(prefix="gm", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _start(tmp_path: Path, socket_dir: Path) -> subprocess.Popen[str]:
    cfg = tmp_path / "kineto.conf"
    cfg.write_text("ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS=1\n")  # poll every second: fast tests
    env = {k: v for k, v in os.environ.items() if not k.startswith("KINETO")}
    env.update(KINETO_CONFIG=str(cfg), KINETO_USE_DAEMON="1", KINETO_IPC_SOCKET_DIR=str(socket_dir))
    env.pop("SLURM_JOB_ID", None)
    proc = subprocess.Popen([sys.executable, str(KINETO_WORKLOAD), "--seconds", "90"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "READY"
    return proc


def _memory_events(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in doc["traceEvents"] if e.get("name") == "[memory]"]


def _check_memory_flame(path: Path, mem: list[dict[str, Any]]) -> None:
    assert all(isinstance(e["args"]["Bytes"], int) for e in mem)
    assert any(e["args"]["Bytes"] > 0 for e in mem)
    profile = load_profile(str(path), metric="memory")
    assert profile.unit == "bytes" and profile.total > 0 and len(profile.node_self) > 1


def test_cli_profile_memory_writes_a_complete_trace(tmp_path: Path, short_dir: Path) -> None:
    sock = short_dir / "c"
    sock.mkdir()
    proc = _start(tmp_path, sock)
    out = tmp_path / "mem.json"
    try:
        res = subprocess.run(
            [sys.executable, "-m", "gpulens", "trace", "--pid", str(proc.pid), "--duration-ms", "500",
             "--profile-memory", "--ipc-socket-dir", str(sock), "--timeout", "40", "-o", str(out)],
            capture_output=True, text=True, timeout=90,
        )
    finally:
        proc.kill()
        proc.wait()
    assert res.returncode == 0, res.stderr
    assert "overloaded" not in res.stderr
    done = re.search(r"done: (\S+\.json)", res.stderr)
    assert done is not None, res.stderr
    written = Path(done.group(1))
    assert written.name == f"trace_{proc.pid}.json"
    assert not written.with_name(written.name + ".tmp").exists()  # renamed into place, nothing left
    doc = json.loads(out.read_bytes())
    assert doc.get("traceName") == str(written)  # Kineto's finalized activity trace
    ops = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op" and e.get("pid") == proc.pid]
    assert len(ops) > 10
    mem = _memory_events(doc)
    if mem:  # a PyTorch whose on-demand profiler records allocations
        _check_memory_flame(out, mem)
        assert NO_MEMORY_NOTE not in res.stderr
    else:  # PyTorch 2.13: said, not left for the memory flame graph to find out
        assert NO_MEMORY_NOTE in res.stderr


def test_memory_events_torch_writes_open_as_a_memory_flame_graph(tmp_path: Path) -> None:
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        for _ in range(3):
            model(torch.randn(32, 64)).sum().backward()
    path = tmp_path / "thread_local.json"
    prof.export_chrome_trace(str(path))
    mem = _memory_events(json.loads(path.read_bytes()))
    assert mem and all({"Bytes", "Total Allocated"} <= set(e["args"]) for e in mem)
    _check_memory_flame(path, mem)
