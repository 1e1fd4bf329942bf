"""``gpulens trace --job KEY --hosts A,B``: a two-rank DDP job over gloo, started by torchrun, traced at once.

Two torchrun launchers (``--nnodes 2``, one rank each) stand for two hosts:
each rank polls the Kineto endpoint of its own "host" (its own
KINETO_IPC_SOCKET_DIR), served by its own real ``gpulens agent`` on
loopback. The command finds the job's processes by the torchrun run id on
both agents, gives them one common start time, and writes one file per
rank; the two windows line up (the ranks' configs reach them at different
polls, so without the common start they would differ by up to a poll
interval).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.agent_helpers import AgentProc, make_token_file
from tests.paths import FAKES

pytest.importorskip("torch", reason="needs the PyTorch CPU build (pip install torch==2.13.0)")
pytestmark = [pytest.mark.torch, pytest.mark.slow, pytest.mark.timeout(240)]
TORCHRUN = Path(sys.executable).with_name("torchrun")
RUN_ID = "job42"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[AgentProc], Path, dict[int, int]]]:
    """Two agents and a two-rank torchrun job, shared by the tests of this module (starting them is slow)."""
    tmp_path = tmp_path_factory.mktemp("job")
    if not TORCHRUN.exists():
        pytest.skip(f"needs torchrun next to {sys.executable} (it comes with torch)")
    short = Path(tempfile.mkdtemp(prefix="gj", dir="/tmp"))
    token = make_token_file(tmp_path / "token")
    cfg = tmp_path / "kineto.conf"
    cfg.write_text("ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS=1\n")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("KINETO", "TORCHELASTIC", "SLURM"))}
    base.update(HOME=str(tmp_path), GPULENS_NO_PRUNE="1")
    exe = str(Path(sys.executable).with_name("gpulens"))
    agents: list[AgentProc] = []
    ranks: list[subprocess.Popen[str]] = []
    port = _free_port()
    try:
        for node in (0, 1):
            sock = short / f"s{node}"
            sock.mkdir()
            agents.append(AgentProc(exe, tmp_path, f"node{node}", trace=True, extra=["--token-file", str(token)],
                                    env={**base, "KINETO_IPC_SOCKET_DIR": str(sock)}))
            env = {**base, "KINETO_IPC_SOCKET_DIR": str(sock), "KINETO_USE_DAEMON": "1", "KINETO_CONFIG": str(cfg)}
            ranks.append(subprocess.Popen(
                [str(TORCHRUN), "--nnodes=2", "--nproc-per-node=1", f"--node-rank={node}", "--master-addr=127.0.0.1",
                 f"--master-port={port}", f"--rdzv-id={RUN_ID}", str(FAKES / "ddp_workload.py"), "--seconds", "120"],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            ))
        pids = {}
        for proc in ranks:
            assert proc.stdout is not None
            word, rank, pid = proc.stdout.readline().split()
            assert word == "READY"
            pids[int(rank)] = int(pid)
        yield agents, token, pids
    finally:
        for proc in ranks:
            proc.kill()
            proc.wait()
        for a in agents:
            a.stop()
        shutil.rmtree(short, ignore_errors=True)


def _window_end_s(doc: dict[str, object]) -> float:
    """Wall-clock end of the trace window: Kineto's 'Record Window End' mark (µs after baseTimeNanoseconds)."""
    events = doc["traceEvents"]
    assert isinstance(events, list)
    mark = next(e for e in events if e.get("name") == "Record Window End")
    return float(doc["baseTimeNanoseconds"]) / 1e9 + float(mark["ts"]) / 1e6  # type: ignore[arg-type]


