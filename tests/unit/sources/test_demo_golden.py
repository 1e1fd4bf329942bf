"""The demo's output is pinned: the fast path makes the same samples as ever.

``GOLDEN`` is the sha256 of the samples the demo made before its fast path
(every figure a pure function of seed, host and time bucket; screenshots and
tests depend on it). ``Reference`` is that earlier code, kept here to say where
a difference is. Re-pinned once for issue 29: jobs carry where they run
(``workload``: the keyed jobs are Slurm jobs, erin's servers pods under
containerd, their tree ID ``systemd/containerd-shim-runc-v2/python3.11``), and
each GPU its vendor and the pod or Slurm job it was given (``allocated``); the
Reference below got the same changes and nothing else.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import random
import threading

from gpulens.core import model as m
from gpulens.core.events import SampleEvent, SourceEvent
from gpulens.sources.demo import DemoSource

T0 = 1_700_000_000.0
GOLDEN = "82352db39eeff1f557059fb4493e1940a11e4ed35432930867231dd35884aab6"
TIMES = (T0, T0 + 0.5, T0 + 1.25, T0 + 59.999, T0 + 7200.3, 1_800_000_123.7, 3600.0 * 5, 12.0)


def digest() -> str:
    out = hashlib.sha256()
    for seed, hosts, per_host in ((42, 16, 8), (1, 20, 1), (7, 33, 8), (3, 5, 3)):
        demo = DemoSource(seed=seed, hosts=hosts, gpus_per_host=per_host, clock=lambda: T0,
                          live=False)
        for h in range(hosts):
            for t in TIMES:
                out.update(repr(demo.sample(h, t)).encode())
    for seed, hosts, per_host, interval in ((42, 16, 8, 1.0), (5, 18, 2, 0.5), (9, 3, 8, 2.5)):
        demo = DemoSource(interval_s=interval, seed=seed, hosts=hosts, gpus_per_host=per_host,
                          clock=lambda: T0 + 0.37, live=False, backfill_s=40)
        out.update(repr(demo.history()).encode())
        out.update(repr(demo.history(until=T0 + 1234.9)).encode())
        got: list[SourceEvent] = []
        demo.start(got.append)
        out.update(repr(got).encode())
    return out.hexdigest()


def test_samples_and_history_are_the_pinned_ones() -> None:
    assert digest() == GOLDEN


GIB = 1024**3
GPU_MEM = 80 * GIB
NO_COUNTERS = "perf_event_open: ENOENT (no hardware cache counters in this VM)"
Role = tuple[str, str, str, float, float, int]
ROLES: dict[int, Role] = {
    **{i: ("4711", "alice", "train.py --model llama-13b", 96, 3, 60) for i in range(4)},
    **{i: ("4712", "bob", "finetune.py --lora", 82, 8, 30) for i in (4, 5)},
    6: ("4720", "carol", "ipykernel_launcher.py", 0, 0, 0),
    **{i: ("4731", "dave", "train_vit.py --epochs 90", 60, 12, 45) for i in (7, 8, 9)},
    10: ("4731", "dave", "train_vit.py --epochs 90", 55, 10, 45),
    **{i: ("", "erin", "serve.py --port 8000", 30, 15, 20) for i in (11, 12)},
}


class Reference(DemoSource):
    """The demo as it was written first: plain constructors, one draw at a time."""

    def sample(self, h: int, t: float) -> m.HostSample:
        rng = random.Random(f"{self.seed}:{h}:{self._tick(t)}")
        role = ROLES.get(h % 16)
        gpus: list[m.GpuSample] = []
        jobs: list[m.JobInfo] = []
        for g in range(self.gpus_per_host):
            util, held = self._util(h, g, t, rng, role)
            pid = 10_000 + h * 100 + g
            mem_used = int((0.55 + 0.35 * min(1.0, held)) * GPU_MEM) if held else 600 * 1024**2
            has_job = bool(role and held and (role[0] or g == 0))
            given = self._where(h, g, role[0]) if role and has_job else None
            if given is not None:  # the GPU was given to the job's pod or Slurm job, which knows no task
                given = dataclasses.replace(given, slurm_task=None, ns_pid=None)
            gpus.append(self._gpu(h, g, util, mem_used, pid if held else None, rng, t, given))
            if role and has_job:
                jobs.append(self._job(h, g, role, pid, mem_used, rng))
        busy = sum(g.utilization_percent or 0 for g in gpus) / max(1, len(gpus))
        cache = (m.CacheSample() if h % 16 == 8 else
                 m.CacheSample(l2_hit_ratio=0.62 + rng.random() * 0.1,
                               l3_hit_ratio=0.41 + rng.random() * 0.1,
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
              role: Role | None) -> tuple[float, float]:
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
            u = base * 0.18
        else:
            u = base
        return max(0.0, min(100.0, u + rng.gauss(0, noise))), 1.0

    def _gpu(self, h: int, g: int, util: float, mem_used: int, pid: int | None,
             rng: random.Random, t: float, given: m.Workload | None) -> m.GpuSample:
        throttled = h % 16 == 4 and g == 2
        if h % 16 == 10 and g == 3:
            why = "GPU is lost (XID 79: fallen off the bus)"
            xid = (79,) if rng.random() < 0.05 else ()
            return m.GpuSample(index=g, name="NVIDIA H100 80GB HBM3", uuid=f"GPU-de000000-{h:04d}-{g:04d}",
                               xid_events=xid, unavailable={**{k: why for k in (
                                   "utilization_percent", "mem_used_bytes", "power_w", "temperature_c",
                                   "sm_activity_percent")}, "gpu": why}, allocated=given)
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
            energy_joules=round(77.0 * max(0.0, t - self._epoch) + self._load_watts(h, g) * self._load(h, t), 1),
            processes=(m.GpuProcess(pid=pid, used_memory_bytes=mem_used - 500 * 1024**2),) if pid else (),
            allocated=given,
        )

    @staticmethod
    def _load_watts(h: int, g: int) -> float:
        """What the GPU's load adds to its 77 W idle draw at the role's base utilization."""
        role = ROLES.get(h % 16)
        if role is None or role[0] == "4720" or (not role[0] and g > 0):
            return 0.0
        return 6.2 * role[3] * (0.7 if h % 16 == 4 and g == 2 else 1.0)

    def _load(self, h: int, t: float) -> float:
        """The role's load (utilization / base) summed over the seconds since the epoch, stepwise."""
        role = ROLES.get(h % 16)
        if role is None or t <= self._epoch or not role[5]:
            return max(0.0, t - self._epoch)
        key, period = role[0], role[5]

        def at(x: float) -> float:  # the load's integral over [0, x] of the phase
            if key == "4731":
                return 0.6 * x + 0.4 * x * x / period
            return 0.18 * x if x < 0.13 * period else 0.18 * 0.13 * period + (x - 0.13 * period)

        def upto(s: float) -> float:
            cycles, phase = divmod(s + h * 7, period)
            return cycles * at(period) + at(phase)

        return upto(t) - upto(self._epoch)

    @staticmethod
    def _where(h: int, g: int, key: str) -> m.Workload:
        if key:
            return m.Workload(slurm_job=key, slurm_step="0", slurm_task=str(g), found_by="cgroup")
        # a pod: its UID, container id and name made up from host and GPU
        return m.Workload(runtime="containerd", container_id=(f"{h:02x}{g:02x}" + "c0ffee") * 8,
                          pod_uid=f"5e1f{h:04x}-0000-4000-8000-{g:012x}", qos="burstable",
                          namespace="llm-serving", pod=f"vllm-{h % 16 - 11}", container="vllm", ns_pid=1,
                          found_by="cgroup")

    def _job(self, h: int, g: int, role: Role, pid: int, mem_used: int,
             rng: random.Random) -> m.JobInfo:
        key, user, cmd, *_ = role
        launcher = "torchrun/" if key and key != "4720" else ""
        where = self._where(h, g, key)
        return m.JobInfo(
            pid=pid, tree_id=f"systemd/slurmstepd/bash/{launcher}python3.11" if key
            else "systemd/containerd-shim-runc-v2/python3.11",
            cmdline=f"python3.11 {cmd}" + (f" --local-rank {g}" if launcher else ""),
            user=user, start_time=self._epoch + (h % 16) * 600.0,
            cpu_percent=round(95 + rng.random() * 10 if launcher else 1 + rng.random() * 4, 1),
            rss_bytes=int((12 + rng.random()) * GIB),
            gpu_mem_bytes={} if h % 16 == 10 and g == 3 else {str(g): mem_used - 500 * 1024**2},
            job_key=key or None, ancestors=(1, 900 + h, 901 + h), workload=where)


