"""Request-to-file latency of on-demand traces, with the peers measured in the same run.

Starts the tests' PyTorch training loop (CPU build) with KINETO_USE_DAEMON=1
and ``ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS=1``, and times a 500 ms trace
from the request until the file is on disk:

- gpulens, one pid: ``LocalTraceService.request_trace`` (what ``gpulens trace --pid`` and the
  TUI run), warm-up 0;
- gpulens, a whole job of 2 local ranks: the agent path ``gpulens trace --job`` runs (an
  in-process endpoint owner, its control socket, ``trace_processes`` to find the ranks, one
  ``trace`` request with a common ``PROFILE_START_TIME``), until both files are copied back;
- peer "direct": a bare :class:`KinetoEndpoint` handing the same config at the next poll and
  looking for the file with ``os.path.exists`` (no queueing, checks or bookkeeping): the floor;
- peer "dyno-style": the same single request with Kineto's default 5 s warm-up, which is what
  ``dyno gputrace`` gets (it sets no ACTIVITIES_WARMUP_PERIOD_SECS).

Bound from issue 11: poll + duration + 3 s = 4.5 s, for the single pid and the job.

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
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
WORKLOAD = ROOT / "tests" / "fakes" / "kineto_workload.py"
POLL_S = 1
DURATION_MS = 500
BOUND_S = POLL_S + DURATION_MS / 1000 + 3


class Workloads:
    """``n`` training loops polling ``DIR/s`` every second (ranks 0..n-1 of job ``bench``)."""

    def __init__(self, n: int) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="gkb", dir="/tmp"))
        self.sock = self.dir / "s"
        self.sock.mkdir()
        cfg = self.dir / "kineto.conf"
        cfg.write_text(f"ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS={POLL_S}\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KINETO", "TORCHELASTIC"))}
        env.update(KINETO_USE_DAEMON="1", KINETO_IPC_SOCKET_DIR=str(self.sock), KINETO_CONFIG=str(cfg),
                   TORCHELASTIC_RUN_ID="bench")
        self.procs = [
            subprocess.Popen([sys.executable, str(WORKLOAD), "--seconds", "900"], env={**env, "RANK": str(r)},
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            for r in range(n)
        ]
        for p in self.procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "READY"

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def close(self) -> None:
        for p in self.procs:
            p.kill()
            p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def _wait(cond: Callable[[], bool], limit_s: float = 60) -> None:
    deadline = time.monotonic() + limit_s
    while not cond():
        if time.monotonic() > deadline:
            raise RuntimeError("timed out waiting")
        time.sleep(0.05)


def gpulens_single(w: Workloads, runs: int, warmup_s: float) -> list[float]:
    from gpulens.ipc.kineto.requests import TraceRequest
    from gpulens.ipc.kineto.service import LocalTraceService

    svc = LocalTraceService(socket_dir=str(w.sock), use_dynolog=False)
    svc.start()
    try:
        pid = w.pids[0]
        _wait(lambda: pid in svc.polling_pids())
        out = []
        for _ in range(runs):
            t0 = time.monotonic()
            req = TraceRequest(pids=(pid,), duration_ms=DURATION_MS, warmup_s=warmup_s, timeout_s=60)
            svc.request_trace(req).result(timeout=120)
            out.append(time.monotonic() - t0)
        return out
    finally:
        svc.stop()


def direct(w: Workloads, runs: int) -> list[float]:
    """The floor: a bare endpoint hands the config at the next poll; the file is looked for by name."""
    from gpulens.ipc.kineto.endpoint import KinetoEndpoint
    from gpulens.ipc.kineto.requests import TraceRequest, config_text

    pid = w.pids[0]
    pending: dict[int, str] = {}
    lock = threading.Lock()

    def provider(msg: object, _uid: object) -> str:
        with lock:
            return pending.pop(getattr(msg, "pid", 0), "")

    ep = KinetoEndpoint(str(w.sock), config_provider=provider)
    ep.start()
    try:
        _wait(lambda: ep.registry.get(pid) is not None)
        out = []
        for i in range(runs):
            log = w.dir / f"direct{i}" / "trace.json"
            log.parent.mkdir()
            t0 = time.monotonic()
            with lock:
                pending[pid] = config_text(TraceRequest(pids=(pid,), duration_ms=DURATION_MS), log, f"direct-{i}")
            final = log.with_name(f"trace_{pid}.json")
            _wait(final.exists, 120)
            out.append(time.monotonic() - t0)
            time.sleep(1.5)  # let Kineto's profiler go idle before the next config
        return out
    finally:
        ep.stop()


def gpulens_job(w: Workloads, runs: int) -> list[float]:
    """``gpulens trace --job bench`` on this host, in process: discovery, common start, both files back."""
    import socket

    from gpulens.agent.agent import endpoint_owner
    from gpulens.commands.trace_job import START_MARGIN_S
    from gpulens.ipc.kineto.requests import TraceRequest
    from gpulens.sources.stream.local_agent import LocalAgentLink
    from gpulens.sources.tracing import fetch_trace, new_tag

    owner = endpoint_owner(socket.gethostname(), str(w.sock))
    link = LocalAgentLink(str(w.sock), os.getpid(), os.geteuid(), w.dir / "dl")
    try:
        svc = owner.requests.trace_service
        assert svc is not None
        _wait(lambda: all(p.interval_s for p in svc.processes()) and len(svc.processes()) == len(w.pids))
        out = []
        for _ in range(runs):
            t0 = time.monotonic()
            procs = link.request("", "trace_processes", {}, 5).result(timeout=6).result["processes"]
            ranks = [p for p in procs if "bench" in p["job_keys"]]
            lead = max(p["interval_s"] or 5.0 for p in ranks) + START_MARGIN_S
            req = TraceRequest(duration_ms=DURATION_MS, start_time_ms=int((time.time() + lead) * 1000),
                               timeout_s=60 + lead, pids=(1,))
            got = fetch_trace(link, link.address, req, new_tag(), lambda s, d: None, job_key="bench")
            assert len(got.files) == len(w.pids), got.missing
            out.append(time.monotonic() - t0)
            for _name, path in got.files.values():
                path.unlink()
            time.sleep(1.5)
        return out
    finally:
        link.close()
        owner.stop()


def _line(name: str, lat: list[float], bound: float | None) -> str:
    verdict = "" if bound is None else (" within" if max(lat) <= bound else " EXCEEDED") + f" the {bound:.1f} s bound"
    return f"{name:<34} median {statistics.median(lat):5.2f} s  max {max(lat):5.2f} s  ({len(lat)} runs){verdict}"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    os.environ["GPULENS_NO_PRUNE"] = "1"
    import secrets

    from gpulens.ipc.kineto import requests

    # A base of our own: other gpulens commands starting meanwhile prune /tmp/gpulens-<euid>.
    requests._fallback_base = f"gpulens-{os.geteuid()}-bench{secrets.token_hex(4)}"
    w = Workloads(2)
    try:
        rows = {
            "gpulens, one pid": (gpulens_single(w, args.runs, 0.0), BOUND_S),
            "peer: direct endpoint (floor)": (direct(w, args.runs), None),
            "gpulens, job of 2 local ranks": (gpulens_job(w, args.runs), BOUND_S),
            "peer: dyno-style (5 s warm-up)": (gpulens_single(w, args.runs, 5.0), None),
        }
    finally:
        w.close()
        shutil.rmtree(Path("/tmp") / requests._fallback_base, ignore_errors=True)
    print(f"request -> file, {DURATION_MS} ms trace, {POLL_S} s poll (CPU build, this machine):")
    for name, (lat, bound) in rows.items():
        print(_line(name, lat, bound))
    one = statistics.median(rows["gpulens, one pid"][0])
    floor = statistics.median(rows["peer: direct endpoint (floor)"][0])
    job = statistics.median(rows["gpulens, job of 2 local ranks"][0])
    dyno = statistics.median(rows["peer: dyno-style (5 s warm-up)"][0])
    print(f"=> one pid {one / floor:.2f}x the direct floor; job of 2 ranks {job / floor:.2f}x; "
          f"dyno-style is {dyno / one:.1f}x slower than gpulens' one-pid trace")
    return 0


if __name__ == "__main__":
    sys.exit(main())