def test_job_traces_every_rank_on_every_host_from_one_start(
    job: tuple[list[AgentProc], Path, dict[int, int]], tmp_path: Path
) -> None:
    agents, token, pids = job
    out = tmp_path / "out"
    res = subprocess.run(
        [sys.executable, "-m", "gpulens", "trace", "--job", RUN_ID, "--hosts", ",".join(a.address for a in agents),
         "--token-file", str(token), "--duration-ms", "500", "--timeout", "60", "-o", str(out)],
        capture_output=True, text=True, timeout=180, env={**os.environ, "HOME": str(tmp_path), "GPULENS_NO_PRUNE": "1"},
    )
    assert res.returncode == 0, res.stderr
    assert "every rank starts at" in res.stderr
    files = sorted(out.iterdir())
    assert [f.name.split("-")[0] for f in files] == ["rank0", "rank1"]
    ends = []
    for rank, f in enumerate(files):
        assert f.name.endswith(f"-{pids[rank]}.json")
        doc = json.loads(f.read_bytes())
        ops = {e.get("name") for e in doc["traceEvents"] if e.get("cat") == "cpu_op" and e.get("pid") == pids[rank]}
        assert "aten::addmm" in ops, sorted(ops)[:20]
        ends.append(_window_end_s(doc))
    assert abs(ends[0] - ends[1]) < 0.25, ends
    assert res.stdout.split("\n")[0].split()[1] in {str(p) for p in pids.values()}


def test_job_with_no_process_is_a_failure_with_the_reason(
    job: tuple[list[AgentProc], Path, dict[int, int]], tmp_path: Path
) -> None:
    agents, token, _ = job
    res = subprocess.run(
        [sys.executable, "-m", "gpulens", "trace", "--job", "nosuchjob", "--hosts", agents[0].address,
         "--token-file", str(token), "-o", str(tmp_path / "o")],
        capture_output=True, text=True, timeout=120, env={**os.environ, "HOME": str(tmp_path)},
    )
    assert res.returncode == 1
    assert "no polling process of this job" in res.stderr


def test_a_rank_busy_at_the_common_start_is_reported_and_the_free_rank_written(
    job: tuple[list[AgentProc], Path, dict[int, int]], tmp_path: Path
) -> None:
    """Issue 32 item 5: rank 0 is busy with another trace (an 8 s one, asked through its agent just before);
    the job's common start cannot wait for it, so rank 1 is traced and written, rank 0 named as busy.
    The last test of the module: rank 0's agent finishes that trace after it."""
    agents, token, pids = job
    env = {**os.environ, "HOME": str(tmp_path), "GPULENS_NO_PRUNE": "1"}
    busy = subprocess.Popen(
        [sys.executable, "-m", "gpulens", "trace", "--connect", agents[0].address, "--token-file", str(token),
         "--pid", str(pids[0]), "--duration-ms", "8000", "--timeout", "60"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        assert busy.stderr is not None
        for line in busy.stderr:  # until rank 0's agent has handed the 8 s trace over
            if "tracing: config handed" in line:
                break
        else:
            raise AssertionError(f"the first trace never started (exit {busy.wait()})")
        out = tmp_path / "out"
        res = subprocess.run(
            [sys.executable, "-m", "gpulens", "trace", "--job", RUN_ID, "--hosts",
             ",".join(a.address for a in agents), "--token-file", str(token), "--duration-ms", "300",
             "--timeout", "60", "-o", str(out)],
            capture_output=True, text=True, timeout=180, env=env,
        )
    finally:
        busy.kill()
        busy.wait()
    assert res.returncode == 1, res.stderr
    assert [f.name for f in out.iterdir()] == [f"rank1-{agents[1].address.replace(':', '_')}-{pids[1]}.json"]
    # rank 0 is alone on its host: that host's request fails with the reason (rank 1's host sends its file)
    assert f"{pids[0]}: process {pids[0]} was still busy with trace" in res.stderr, res.stderr
    assert "common start time passed" not in res.stderr
    assert "1 of 2 processes traced" in res.stderr
    assert res.stdout.split() == [agents[1].address.replace(":", "_"), str(pids[1]), str(out / f"rank1-{agents[1].address.replace(':', '_')}-{pids[1]}.json")]
