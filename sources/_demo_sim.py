"""The demo fleet's figures: one host's sample at one time, cheaply.

What never changes for a (host, GPU) — names, UUIDs, PIDs, memory held, process
lists, the jobs' command lines — is worked out once per host (:func:`host_plan`);
each tick then only draws the random numbers, in the same order as ever, and
fills the frozen samples through :func:`~gpulens.core.makers.fast_builder`.
Every figure is a pure function of (seed, host, time bucket): the tests pin a
digest of the output, so a change here that moves one digit fails them.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from math import cos, log, pi, sin, sqrt

from gpulens.core import model as m
from gpulens.core.makers import fast_builder, field_names
from gpulens.sources._demo_fast import round1

GIB = 1024**3
MIB = 1024**2
GPU_MEM = 80 * GIB
GPU_NAME = "NVIDIA H100 80GB HBM3"
NO_COUNTERS = "perf_event_open: ENOENT (no hardware cache counters in this VM)"
LOST = "GPU is lost (XID 79: fallen off the bus)"
_LOST_FIELDS = ("utilization_percent", "mem_used_bytes", "power_w", "temperature_c",
                "sm_activity_percent")
_LOST_REASONS = {**dict.fromkeys(_LOST_FIELDS, LOST), "gpu": LOST}
"""As the NVML collector reports a lost GPU (``unavailable["gpu"]``), with the fields' own reasons too."""
_NO_CACHE_FIELDS = ("cache.l2_hit_ratio", "cache.l3_hit_ratio", "cache.mem_bandwidth_bytes_per_s")
_THROTTLES = ("sw_thermal_slowdown", "hw_thermal_slowdown")
_XID79 = (79,)
_NO_CACHE = m.CacheSample()
_TWOPI = 2.0 * pi

Role = tuple[str, str, str, float, float, int]
"""(job key, user, command, util base, util noise, period s)."""
# role of host (index % 16)
ROLES: dict[int, Role] = {
    **{i: ("4711", "alice", "train.py --model llama-13b", 96, 3, 60) for i in range(4)},
    **{i: ("4712", "bob", "finetune.py --lora", 82, 8, 30) for i in (4, 5)},
    6: ("4720", "carol", "ipykernel_launcher.py", 0, 0, 0),
    **{i: ("4731", "dave", "train_vit.py --epochs 90", 60, 12, 45) for i in (7, 8, 9)},
    10: ("4731", "dave", "train_vit.py --epochs 90", 55, 10, 45),
    **{i: ("", "erin", "serve.py --port 8000", 30, 15, 20) for i in (11, 12)},
}

# What a GPU's utilization is: none, held at 0 % (the idle notebook), or the role's load.
IDLE, HELD, BUSY = 0, 1, 2

JobPlan = tuple[int, str, str, str, float, bool, str, int, "str | None", tuple[int, ...], "m.Workload"]
"""(pid, tree_id, cmdline, user, start_time, launched by torchrun, GPU index, GPU bytes,
job key, ancestors, workload): a job's fields that never change."""


def demo_workload(h: int, g: int, key: str) -> m.Workload:
    """Where a demo job runs: the keyed jobs are Slurm jobs (step 0, a task per GPU), erin's servers are pods."""
    if key:
        return m.Workload(slurm_job=key, slurm_step="0", slurm_task=str(g), found_by="cgroup")
    return m.Workload(runtime="containerd", container_id=f"{h:02x}{g:02x}c0ffee" * 8, found_by="cgroup",
                      pod_uid=f"5e1f{h:04x}-0000-4000-8000-{g:012x}", qos="burstable", namespace="llm-serving",
                      pod=f"vllm-{h % 16 - 11}", container="vllm", ns_pid=1)
GpuPlan = tuple[int, int, bool, bool, str, int, "tuple[m.GpuProcess, ...]", "JobPlan | None", float, "m.Workload | None"]
"""(index, IDLE/HELD/BUSY, lost, throttled, uuid, memory used, processes, job, the W its load adds
to the idle draw at the role's base load (0 unless busy): its energy counter integrates the power
it draws, ``IDLE_W`` plus that times the load's cycle), the pod or Slurm job it was given to)."""

IDLE_W = 77.0
"""The mean power of a GPU at 0 %: ``72 + rand() * 10``."""


