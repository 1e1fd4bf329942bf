"""The sample model: frozen, slotted dataclasses that cross every boundary.

Units are in field names (``_bytes``, ``_bytes_per_s``, ``_percent``, ``_w``,
``_c``, ``_mhz``). A value that could not be read is ``None``; the reason is
recorded in the ``unavailable`` map of the object that owns it
(``HostSample.unavailable`` for host metrics, ``GpuSample.unavailable`` for
one GPU's fields), keyed by the field's dotted name, e.g.
``"cache.l2_hit_ratio" -> "perf_event_open: ENOENT (no hardware counters)"``.
Never 0 for "unknown".

The ``Text``, ``Items``, ``Keyed`` and ``Notes`` annotations are plain ``str``, ``tuple``
and ``Mapping`` to Python and to mypy; they carry the bounds that the sample
decoder (``ipc.serialize``, msgspec) enforces from a declared length before
it builds anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, TypeVar

import msgspec

MAX_ITEMS = 100_000
"""Most items a decoder accepts in any one list or map of a sample (cores, GPUs, jobs, reasons)."""
MAX_TEXT_LEN = 1024 * 1024
"""Longest string a decoder accepts anywhere in a sample, in characters."""

_T = TypeVar("_T")
Text = Annotated[str, msgspec.Meta(max_length=MAX_TEXT_LEN)]
"""A string of at most MAX_TEXT_LEN characters."""
Items = Annotated[tuple[_T, ...], msgspec.Meta(max_length=MAX_ITEMS)]
"""An immutable list of at most MAX_ITEMS items."""
Keyed = Annotated[Mapping[Text, _T], msgspec.Meta(max_length=MAX_ITEMS)]
"""A map from strings, of at most MAX_ITEMS entries."""
Notes = Keyed[Text]
"""Dotted field name -> why its value is unavailable."""

EMPTY: Mapping[str, str] = {}


@dataclass(frozen=True, slots=True)
class CpuTimes:
    """One CPU's time per mode since boot, in seconds (``/proc/stat``; node_exporter's
    ``node_cpu_seconds_total`` modes). Kernel counters: they only grow, until a reboot.

    Not part of :class:`HostSample` (8 numbers per CPU would make a 128-CPU host's
    sample 7x larger on the wire): ``/metrics`` reads them at scrape time
    (``collectors.host.read_cpu_times``), as node_exporter does."""

    user: float
    nice: float
    system: float
    idle: float
    iowait: float = 0.0
    irq: float = 0.0
    softirq: float = 0.0
    steal: float = 0.0


@dataclass(frozen=True, slots=True)
class CpuSample:
    """CPU utilization over the last interval, 0-100 (``top``'s %Cpu(s))."""

    total_percent: float | None
    per_core_percent: Items[float] = ()
    load_avg_1m: float | None = None
    count: int | None = None


@dataclass(frozen=True, slots=True)
class MemorySample:
    """Host memory (``free -b``)."""

    total_bytes: int | None
    used_bytes: int | None
    available_bytes: int | None = None
    swap_used_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class NetInterface:
    """One network interface's throughput over the last interval."""

    name: Text
    rx_bytes_per_s: float
    tx_bytes_per_s: float
    rx_bytes: int | None = None
    """Bytes received since the interface appeared (the kernel's counter); None if not read."""
    tx_bytes: int | None = None
    """Bytes sent since the interface appeared (the kernel's counter); None if not read."""


@dataclass(frozen=True, slots=True)
class NetworkSample:
    """All interfaces but loopback; totals are their sums."""

    rx_bytes_per_s: float | None
    tx_bytes_per_s: float | None
    interfaces: Items[NetInterface] = ()


@dataclass(frozen=True, slots=True)
class DiskIo:
    """One block device's throughput over the last interval."""

    name: Text
    read_bytes_per_s: float
    write_bytes_per_s: float
    read_bytes: int | None = None
    """Bytes read since boot (the kernel's counter, /proc/diskstats); None if not read."""
    write_bytes: int | None = None
    """Bytes written since boot (the kernel's counter); None if not read."""


@dataclass(frozen=True, slots=True)
class StorageSample:
    """Whole disks (not partitions); totals are their sums."""

    read_bytes_per_s: float | None
    write_bytes_per_s: float | None
    disks: Items[DiskIo] = ()


@dataclass(frozen=True, slots=True)
class IbPort:
    """One InfiniBand port (``/sys/class/infiniband/DEV/ports/N/counters``)."""

    device: Text
    port: int
    rx_bytes_per_s: float | None
    tx_bytes_per_s: float | None
    state: Text = ""
    rate: Text = ""
    symbol_errors: int | None = None
    link_downed: int | None = None


@dataclass(frozen=True, slots=True)
class CacheSample:
    """Hardware-counter derived figures (``perf stat``), each None if unreadable."""

    l2_hit_ratio: float | None = None
    l3_hit_ratio: float | None = None
    mem_bandwidth_bytes_per_s: float | None = None


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A process using a GPU (``nvidia-smi --query-compute-apps``)."""

    pid: int
    used_memory_bytes: int | None
    sm_util_percent: float | None = None
    mem_util_percent: float | None = None


@dataclass(frozen=True, slots=True)
class Workload:
    """Where a process runs: container, Kubernetes pod, Slurm step (``gpulens.core.workload``); None: not known."""

    runtime: Text | None = None
    """``containerd``, ``cri-o``, ``docker``, ``podman`` or ``cri`` (a kubepods cgroup that names no runtime)."""
    container_id: Text | None = None
    pod_uid: Text | None = None
    qos: Text | None = None
    """The pod's QoS class: ``guaranteed``, ``burstable`` or ``besteffort``."""
    namespace: Text | None = None
    pod: Text | None = None
    container: Text | None = None
    """Pod name, namespace and container name: from the kubelet or ``/var/log/pods``, never from the process."""
    slurm_job: Text | None = None
    slurm_step: Text | None = None
    slurm_task: Text | None = None
    slurm_gpus: Text | None = None
    visible_gpus: Text | None = None
    """``SLURM_JOB_GPUS`` and ``CUDA_VISIBLE_DEVICES`` as the process's environment has them."""
    ns_pid: int | None = None
    """The pid inside the process's own PID namespace (a container's), when it differs."""
    found_by: Text | None = None
    """``cgroup`` or ``environ``: where the container, pod or Slurm job was read."""


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU, read through NVML (GPM fields on Hopper and newer)."""

    index: int
    name: Text
    uuid: Text
    utilization_percent: float | None = None
    memory_utilization_percent: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    temperature_c: float | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    pcie_rx_bytes_per_s: float | None = None
    pcie_tx_bytes_per_s: float | None = None
    nvlink_rx_bytes_per_s: float | None = None
    nvlink_tx_bytes_per_s: float | None = None
    ecc_corrected: int | None = None
    ecc_uncorrected: int | None = None
    xid_events: Items[int] = ()
    throttle_reasons: Items[Text] = ()
    sm_activity_percent: float | None = None
    sm_occupancy_percent: float | None = None
    dram_bw_util_percent: float | None = None
    processes: Items[GpuProcess] = ()
    unavailable: Notes = field(default_factory=dict)
    tensor_active_percent: float | None = None
    """Time the tensor (HMMA) pipes were active, 0-100 (DCGM PROF_PIPE_TENSOR_ACTIVE)."""
    nvlink_total_bytes_per_s: float | None = None
    """NVLink received + sent, where only the sum is known (DCGM NVLINK_BANDWIDTH_TOTAL)."""
    energy_joules: float | None = None
    """Energy used since the driver loaded (NVML total energy / DCGM TOTAL_ENERGY_CONSUMPTION);
    a counter: it only grows, until the driver reloads."""
    vendor: Text = "nvidia"
    """``nvidia`` or ``amd``: whose driver reported it (an agent older than this field had NVML only)."""
    allocated: Workload | None = None
    """The pod and container the kubelet gave this GPU (PodResources ``nvidia.com/gpu`` / ``amd.com/gpu``
    device ids), or the Slurm job whose ``SLURM_JOB_GPUS`` names it; None: not known or not given."""


@dataclass(frozen=True, slots=True)
class JobInfo:
    """A process whose process-tree ID matches the job pattern."""

    pid: int
    tree_id: Text
    cmdline: Text
    user: Text
    start_time: float
    cpu_percent: float | None = None
    rss_bytes: int | None = None
    gpu_mem_bytes: Keyed[int] = field(default_factory=dict)
    """GPU index (as a string, so the map survives JSON) -> bytes used."""
    job_key: Text | None = None
    ancestors: Items[int] = ()
    kineto_polling: bool = False
    """True when the process polls this host's gpulens Kineto endpoint (it can be traced)."""
    workload: Workload | None = None
    """Its container, pod and Slurm job (None: none found, or an agent older than this field)."""


@dataclass(frozen=True, slots=True)
class HostSample:
    """Everything read on one host at one time."""

    host: Text
    time: float
    cpu: CpuSample
    memory: MemorySample
    network: NetworkSample
    storage: StorageSample
    cache: CacheSample = CacheSample()
    infiniband: Items[IbPort] = ()
    gpus: Items[GpuSample] = ()
    jobs: Items[JobInfo] = ()
    unavailable: Notes = field(default_factory=dict)
    simulated: bool = False
