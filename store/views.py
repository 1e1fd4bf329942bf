"""Read-only views the store computes for the UI (pure data, no behaviour).

Also the metric names the store records, and how each is read from a sample.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter

from gpulens.core.model import GpuSample, HostSample, JobInfo, Workload
from gpulens.core.workload import describe

NAN = float("nan")

HOST_METRICS: tuple[str, ...] = (
    "cpu.total_percent",
    "memory.used_percent",
    "network.rx_bytes_per_s",
    "network.tx_bytes_per_s",
    "storage.read_bytes_per_s",
    "storage.write_bytes_per_s",
    "cache.l2_hit_ratio",
    "cache.l3_hit_ratio",
    "cache.mem_bandwidth_bytes_per_s",
    "gpu.utilization_percent",
    "gpu.sm_activity_percent",
    "gpu.mem_used_percent",
    "gpu.power_w",
    "gpu.temperature_c",
    "gpu.sm_clock_mhz",
    "gpu.pcie_bytes_per_s",
    "gpu.nvlink_bytes_per_s",
    "network.total_bytes_per_s",
    "storage.total_bytes_per_s",
)
"""Per-host series; the ``gpu.*`` ones are the host's mean (power, PCIe, NVLink: sum; temperature: the
hottest GPU's) over its GPUs, and
the totals rx + tx and read + write: each sample's own, so a window's min, max and "now" of a host
figure are the raw samples' (never the extremes of one GPU, nor a sum of two maxima)."""

GPU_METRICS: tuple[str, ...] = (
    "gpu.utilization_percent",
    "gpu.sm_activity_percent",
    "gpu.mem_used_percent",
    "gpu.power_w",
    "gpu.temperature_c",
    "gpu.sm_clock_mhz",
    "gpu.pcie_bytes_per_s",
    "gpu.nvlink_bytes_per_s",
    "gpu.sm_occupancy_percent",
    "gpu.tensor_active_percent",
    "gpu.dram_bw_util_percent",
    "gpu.mem_clock_mhz",
    "gpu.energy_rate_w",
)
"""Per-GPU series (PCIe and NVLink: rx + tx; energy: the energy counter's J/s between samples)."""

ENERGY_AT = GPU_METRICS.index("gpu.energy_rate_w")
"""Where the energy rate sits in a GPU's values; :func:`gpu_block_values` leaves it NaN."""

JOB_METRICS: tuple[str, ...] = (
    "job.gpu_utilization_percent",
    "job.gpu_mem_bytes",
    "job.cpu_percent",
)
"""Per (host, job) series: mean utilization of the job's GPUs, their memory, CPU %."""

SUMMED = frozenset({"gpu.power_w", "gpu.energy_rate_w", "gpu.pcie_bytes_per_s", "gpu.nvlink_bytes_per_s",
                    "network.total_bytes_per_s", "storage.total_bytes_per_s",
                    "job.gpu_mem_bytes", "job.cpu_percent", "proc.gpu_mem_bytes"})
"""Metrics added (not averaged) when several GPUs or hosts are combined."""

IDLE_UTIL_PERCENT = 1.0
"""A GPU held by a job whose window-mean utilization is below this is 'idle-held'."""
BUSY_UTIL_PERCENT = 10.0
"""A GPU whose window-mean utilization is at least this counts as busy."""


def gpu_mem_percent(g: GpuSample) -> float | None:
    """Used / total GPU memory in %, or None when either is unknown."""
    if g.mem_used_bytes is None or not g.mem_total_bytes:
        return None
    return 100.0 * g.mem_used_bytes / g.mem_total_bytes