@dataclass(frozen=True, slots=True)
class HostPlan:
    """What never changes about one simulated host."""

    h: int
    name: str
    role: Role | None
    no_cache: bool
    gpus: tuple[GpuPlan, ...]


_GPU_FIELDS = (
    "index", "name", "uuid", "utilization_percent", "memory_utilization_percent",
    "mem_used_bytes", "mem_total_bytes", "power_w", "power_limit_w", "temperature_c",
    "sm_clock_mhz", "mem_clock_mhz", "pcie_rx_bytes_per_s", "pcie_tx_bytes_per_s",
    "nvlink_rx_bytes_per_s", "nvlink_tx_bytes_per_s", "ecc_corrected", "ecc_uncorrected",
    "xid_events", "throttle_reasons", "sm_activity_percent", "sm_occupancy_percent",
    "dram_bw_util_percent", "processes", "unavailable", "tensor_active_percent",
    "nvlink_total_bytes_per_s", "energy_joules", "vendor", "allocated")
_JOB_FIELDS = ("pid", "tree_id", "cmdline", "user", "start_time", "cpu_percent", "rss_bytes",
               "gpu_mem_bytes", "job_key", "ancestors", "kineto_polling", "workload")
_HOST_FIELDS = ("host", "time", "cpu", "memory", "network", "storage", "cache", "infiniband",
                "gpus", "jobs", "unavailable", "simulated")
# The tuples below are written in these orders; a model change must show here first.
for _cls, _names in ((m.GpuSample, _GPU_FIELDS), (m.JobInfo, _JOB_FIELDS),
                     (m.HostSample, _HOST_FIELDS)):
    if field_names(_cls) != _names:
        raise ImportError(f"the demo's {_cls.__name__} fields are out of date: {field_names(_cls)}")

_gpu = fast_builder(m.GpuSample)
_job = fast_builder(m.JobInfo)
_host = fast_builder(m.HostSample)
_cpu = fast_builder(m.CpuSample)
_memory = fast_builder(m.MemorySample)
_network = fast_builder(m.NetworkSample)
_storage = fast_builder(m.StorageSample)
_cache = fast_builder(m.CacheSample)


def host_plan(h: int, gpus_per_host: int, epoch: int, name: str) -> HostPlan:
    """The constant part of host ``h`` (0-based) of a demo whose jobs began at ``epoch``."""
    role = ROLES.get(h % 16)
    gpus = tuple(_gpu_plan(h, g, role, epoch) for g in range(gpus_per_host))
    return HostPlan(h=h, name=name, role=role, no_cache=h % 16 == 8, gpus=gpus)


def _gpu_kind(role: Role | None, g: int) -> int:
    """IDLE, HELD or BUSY: the notebook holds its host's first four GPUs; keyed jobs use every GPU, others GPU 0."""
    if role is None:
        return IDLE
    key = role[0]
    if key == "4720":
        return HELD if g < 4 else IDLE
    if key or g == 0:
        return BUSY
    return IDLE


def _gpu_plan(h: int, g: int, role: Role | None, epoch: int) -> GpuPlan:
    """What never changes about GPU ``g`` of host ``h``: its load kind, memory, process and job."""
    kind = _gpu_kind(role, g)
    held = 0.5 if kind == HELD else 1.0 if kind == BUSY else 0.0
    pid = 10_000 + h * 100 + g
    mem_used = int((0.55 + 0.35 * min(1.0, held)) * GPU_MEM) if held else 600 * MIB
    processes = (m.GpuProcess(pid=pid, used_memory_bytes=mem_used - 500 * MIB),) if held else ()
    job: JobPlan | None = None
    if role is not None and held and (role[0] or g == 0):
        job = _job_plan(h, g, role, pid, mem_used - 500 * MIB, epoch)
    throttled = h % 16 == 4 and g == 2
    watts = 0.0
    if kind == BUSY and role is not None:  # power drawn: 72 + util x 6.2 + rand() x 10
        watts = 6.2 * role[3] * (0.7 if throttled else 1.0)
    given = None if job is None else replace(job[10], slurm_task=None, ns_pid=None)
    return (g, kind, h % 16 == 10 and g == 3, throttled,
            f"GPU-de000000-{h:04d}-{g:04d}", mem_used, processes, job, watts, given)


