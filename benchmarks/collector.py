"""CPU milliseconds per sampling tick with 1,000 idle processes.

A tick is one ``Sampler.sample()``: host CPU/memory/network/storage,
InfiniBand, perf counters, the job scan, and 8 GPUs read through NVML. No
GPU here, so NVML is the fake 8-GPU test double (tests/fakes/fake_nvml.py) behind
the real NvmlCollector. Eight Python sleepers are the jobs (one per GPU,
each with GPU memory on the fake GPUs); 1,000 ``sleep`` processes are the
crowd. CPU time is ``time.process_time()`` around ``sample()`` (user + sys
of this process), median over 60 ticks.

Figures:
* steady: the processes are older than jobs.YOUNG_S, so only jobs, shells
  and new pids are read, and /proc is listed only when a pid was allocated
  since the last tick (the normal state of a node running training jobs);
* busy: steady, but with /proc listed every tick, as on a node where some
  process or thread is created every second;
* young: the first ticks after the 1,000 processes started, when every one
  of them is re-read each tick to catch exec (the worst case);
* peer: the same host figures and process table read the usual way with
  psutil (``process_iter`` + ``cpu_percent`` + counters), measured in the
  same run on the same processes; and the 14 ms all-smi publishes for one
  collection with about 500 processes (not measured here).

Run: ``.venv/bin/python benchmarks/collector.py``
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.fakes.fake_nvml

import psutil

from gpulens.collectors import jobs as jobs_mod
from gpulens.collectors.nvml.collector import NvmlCollector
from gpulens.collectors.sampler import Sampler
from tests.fakes.fake_nvml import make_fake_nvml

CROWD = 1000
JOBS = 8
TICKS = 60
TICK_S = 0.25
ALL_SMI_MS = 14.0
"""all-smi's published CPU time per collection, ~500 processes."""


def cpu_ms(fn: Callable[[], object]) -> float:
    t0 = time.process_time()
    fn()
    return (time.process_time() - t0) * 1000


def spawn() -> tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]:
    crowd = subprocess.Popen(
        ["/bin/sh", "-c", f"i=0; while [ $i -lt {CROWD} ]; do sleep 900 & i=$((i+1)); done; wait"]
    )
    sleeper = f"'{sys.executable}' -c 'import time; time.sleep(900)'"
    jobs = subprocess.Popen(["/bin/sh", "-c", " & ".join([sleeper] * JOBS) + " & wait"])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        n = len(psutil.Process(crowd.pid).children()) + len(psutil.Process(jobs.pid).children())
        if n >= CROWD + JOBS:
            break
        time.sleep(0.1)
    return crowd, jobs


def psutil_tick(state: dict[int, psutil.Process]) -> None:
    """What a psutil-based monitor does per tick for the same figures."""
    psutil.cpu_percent(percpu=True)
    psutil.virtual_memory()
    psutil.net_io_counters(pernic=True)
    psutil.disk_io_counters(perdisk=True)
    for p in psutil.process_iter(["pid", "ppid", "name"]):
        cached = state.setdefault(p.pid, p)  # keeps cpu_percent's previous reading
        try:
            cached.cpu_percent()
            cached.memory_info()
        except psutil.Error:
            pass


def main() -> int:
    crowd, jobs = spawn()
    spawned_at = time.monotonic()
    try:
        job_pids = [c.pid for c in psutil.Process(jobs.pid).children()]
        fake = make_fake_nvml(gpus=8)
        for gpu, pid in enumerate(job_pids):
            fake.add_process(gpu % 8, pid, 10 << 30, sm_util=80, mem_util=30)
        own = "/".join(
            Path(f"/proc/{p}/comm").read_text().strip()
            for p in [*reversed([a.pid for a in psutil.Process().parents()]), os.getpid()]
        )
        pattern = re.escape(own) + r"/sh/python[0-9.]*$"
        sampler = Sampler(job_pattern=pattern, nvml=NvmlCollector(fake, clock=fake.clock))
        plain = Sampler(job_pattern=pattern, nvml=NvmlCollector(fake, clock=fake.clock), attribute=False)

        def tick(which: Sampler | None = None) -> int:
            time.sleep(TICK_S)
            fake.advance(TICK_S)
            holder: list[int] = []
            ms = cpu_ms(lambda: holder.append(len((which or sampler).sample().jobs)))
            ticks.append(ms)
            return holder[0]

        ticks: list[float] = []
        while time.monotonic() - spawned_at < jobs_mod.YOUNG_S - TICK_S:
            found = tick()
        young = list(ticks)
        time.sleep(max(0.0, spawned_at + jobs_mod.YOUNG_S + 1 - time.monotonic()))
        ticks.clear()
        for _ in range(TICKS):
            found = tick()
        steady = list(ticks)
        ticks.clear()
        on: list[float] = []  # attribution on and off, tick about, the same processes
        off: list[float] = []
        for _ in range(TICKS):
            tick(plain)
            off.append(ticks.pop())
            tick()
            on.append(ticks.pop())
        plain.close()
        for _ in range(TICKS):
            sampler._jobs._prev_last_pid = None  # as if a pid was allocated every tick
            found = tick()
        busy = list(ticks)
        sampler.close()

        state: dict[int, psutil.Process] = {}
        psutil_tick(state)
        peer = []
        for _ in range(TICKS):
            time.sleep(TICK_S)
            peer.append(cpu_ms(lambda: psutil_tick(state)))
        nprocs = len(psutil.pids())
    finally:
        for parent in (crowd, jobs):
            for c in psutil.Process(parent.pid).children():
                c.kill()
            parent.kill()
            parent.wait()

    ours = statistics.median(steady)
    print(f"processes on the machine: {nprocs}; jobs found per tick: {found} (expected {JOBS})")
    print(f"gpulens tick, steady   : median {ours:.2f} ms CPU, p90 "
          f"{statistics.quantiles(steady, n=10)[-1]:.2f} ms, mean {statistics.mean(steady):.2f} ms "
          f"over {len(steady)} ticks")
    print(f"attribution on / off   : median {statistics.median(on):.2f} / {statistics.median(off):.2f} ms CPU, "
          f"ticks taken in turns ({len(on)} each): {statistics.median(on) / statistics.median(off):.3f}x "
          f"(container, pod and Slurm job read once per process; target: within 10 %)")
    print(f"gpulens tick, busy     : median {statistics.median(busy):.2f} ms CPU over "
          f"{len(busy)} ticks (/proc listed every tick, as when pids are allocated each tick)")
    print(f"gpulens tick, young    : median {statistics.median(young):.2f} ms CPU over "
          f"{len(young)} ticks (all {CROWD} processes < {jobs_mod.YOUNG_S:.0f} s old, re-read)")
    print(f"psutil peer (same run) : median {statistics.median(peer):.2f} ms CPU "
          f"-> gpulens is {statistics.median(peer) / ours:.1f}x cheaper")
    print(f"all-smi (published)    : {ALL_SMI_MS:.0f} ms per collection with ~500 processes "
          f"-> ratio {ALL_SMI_MS / ours:.1f}x")
    print(f"target <= 3 ms: {'met' if ours <= 3.0 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