def gpu_block_values(gpus: Sequence[GpuSample]) -> list[float]:
    """The GPUs' values in :data:`GPU_METRICS` order, GPU after GPU (NaN = unavailable)."""
    # Inlined rather than one call per value: this runs for every GPU of every sample.
    out: list[float] = []
    for g in gpus:
        u, sm, used, total = g.utilization_percent, g.sm_activity_percent, g.mem_used_bytes, g.mem_total_bytes
        p, t, clk = g.power_w, g.temperature_c, g.sm_clock_mhz
        prx, ptx, nrx, ntx = g.pcie_rx_bytes_per_s, g.pcie_tx_bytes_per_s, g.nvlink_rx_bytes_per_s, \
            g.nvlink_tx_bytes_per_s
        occ, ten, dram, mclk = g.sm_occupancy_percent, g.tensor_active_percent, g.dram_bw_util_percent, \
            g.mem_clock_mhz
        out += (
            NAN if u is None else float(u),
            NAN if sm is None else float(sm),
            100.0 * used / total if used is not None and total else NAN,
            NAN if p is None else float(p),
            NAN if t is None else float(t),
            NAN if clk is None else float(clk),
            NAN if prx is None or ptx is None else float(prx) + float(ptx),
            NAN if nrx is None or ntx is None else float(nrx) + float(ntx),
            NAN if occ is None else float(occ),
            NAN if ten is None else float(ten),
            NAN if dram is None else float(dram),
            NAN if mclk is None else float(mclk),
            NAN,  # the energy rate needs the previous sample: fill_energy_rates
        )
    return out


EnergyPoint = tuple[float, tuple[int, ...], list["float | None"]]
"""(time, GPU indices, their energy counters) of a host's newest sample with a counter."""

_ENERGY = attrgetter("energy_joules")


def fill_energy_rates(prev: EnergyPoint | None, t: float, order: tuple[int, ...], gpus: Sequence[GpuSample],
                      block: list[float]) -> EnergyPoint | None:
    """Put each GPU's energy counter rate (J/s since the previous sample) into ``block``; the new point.

    ``prev`` is what the previous call returned (None at first). The rate
    stays NaN for a GPU's first sample, one after a sample without its
    counter, a sample older than the previous one (a backfill: ``prev`` is
    kept), and a counter that went back (driver reloaded). GPUs are matched
    by index, whatever their order in the sample.
    """
    joules = list(map(_ENERGY, gpus))
    if joules.count(None) == len(joules):
        return prev if prev is not None and t <= prev[0] else None
    if prev is not None:
        if t <= prev[0]:
            return prev
        dt = t - prev[0]
        at = ENERGY_AT
        w = len(GPU_METRICS)
        # The previous counters in this sample's GPU order (by index when the order changed).
        before = prev[2] if prev[1] == order else list(map(dict(zip(prev[1], prev[2], strict=True)).get, order))
        for j, p in zip(joules, before, strict=True):
            if j is not None and p is not None and j >= p:
                block[at] = (j - p) / dt
            at += w
    return t, order, joules


def _mean(vals: list[float]) -> float:
    known = [v for v in vals if v == v]  # v == v: not NaN
    return sum(known) / len(known) if known else NAN


def _sum(vals: list[float]) -> float:
    known = [v for v in vals if v == v]
    return sum(known) if known else NAN


def _max(vals: list[float]) -> float:
    known = [v for v in vals if v == v]
    return max(known) if known else NAN