def _job_plan(h: int, g: int, role: Role, pid: int, gpu_bytes: int, epoch: int) -> JobPlan:
    """The job on GPU ``g``: torchrun ranks for the Slurm jobs, one process for the notebook and the pods."""
    key, user, cmd, *_ = role
    launcher = "torchrun/" if key and key != "4720" else ""
    tree = f"systemd/slurmstepd/bash/{launcher}python3.11" if key else "systemd/containerd-shim-runc-v2/python3.11"
    return (pid, tree, f"python3.11 {cmd}" + (f" --local-rank {g}" if launcher else ""),
            user, epoch + (h % 16) * 600.0, bool(launcher), str(g), gpu_bytes,
            key or None, (1, 900 + h, 901 + h), demo_workload(h, g, key))


def load_integral(role: tuple[str, str, str, float, float, int] | None, h: int, t: float) -> float:
    """An antiderivative in ``t`` of a role's load (utilization over its base), in seconds: the load
    over a span is the difference of two. train_vit ramps 0.6-1.4 x base over its cycle; the others
    dip to 0.18 x base for its first 13 %."""
    if role is None or not role[5]:
        return t
    period = role[5]
    cycles, phase = divmod(t + h * 7, period)
    if role[0] == "4731":
        whole, part = float(period), 0.6 * phase + 0.4 * phase * phase / period
    else:
        dip = 0.13 * period
        whole = 0.18 * dip + (period - dip)
        part = 0.18 * phase if phase < dip else 0.18 * dip + (phase - dip)
    return cycles * whole + part


class _Gauss:
    """``rng.gauss(0, 1)`` inlined (as random.py has it): two at a time, from ``rand``."""

    __slots__ = ("next", "rand")

    def __init__(self, rand: Callable[[], float]) -> None:
        self.rand = rand
        self.next: float | None = None

    def __call__(self) -> float:
        z = self.next
        self.next = None
        if z is None:
            x2pi = self.rand() * _TWOPI
            g2rad = sqrt(-2.0 * log(1.0 - self.rand()))
            z = cos(x2pi) * g2rad
            self.next = sin(x2pi) * g2rad
        return z


def _role_util(role: Role | None, h: int, t: float) -> tuple[float, float]:
    """(utilization before noise, noise) of a busy GPU of host ``h`` at ``t``; (0, 0) without a role."""
    if role is None:
        return 0.0, 0.0
    key, _, _, base, noise, period = role
    phase = (t + h * 7) % period if period else 0
    if key == "4731":
        return base * (0.6 + 0.8 * phase / period), noise
    if phase < period * 0.13:
        return base * 0.18, noise  # evaluation / checkpoint dip
    return base, noise


def host_sample(plan: HostPlan, seed: str, t: float, epoch: int) -> m.HostSample:
    """Host ``plan.h``'s sample at ``t``, drawing from a ``random.Random(seed)``."""
    rand = random.Random(seed).random
    gauss = _Gauss(rand)
    role = plan.role
    u, noise = _role_util(role, plan.h, t)
    # A counter of the power drawn since the demo's epoch (its noise's mean), so it only grows.
    span = max(0.0, t - epoch)
    load = load_integral(role, plan.h, t) - load_integral(role, plan.h, epoch) if t > epoch else 0.0
    gpus: list[m.GpuSample] = []
    jobs: list[m.JobInfo] = []
    utils: list[float] = []
    for g, kind, lost, throttled, uuid, mem_used, processes, job, watts, given in plan.gpus:
        energy = round(IDLE_W * span + watts * load, 1)
        util = 0.0
        if kind == BUSY:
            util = max(0.0, min(100.0, u + (0 + gauss() * noise)))  # u + rng.gauss(0, noise)
        if lost:
            gpus.append(_gpu(g, GPU_NAME, uuid, None, None, None, None, None, None, None,
                              None, None, None, None, None, None, None, None,
                              _XID79 if rand() < 0.05 else (), (), None, None, None, (),
                              _LOST_REASONS, None, None, None, "nvidia", given))
            utils.append(0)
        elif kind == BUSY:
            sample, up = _busy_gpu(rand, g, uuid, util, throttled, mem_used, processes, energy, given)
            gpus.append(sample)
            utils.append(up or 0)
        else:
            gpus.append(_idle_gpu(rand, g, uuid, throttled, mem_used, processes, energy, given))
            utils.append(0)
        if job is not None:
            jobs.append(_job_sample(rand, job, lost))
    return _host_sample(plan, rand, t, sum(utils) / max(1, len(utils)), gpus, jobs)


