"""A SIMULATED fleet (``gpulens --demo``): try the UI without GPUs.

Default 16 hosts x 8 H100s. Every figure is a pure function of (seed, host,
time bucket), so a fixed seed and a frozen clock give the same screens
every run. The fleet shows what the UI is for:

- ``4711`` alice, LLM pre-training on nodes 01-04: ~96 % with a dip every
  60 s (evaluation / checkpoint);
- ``4712`` bob, fine-tuning on nodes 05-06; node05 GPU 2 throttles (thermal);
- ``4720`` carol, a notebook on node07 holding 4 GPUs at 0 % (idle-held);
- ``4731`` dave, vision training on nodes 08-10, a saw-tooth load;
- node11 GPU 3 reports XID 79 (fallen off the bus) and its figures are n/a;
- node09 has no hardware cache counters (n/a with the reason);
- node12-13 serve inference from one process (no job key); node14-16 idle.

Samples are marked ``simulated=True``; the UI says SIMULATED.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable

from gpulens.core import model as m
from gpulens.core.events import Emit, SampleEvent

GIB = 1024**3
GPU_MEM = 80 * GIB
NO_COUNTERS = "perf_event_open: ENOENT (no hardware cache counters in this VM)"
# role of host (index % 16): (job key, user, command, util base, util noise, period s)
_ROLES: dict[int, tuple[str, str, str, float, float, int]] = {
    **{i: ("4711", "alice", "train.py --model llama-13b", 96, 3, 60) for i in range(4)},
    **{i: ("4712", "bob", "finetune.py --lora", 82, 8, 30) for i in (4, 5)},
    6: ("4720", "carol", "ipykernel_launcher.py", 0, 0, 0),
    **{i: ("4731", "dave", "train_vit.py --epochs 90", 60, 12, 45) for i in (7, 8, 9)},
    10: ("4731", "dave", "train_vit.py --epochs 90", 55, 10, 45),
    **{i: ("", "erin", "serve.py --port 8000", 30, 15, 20) for i in (11, 12)},
}


class DemoSource:
    """Simulated fleet; ``simulated`` is True so the UI says SIMULATED.

    ``live=False`` emits the backfilled history synchronously inside
    :meth:`start` and then nothing: with a fixed ``seed`` and ``clock`` the
    screens are the same every run (tests and screenshots use this).
    """

    def __init__(self, interval_s: float = 1.0, *, hosts: int = 16, gpus_per_host: int = 8,
                 seed: int = 42, clock: Callable[[], float] = time.time,
                 backfill_s: float = 300.0, live: bool = True) -> None:
        self.interval_s = max(0.05, float(interval_s))
        self.hosts = hosts
        self.gpus_per_host = gpus_per_host
        self.seed = seed
        self.clock = clock
        self.backfill_s = backfill_s
        self.live = live
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._epoch = math.floor(clock() / 3600) * 3600 - 3 * 3600  # jobs began ~3 h ago

    @property
    def name(self) -> str:
        """``demo``."""
        return "demo"

    @property
    def simulated(self) -> bool:
        """Always: this is made-up data."""
        return True

    def host_name(self, h: int) -> str:
        """The name of host ``h`` (0-based): ``gpu-node01``..."""
        return f"gpu-node{h + 1:02d}"

    def _tick(self, t: float) -> int:
        return math.floor(t / self.interval_s)

    def history(self, until: float | None = None) -> list[SampleEvent]:
        """Backfill: every host's samples over ``backfill_s`` up to ``until``, oldest first."""
        end = self._tick(self.clock() if until is None else until)
        first = end - max(0, math.ceil(self.backfill_s / self.interval_s))
        return [SampleEvent(self.sample(h, k * self.interval_s), backfill=True)
                for k in range(first, end) for h in range(self.hosts)]

    def start(self, emit: Emit) -> None:
        """Emit history, then a sample per host per interval (in a thread when live)."""
        if not self.live:
            for e in self.history():
                emit(e)
            now = self._tick(self.clock()) * self.interval_s
            for h in range(self.hosts):
                emit(SampleEvent(self.sample(h, now)))
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, args=(emit,), name="gpulens-demo",
                                        daemon=True)
        self._thread.start()

    def _run(self, emit: Emit) -> None:
        for e in self.history():
            if self._stop.is_set():
                return
            emit(e)
        last = -1
        while not self._stop.is_set():
            k = self._tick(self.clock())
            if k > last:
                for h in range(self.hosts):
                    emit(SampleEvent(self.sample(h, k * self.interval_s)))
                last = k
            wait = (k + 1) * self.interval_s - self.clock()
            self._stop.wait(min(self.interval_s, max(0.01, wait)))

    def stop(self) -> None:
        """Stop the thread; idempotent."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
            self._thread = None

    def sample(self, h: int, t: float) -> m.HostSample:
        """The sample of host ``h`` at time ``t`` (a pure function of seed, h, t)."""
        rng = random.Random(f"{self.seed}:{h}:{self._tick(t)}")
        role = _ROLES.get(h % 16)
        gpus: list[m.GpuSample] = []
        jobs: list[m.JobInfo] = []
        for g in range(self.gpus_per_host):
            util, held = self._util(h, g, t, rng, role)
            pid = 10_000 + h * 100 + g
            mem_used = int((0.55 + 0.35 * min(1.0, held)) * GPU_MEM) if held else 600 * 1024**2
            gpus.append(self._gpu(h, g, util, mem_used, pid if held else None, rng, t))
            if role and held and (role[0] or g == 0):
                jobs.append(self._job(h, g, role, pid, mem_used, rng))
        busy = sum(g.utilization_percent or 0 for g in gpus) / max(1, len(gpus))
        cache = (m.CacheSample() if h % 16 == 8 else
                 m.CacheSample(l2_hit_ratio=0.62 + rng.random() * 0.1, l3_hit_ratio=0.41 + rng.random() * 0.1,
                             mem_bandwidth_bytes_per_s=(20 + busy) * 1e9 * (0.9 + rng.random() * 0.2)))
        unavailable = ({"cache.l2_hit_ratio": NO_COUNTERS, "cache.l3_hit_ratio": NO_COUNTERS,
                        "cache.mem_bandwidth_bytes_per_s": NO_COUNTERS} if h % 16 == 8 else {})
        net = (busy * 0.08 + rng.random() * 0.5) * 1e9
        return m.HostSample(
            host=self.host_name(h), time=t,
            cpu=m.CpuSample(total_percent=min(100.0, 3 + busy * 0.35 + rng.random() * 4), count=128,
                          load_avg_1m=2 + busy * 0.4),
            memory=m.MemorySample(total_bytes=2048 * GIB, used_bytes=int((180 + busy * 9) * GIB),
                                available_bytes=int((1868 - busy * 9) * GIB)),
            network=m.NetworkSample(rx_bytes_per_s=net, tx_bytes_per_s=net * 0.97),
            storage=m.StorageSample(read_bytes_per_s=(5 + rng.random() * 40) * 1e6 * (1 + busy / 20),
                                  write_bytes_per_s=(2 + rng.random() * 8) * 1e6),
            cache=cache, gpus=tuple(gpus), jobs=tuple(jobs), unavailable=unavailable, simulated=True)

    def _util(self, h: int, g: int, t: float, rng: random.Random,
              role: tuple[str, str, str, float, float, int] | None) -> tuple[float, float]:
        if role is None:
            return 0.0, 0.0
        key, _, _, base, noise, period = role
        if key == "4720":
            return (0.0, 0.5) if g < 4 else (0.0, 0.0)
        if not key and g > 0:
            return 0.0, 0.0
        phase = (t + h * 7) % period if period else 0
        if key == "4731":
            u = base * (0.6 + 0.8 * phase / period)
        elif phase < period * 0.13:
            u = base * 0.18  # evaluation / checkpoint dip
        else:
            u = base
        return max(0.0, min(100.0, u + rng.gauss(0, noise))), 1.0

    def _gpu(self, h: int, g: int, util: float, mem_used: int, pid: int | None,
             rng: random.Random, t: float = 0.0) -> m.GpuSample:
        throttled = h % 16 == 4 and g == 2
        lost = h % 16 == 10 and g == 3
        if lost:
            why = "GPU is lost (XID 79: fallen off the bus)"
            xid = (79,) if rng.random() < 0.05 else ()
            return m.GpuSample(index=g, name="NVIDIA H100 80GB HBM3", uuid=f"GPU-de000000-{h:04d}-{g:04d}",
                             xid_events=xid, unavailable={k: why for k in (
                                 "utilization_percent", "mem_used_bytes", "power_w", "temperature_c",
                                 "sm_activity_percent")})
        if throttled:
            util *= 0.7
        sm = util * (0.78 + rng.random() * 0.08)
        return m.GpuSample(
            index=g, name="NVIDIA H100 80GB HBM3", uuid=f"GPU-de000000-{h:04d}-{g:04d}",
            utilization_percent=round(util, 1), memory_utilization_percent=round(util * 0.45, 1),
            mem_used_bytes=mem_used, mem_total_bytes=GPU_MEM,
            power_w=round(72 + util * 6.2 + rng.random() * 10, 1), power_limit_w=700.0,
            temperature_c=round((89 if throttled else 33) + util * 0.3 * (0 if throttled else 1), 1),
            sm_clock_mhz=1410 if throttled else 1980, mem_clock_mhz=2619,
            pcie_rx_bytes_per_s=util * 2e8, pcie_tx_bytes_per_s=util * 1.5e8,
            nvlink_rx_bytes_per_s=util * 3e9, nvlink_tx_bytes_per_s=util * 3e9,
            ecc_corrected=0, ecc_uncorrected=0,
            throttle_reasons=("sw_thermal_slowdown", "hw_thermal_slowdown") if throttled else (),
            sm_activity_percent=round(sm, 1), sm_occupancy_percent=round(sm * 0.55, 1),
            dram_bw_util_percent=round(util * 0.5, 1), tensor_active_percent=round(sm * 0.6, 1),
            nvlink_total_bytes_per_s=util * 6e9,
            # A counter: the GPU's mean draw since the demo's epoch, so it only grows.
            energy_joules=round(max(0.0, t - self._epoch) * (110.0 + (h % 16) * 9.0), 1),
            processes=(m.GpuProcess(pid=pid, used_memory_bytes=mem_used - 500 * 1024**2),) if pid else (),
        )

    def _job(self, h: int, g: int, role: tuple[str, str, str, float, float, int], pid: int,
             mem_used: int, rng: random.Random) -> m.JobInfo:
        key, user, cmd, *_ = role
        launcher = "torchrun/" if key and key != "4720" else ""
        return m.JobInfo(
            pid=pid, tree_id=f"systemd/slurmstepd/bash/{launcher}python3.11",
            cmdline=f"python3.11 {cmd}" + (f" --local-rank {g}" if launcher else ""),
            user=user, start_time=self._epoch + (h % 16) * 600.0,
            cpu_percent=round(95 + rng.random() * 10 if launcher else 1 + rng.random() * 4, 1),
            rss_bytes=int((12 + rng.random()) * GIB),
            gpu_mem_bytes={str(g): mem_used - 500 * 1024**2},
            job_key=key or None, ancestors=(1, 900 + h, 901 + h))