def host_values_flat(s: HostSample, gpu_block: list[float]) -> list[float]:
    """The host's values in :data:`HOST_METRICS` order (NaN = unavailable), from the GPUs' values as
    :func:`gpu_block_values` gives them."""
    mem, cpu, net, sto, cache = s.memory, s.cpu, s.network, s.storage, s.cache
    used, total = mem.used_bytes, mem.total_bytes
    w = len(GPU_METRICS)
    util = sm = gmem = power = temp = clock = pcie = nvlink = NAN
    if gpu_block:
        n = len(gpu_block) // w
        util, sm, gmem, power = (sum(gpu_block[0::w]) / n, sum(gpu_block[1::w]) / n, sum(gpu_block[2::w]) / n,
                                 sum(gpu_block[3::w]))
        if (t := util + sm + gmem + power) - t != 0.0:  # a NaN (or inf) among them: of the known values
            util, sm, gmem = _mean(gpu_block[0::w]), _mean(gpu_block[1::w]), _mean(gpu_block[2::w])
            power = _sum(gpu_block[3::w])
        temps = gpu_block[4::w]
        # The hottest GPU, not the mean: one GPU at 89C among seven at 50C must cross the threshold.
        temp = max(temps) if (t := sum(temps)) - t == 0.0 else _max(temps)  # max() is unsure beside a NaN
        clock, pcie, nvlink = sum(gpu_block[5::w]) / n, sum(gpu_block[6::w]), sum(gpu_block[7::w])
        # One at a time: a GPU without NVLink (L4, T4, A10) must not send every sample down the slow path.
        if clock - clock != 0.0:
            clock = _mean(gpu_block[5::w])
        if pcie - pcie != 0.0:
            pcie = _sum(gpu_block[6::w])
        if nvlink - nvlink != 0.0:
            nvlink = _sum(gpu_block[7::w])
    rx = NAN if (v := net.rx_bytes_per_s) is None else float(v)
    tx = NAN if (v := net.tx_bytes_per_s) is None else float(v)
    read = NAN if (v := sto.read_bytes_per_s) is None else float(v)
    write = NAN if (v := sto.write_bytes_per_s) is None else float(v)
    # Inlined _f: this runs for every sample.
    return [
        NAN if (v := cpu.total_percent) is None else float(v),
        100.0 * used / total if used is not None and total else NAN,
        rx,
        tx,
        read,
        write,
        NAN if (v := cache.l2_hit_ratio) is None else float(v),
        NAN if (v := cache.l3_hit_ratio) is None else float(v),
        NAN if (v := cache.mem_bandwidth_bytes_per_s) is None else float(v),
        util,
        sm,
        gmem,
        power,
        temp,
        clock,
        pcie,
        nvlink,
        rx + tx,  # NaN when either is unknown: one direction alone is not the total (n/a, never a guess)
        read + write,
    ]


def gpu_unreadable(sample: HostSample | None) -> str | None:
    """Why a host's sample says nothing of GPU memory (no NVML, no GPU), or None when it reads GPUs.

    A process's GPU memory there is n/a with this reason, never 0 B.
    """
    if sample is None or sample.gpus:
        return None
    return sample.unavailable.get("gpus") or "no GPU on this host"


def job_key(host: str, job: JobInfo) -> str:
    """The key that joins a job's processes: its job key, else ``host:pid``."""
    return job.job_key or f"{host}:{job.pid}"


def job_totals(procs: list[JobInfo], util: Mapping[str, float]) -> tuple[list[float], set[str], int]:
    """One job's values on one host in :data:`JOB_METRICS` order (``util``: GPU utilization by index),
    the GPU indices its processes hold memory on, and the bytes they hold."""
    used: set[str] = set()
    mem = 0
    cpu: list[float] = []
    for p in procs:
        held = p.gpu_mem_bytes
        used.update(held)
        mem += sum(held.values())
        if (c := p.cpu_percent) is not None:
            cpu.append(c)
    utils = [util[i] for i in used if i in util]
    return [_mean(utils), float(mem) if used else NAN, sum(cpu) if cpu else NAN], used, mem


# Where a metric's "unavailable" reason is looked up: (host key, GPU key).
UNAVAILABLE_KEYS: dict[str, tuple[str, ...]] = {
    "cpu.total_percent": ("cpu.total_percent", "cpu"),
    "memory.used_percent": ("memory.used_bytes", "memory"),
    "network.rx_bytes_per_s": ("network.rx_bytes_per_s", "network"),
    "network.tx_bytes_per_s": ("network.tx_bytes_per_s", "network"),
    "storage.read_bytes_per_s": ("storage.read_bytes_per_s", "storage"),
    "storage.write_bytes_per_s": ("storage.write_bytes_per_s", "storage"),
    "network.total_bytes_per_s": ("network.rx_bytes_per_s", "network.tx_bytes_per_s", "network"),
    "storage.total_bytes_per_s": ("storage.read_bytes_per_s", "storage.write_bytes_per_s", "storage"),
    "cache.l2_hit_ratio": ("cache.l2_hit_ratio", "cache"),
    "cache.l3_hit_ratio": ("cache.l3_hit_ratio", "cache"),
    "cache.mem_bandwidth_bytes_per_s": ("cache.mem_bandwidth_bytes_per_s", "cache"),
    "gpu.utilization_percent": ("utilization_percent", "gpus"),
    "gpu.sm_activity_percent": ("sm_activity_percent", "gpus"),
    "gpu.mem_used_percent": ("mem_used_bytes", "gpus"),
    "gpu.power_w": ("power_w", "gpus"),
    "gpu.temperature_c": ("temperature_c", "gpus"),
    "gpu.sm_clock_mhz": ("sm_clock_mhz", "gpus"),
    "gpu.pcie_bytes_per_s": ("pcie_rx_bytes_per_s", "pcie_tx_bytes_per_s", "gpus"),
    "gpu.nvlink_bytes_per_s": ("nvlink_rx_bytes_per_s", "nvlink_tx_bytes_per_s", "gpus"),
    "gpu.sm_occupancy_percent": ("sm_occupancy_percent", "gpus"),
    "gpu.tensor_active_percent": ("tensor_active_percent", "gpus"),
    "gpu.dram_bw_util_percent": ("dram_bw_util_percent", "gpus"),
    "gpu.mem_clock_mhz": ("mem_clock_mhz", "gpus"),
    "gpu.energy_rate_w": ("energy_joules", "gpus"),
}