def _busy_gpu(rand: Callable[[], float], g: int, uuid: str, util: float, throttled: bool, mem_used: int,
              processes: tuple[m.GpuProcess, ...], energy: float,
              given: m.Workload | None) -> tuple[m.GpuSample, float]:
    """A busy GPU's sample at ``util`` (before a throttled GPU's 30 % less), and its utilization as shown."""
    if throttled:
        util *= 0.7
    sm = util * (0.78 + rand() * 0.08)
    up = round1(util)
    nvlink = util * 3e9
    return _gpu(
        g, GPU_NAME, uuid, up, round1(util * 0.45), mem_used, GPU_MEM,
        round1(72 + util * 6.2 + rand() * 10), 700.0,
        89.0 if throttled else round1(33 + util * 0.3),
        1410 if throttled else 1980, 2619, util * 2e8, util * 1.5e8, nvlink, nvlink, 0, 0,
        (), _THROTTLES if throttled else (), round1(sm), round1(sm * 0.55),
        round1(util * 0.5), processes, {}, round1(sm * 0.6), util * 6e9, energy, "nvidia", given), up


def _idle_gpu(rand: Callable[[], float], g: int, uuid: str, throttled: bool, mem_used: int,
              processes: tuple[m.GpuProcess, ...], energy: float, given: m.Workload | None) -> m.GpuSample:
    """A GPU at 0 %: every figure that scales with utilization is 0.0; the draws still happen."""
    rand()
    return _gpu(
        g, GPU_NAME, uuid, 0.0, 0.0, mem_used, GPU_MEM, round1(72.0 + rand() * 10), 700.0,
        89.0 if throttled else 33.0, 1410 if throttled else 1980, 2619, 0.0, 0.0, 0.0, 0.0,
        0, 0, (), _THROTTLES if throttled else (), 0.0, 0.0, 0.0, processes, {}, 0.0, 0.0,
        energy, "nvidia", given)


def _job_sample(rand: Callable[[], float], job: JobPlan, lost: bool) -> m.JobInfo:
    """The job's sample: its constant fields and this tick's CPU and RSS draws."""
    pid, tree_id, cmdline, user, start, launcher, gkey, gmem, jkey, ancestors, workload = job
    # A lost GPU lists no processes (NVML cannot read it): its job holds no memory there.
    return _job(
        pid, tree_id, cmdline, user, start,
        round1(95 + rand() * 10 if launcher else 1 + rand() * 4),
        int((12 + rand()) * GIB), {} if lost else {gkey: gmem}, jkey, ancestors, False, workload)


def _host_sample(plan: HostPlan, rand: Callable[[], float], t: float, busy: float,
                 gpus: list[m.GpuSample], jobs: list[m.JobInfo]) -> m.HostSample:
    """The host's sample around its GPUs and jobs, its figures following ``busy`` (the mean utilization)."""
    if plan.no_cache:
        cache = _NO_CACHE
        unavailable = dict.fromkeys(_NO_CACHE_FIELDS, NO_COUNTERS)
    else:
        cache = _cache(0.62 + rand() * 0.1, 0.41 + rand() * 0.1,
                       (20 + busy) * 1e9 * (0.9 + rand() * 0.2))
        unavailable = {}
    net = (busy * 0.08 + rand() * 0.5) * 1e9
    cpu = _cpu(min(100.0, 3 + busy * 0.35 + rand() * 4), (), 2 + busy * 0.4, 128)
    memory = _memory(2048 * GIB, int((180 + busy * 9) * GIB), int((1868 - busy * 9) * GIB), None)
    network = _network(net, net * 0.97, ())
    storage = _storage((5 + rand() * 40) * 1e6 * (1 + busy / 20), (2 + rand() * 8) * 1e6, ())
    return _host(plan.name, t, cpu, memory, network, storage, cache, (), tuple(gpus),
                 tuple(jobs), unavailable, True)
