"""Helpers for tests that need a real Prometheus server (Debian ``prometheus``).

:func:`start_prometheus` runs ``/usr/bin/prometheus`` on a free loopback port
with a temporary config (scrape interval 1 s) and TSDB under ``tmp``; the
caller stops it with ``.close()``. :func:`prometheus_binary` returns the
binary or None; tests skip with the exact reason only when it is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROMETHEUS = os.environ.get("GPULENS_PROMETHEUS", "/usr/bin/prometheus")
MISSING_REASON = f"prometheus server binary not found at {PROMETHEUS} (Debian package 'prometheus')"


def prometheus_binary() -> str | None:
    """The server binary, or None when it truly is not installed."""
    if os.access(PROMETHEUS, os.X_OK):
        return PROMETHEUS
    return shutil.which("prometheus")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PromServer:
    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def api(self, path: str, **params: str) -> Any:
        full = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(full, timeout=5) as resp:
            return json.loads(resp.read())

    def wait_targets_up(self, count: int, timeout_s: float = 30.0) -> None:
        """Wait until ``count`` targets were scraped successfully at least once."""
        deadline = time.monotonic() + timeout_s
        last: Any = None
        while time.monotonic() < deadline:
            last = self.api("/api/v1/targets")["data"]["activeTargets"]
            if len([t for t in last if t["health"] == "up"]) >= count:
                return
            time.sleep(0.2)
        raise AssertionError(f"targets not up after {timeout_s} s: {last}; log: {self.log.read_text()[-2000:]}")

    def wait_query(self, expr: str, count: int, timeout_s: float = 30.0) -> list[Any]:
        """Wait until ``expr`` returns at least ``count`` series."""
        deadline = time.monotonic() + timeout_s
        result: list[Any] = []
        while time.monotonic() < deadline:
            result = self.api("/api/v1/query", query=expr)["data"]["result"]
            if len(result) >= count:
                return result
            time.sleep(0.2)
        raise AssertionError(f"{expr}: {len(result)} series, expected {count}")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_prometheus(tmp: Path, jobs: dict[str, list[str]], extra: str = "", interval: str = "1s",
                     metrics_paths: dict[str, str] | None = None) -> PromServer:
    """Start Prometheus scraping ``jobs`` (job name -> ["127.0.0.1:PORT", ...]).

    Raises:
        AssertionError: the server did not become ready in 30 s (log attached).
    """
    binary = prometheus_binary()
    assert binary is not None, MISSING_REASON
    lines = [f"global:\n  scrape_interval: {interval}\n  evaluation_interval: {interval}\nscrape_configs:"]
    for job, targets in jobs.items():
        path = (metrics_paths or {}).get(job, "/metrics")
        lines.append(f"  - job_name: {json.dumps(job)}\n    metrics_path: {json.dumps(path)}\n"
                     f"    static_configs:\n      - targets: {json.dumps(targets)}")
    config = tmp / "prometheus.yml"
    config.write_text("\n".join(lines) + "\n" + extra)
    port = free_port()
    log = tmp / "prometheus.log"
    proc = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )
    server = PromServer(f"http://127.0.0.1:{port}", proc, log)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"prometheus exited {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{server.url}/-/ready", timeout=1) as resp:
                if resp.status == 200:
                    return server
        except OSError:
            pass
        time.sleep(0.1)
    server.close()
    raise AssertionError(f"prometheus not ready in 30 s: {log.read_text()[-2000:]}")


T0 = 1_700_000_000.0
"""When the synthetic host's kernel counters were 0 (its "boot")."""


def ticking(host: str, k: int = 1, jobs: bool = True) -> Any:
    """A ``latest()`` for serve_metrics: the synthetic host's sample at the current time."""
    return lambda: synthetic_sample(host, k, jobs, t=time.time())


def synthetic_cpu_times(k: int = 1, t: float = T0 + 100.0) -> Any:
    """The synthetic host's two CPUs' kernel counters at ``t`` (both 12.5 k % busy since T0)."""
    from gpulens.core.model import CpuTimes

    up, busy = t - T0, 0.125 * k
    times = CpuTimes(user=busy * up * 0.75, nice=0.0, system=busy * up * 0.25, idle=(1 - busy) * up)
    return (times, times)