def unavailable_reason(s: HostSample, metric: str) -> str | None:
    """Why ``metric`` has no value in ``s`` (None when the sample gives no reason)."""
    keys = UNAVAILABLE_KEYS.get(metric, (metric,))
    for k in keys:
        if k in s.unavailable:
            return s.unavailable[k]
    if metric.startswith("gpu."):
        if not s.gpus:
            return s.unavailable.get("gpus", "no GPUs reported")
        for g in s.gpus:
            for k in keys:
                if k in g.unavailable:
                    return g.unavailable[k]
    return None


@dataclass(frozen=True, slots=True)
class WindowStats:
    """One metric over a window: the newest value and the raw samples' mean, min and max.

    ``samples`` values were found in the window; ``covered_s`` is how much
    time they cover (samples x resolution), which a label shows next to the
    figures ("avg over 2m12s of data"). Figures are NaN without data.
    ``combined``: several series were joined (GPUs, hosts), so min/max are
    the extremes of any one of them (sums add them: an upper bound).
    """

    window_s: float
    now: float
    mean: float
    min: float
    max: float
    samples: int
    covered_s: float
    combined: bool = False

    @property
    def empty(self) -> bool:
        """No sample in the window."""
        return self.samples == 0


NO_STATS = WindowStats(0.0, NAN, NAN, NAN, NAN, 0, 0.0)
"""Statistics of a window without data."""


@dataclass(frozen=True, slots=True)
class FleetStats:
    """Headline statistics over a window; percentages are NaN when unknown."""

    window_s: float
    gpu_util_percent: float
    sm_activity_percent: float
    gpu_mem_used_percent: float
    busy_gpus: int
    total_gpus: int
    hosts: int
    hosts_up: int
    jobs: int
    of_hosts: int = 0
    """Every host, when the figures are of those a filter keeps (0: they are of every host)."""


@dataclass(frozen=True, slots=True)
class HostRow:
    """One line of the host table (window means; NaN when unknown)."""

    host: str
    up: bool
    gpus: int
    util_percent: float
    sm_percent: float
    gpu_mem_percent: float
    power_w: float
    cpu_percent: float
    net_bytes_per_s: float
    alerts: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class JobView:
    """A job joined over hosts: its processes and window figures."""

    key: str
    tree_id: str
    user: str
    cmdline: str
    hosts: tuple[str, ...]
    gpus: tuple[tuple[str, str], ...]
    """(host, GPU index) pairs the job's processes hold memory on."""
    util_percent: float
    gpu_mem_bytes: float
    """NaN when none of the job's hosts can read its GPUs (shown as n/a)."""
    cpu_percent: float
    start_time: float
    runtime_s: float
    processes: tuple[tuple[str, JobInfo], ...]

    @property
    def pids(self) -> tuple[int, ...]:
        """The job's process ids (on every host)."""
        return tuple(p.pid for _, p in self.processes)

    @property
    def workload(self) -> Workload | None:
        """Where its first process that says runs (container, pod, Slurm job), or None."""
        return next((p.workload for _, p in self.processes if p.workload is not None), None)

    @property
    def where(self) -> str:
        """Where it runs, for a table cell: ``slurm 4242``, ``pod ns/name``, ``docker 1a2b…`` (``-``: not known)."""
        return describe(self.workload, short=True)


Reducer = Callable[[list[float]], float]