def test_samples_equal_the_reference_field_by_field() -> None:
    for seed, hosts, per_host in ((42, 16, 8), (11, 35, 8), (2, 17, 1), (5, 6, 5), (4, 3, 0)):
        fast = DemoSource(seed=seed, hosts=hosts, gpus_per_host=per_host, clock=lambda: T0)
        ref = Reference(seed=seed, hosts=hosts, gpus_per_host=per_host, clock=lambda: T0)
        for h in range(hosts):
            for k in range(0, 400, 7):
                t = T0 - 3 * 3600 + k * 37.3
                got, want = fast.sample(h, t), ref.sample(h, t)
                assert type(got) is m.HostSample
                for a, b in zip(got.gpus, want.gpus, strict=True):
                    assert type(a) is m.GpuSample and a == b and repr(a) == repr(b)
                assert got.jobs == want.jobs and got == want and repr(got) == repr(want)
    # The reference pins the digest too: the two agree on everything the digest covers.
    assert Reference(seed=42, clock=lambda: T0, live=False, backfill_s=40).history() == \
        DemoSource(seed=42, clock=lambda: T0, live=False, backfill_s=40).history()


def test_live_thread_emits_each_tick_as_one_batch_of_every_host() -> None:
    """All 16 samples of a tick are made before the first is emitted (the app then wakes once)."""
    now = [T0 + 0.2]
    demo = DemoSource(seed=3, clock=lambda: now[0], backfill_s=5)
    made: list[int] = []
    inner = demo.sample

    def sample(h: int, t: float) -> m.HostSample:
        made.append(h)
        return inner(h, t)

    demo.sample = sample  # type: ignore[method-assign]
    emitted: list[tuple[int, SampleEvent]] = []
    done = threading.Event()

    def emit(e: SourceEvent) -> None:
        assert isinstance(e, SampleEvent)
        emitted.append((len(made), e))
        live = [x for _, x in emitted if not x.backfill]
        if len(live) == 16:
            now[0] += 1.0  # the next tick's bucket
        if len(live) == 32:
            demo._stop.set()
            done.set()

    thread = threading.Thread(target=demo._run, args=(emit,), daemon=True)
    thread.start()
    assert done.wait(30)
    thread.join(5)
    backfill = [x for x in emitted if x[1].backfill]
    live = [x for x in emitted if not x[1].backfill]
    assert len(backfill) == 5 * 16 and len(live) == 32
    for tick in (0, 1):
        batch = live[tick * 16:(tick + 1) * 16]
        # every host's sample was made before the batch's first emit
        assert {n for n, _ in batch} == {len(backfill) + 16 * (tick + 1)}
        t = math.floor(T0 + 0.2) + tick
        assert [e.sample for _, e in batch] == [inner(h, t) for h in range(16)]