def synthetic_sample(host: str, k: int = 1, jobs: bool = True, t: float = T0 + 100.0) -> Any:
    """A HostSample with exact, distinct values (k varies them per host); some
    fields None with reasons so absence can be checked.

    Its kernel counters are those of a host that ran at the sample's rates
    since :data:`T0`: at time ``t`` network and disk counters equal rate x
    (t - T0), so ``rate()`` over any window of samples taken at different
    ``t`` is the rate, exactly (:func:`synthetic_cpu_times` gives its CPU counters).
    """
    from gpulens.core.model import (
        CacheSample,
        CpuSample,
        DiskIo,
        GpuProcess,
        GpuSample,
        HostSample,
        JobInfo,
        MemorySample,
        NetInterface,
        NetworkSample,
        StorageSample,
    )

    gpus = tuple(
        GpuSample(
            index=i, name="NVIDIA H100 80GB HBM3", uuid=f"GPU-{k:04d}-{i:04d}",
            utilization_percent=10.0 * k + i, memory_utilization_percent=5.0 + i,
            mem_used_bytes=(1000 + 10 * k + i) * 1048576, mem_total_bytes=81559 * 1048576,
            power_w=100.5 + k + i, power_limit_w=700.0, temperature_c=40.0 + i, sm_clock_mhz=1980,
            mem_clock_mhz=2619, pcie_rx_bytes_per_s=1.5e9, pcie_tx_bytes_per_s=None,
            ecc_corrected=3, ecc_uncorrected=0, xid_events=(79,) if i == 1 else (),
            throttle_reasons=("sw_power_cap",) if i == 0 else (),
            sm_activity_percent=50.0 + i, sm_occupancy_percent=None, dram_bw_util_percent=25.0,
            processes=(GpuProcess(pid=4242, used_memory_bytes=512 * 1048576),) if i == 0 else (),
            unavailable={"pcie_tx_bytes_per_s": "NVML: not supported", "sm_occupancy_percent": "no GPM"},
        )
        for i in range(2)
    )
    job_list = (
        JobInfo(pid=4242, tree_id="systemd/sshd/bash/python3", cmdline="python3 train.py --lr 0.1",
                user="alice", start_time=1_700_000_000.0 + k, cpu_percent=150.0, rss_bytes=2 * 1024**3,
                gpu_mem_bytes={"0": 512 * 1048576}, job_key="slurm-77"),
    ) if jobs else ()
    up = t - T0
    return HostSample(
        host=host, time=t,
        cpu=CpuSample(total_percent=12.5 * k, per_core_percent=(12.5 * k, 12.5 * k), load_avg_1m=0.75, count=2),
        memory=MemorySample(total_bytes=64 * 1024**3, used_bytes=(8 + k) * 1024**3,
                            available_bytes=(56 - k) * 1024**3, swap_used_bytes=None),
        network=NetworkSample(rx_bytes_per_s=1000.0 * k, tx_bytes_per_s=2000.0 * k,
                              interfaces=(NetInterface("eth0", 1000.0 * k, 2000.0 * k,
                                                       rx_bytes=round(1000 * k * up), tx_bytes=round(2000 * k * up)),)),
        storage=StorageSample(read_bytes_per_s=4096.0, write_bytes_per_s=8192.0 * k,
                              disks=(DiskIo("nvme0n1", 4096.0, 8192.0 * k,
                                            read_bytes=round(4096 * up), write_bytes=round(8192 * k * up)),)),
        cache=CacheSample(l2_hit_ratio=None, l3_hit_ratio=None, mem_bandwidth_bytes_per_s=None),
        gpus=gpus, jobs=job_list,
        unavailable={"cache.l2_hit_ratio": "perf_event_open: ENOENT (no hardware counters)",
                     "memory.swap_used_bytes": "no swap"},
    )
