"""The metric families of one scrape: the newest sample's levels and the running totals.

Conventions are node_exporter's and dcgm-exporter's (docs/metrics.md lists
every name): base units (bytes, seconds, joules, watts, hertz, celsius);
counters (``_total``) for everything that accumulates, read with ``rate()``;
gauges only for levels; ``_ratio`` only for 0-1 fractions. Label names are
node_exporter's (``cpu``, ``mode``, ``device``) and never Prometheus' own
target labels: a job is ``gpulens_job``, not ``job`` (which Prometheus would
rename ``exported_job``). A value that is None in the sample is *absent*,
never 0; its reason is exported as ``gpulens_metric_unavailable_info``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from prometheus_client.core import Metric

from gpulens.agent.metrics_counters import Counters, gpu_labels, job_label
from gpulens.core.model import CpuTimes, GpuSample, HostSample, JobInfo, Workload

MAX_LABEL_CHARS = 200
"""Longest label value exported (command lines, reasons): keeps scrapes bounded."""

_HELP = {
    "gpulens_cpu_seconds": "Seconds each CPU spent in each mode (the kernel's counters, as "
                           "node_cpu_seconds_total); a sampler without them exports modes busy and idle.",
    "gpulens_network_receive_bytes": "Bytes received per interface but loopback (the kernel's counter; "
                                     "integrated from rates, without a device label, for samplers without it).",
    "gpulens_network_transmit_bytes": "Bytes sent per interface but loopback (as the receive counter).",
    "gpulens_disk_read_bytes": "Bytes read per whole disk (the kernel's counter, /proc/diskstats).",
    "gpulens_disk_written_bytes": "Bytes written per whole disk (the kernel's counter, /proc/diskstats).",
    "gpulens_memory_traffic_bytes": "DRAM bytes moved (perf uncore bandwidth integrated over each interval).",
    "gpulens_infiniband_receive_bytes": "InfiniBand port bytes received (integrated over each interval).",
    "gpulens_infiniband_transmit_bytes": "InfiniBand port bytes sent (integrated over each interval).",
    "gpulens_gpu_energy_joules": "GPU energy since the agent started: the sampled power draw integrated over "
                                 "each interval (trapezoid rule), or NVML's total-energy counter where the "
                                 "sample carries it (then since the driver loaded).",
    "gpulens_gpu_pcie_receive_bytes": "PCIe bytes received (NVML throughput integrated over each interval).",
    "gpulens_gpu_pcie_transmit_bytes": "PCIe bytes sent (NVML throughput integrated over each interval).",
    "gpulens_gpu_nvlink_receive_bytes": "NVLink bytes received (integrated over each interval).",
    "gpulens_gpu_nvlink_transmit_bytes": "NVLink bytes sent (integrated over each interval).",
    "gpulens_gpu_xid_errors": "XID events by code (each event once, whatever the scrape interval).",
    "gpulens_gpu_throttle_seconds": "Seconds the clocks were held back, per reason (sampled each interval).",
    "gpulens_job_cpu_seconds": "CPU seconds used by one job process (integrated over each interval).",
}


def _label(value: object) -> str:
    text = str(value)
    return text if len(text) <= MAX_LABEL_CHARS else text[: MAX_LABEL_CHARS - 3] + "..."


class _Families:
    """Metric families built for one scrape, created on first use."""

    def __init__(self) -> None:
        self._fams: dict[str, Metric] = {}

    def add(self, name: str, doc: str, labels: dict[str, str], value: float | None, counter: bool = False) -> None:
        if value is None:
            return  # absent, not 0: the reason is in gpulens_metric_unavailable_info
        fam = self._fams.get(name)
        if fam is None:
            fam = self._fams[name] = Metric(name, doc, "counter" if counter else "gauge")
        sample = f"{name}_total" if counter else name
        fam.add_sample(sample, {k: _label(v) for k, v in labels.items()}, float(value))

    def metrics(self) -> Iterator[Metric]:
        return iter(self._fams.values())


def _pct(v: float | None) -> float | None:
    return None if v is None else v / 100.0


def _mhz(v: int | None) -> float | None:
    return None if v is None else v * 1e6


def _host_metrics(f: _Families, s: HostSample, cpu_times: Sequence[CpuTimes]) -> None:
    h = {"host": s.host}
    f.add("gpulens_sample_timestamp_seconds", "Unix time the sample was taken.", h, s.time)
    f.add("gpulens_host_simulated", "1 when the data is simulated (demo).", h, float(s.simulated))
    doc = _HELP["gpulens_cpu_seconds"]
    for cpu, t in enumerate(cpu_times):
        for mode in ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"):
            f.add("gpulens_cpu_seconds", doc, {**h, "cpu": str(cpu), "mode": mode}, getattr(t, mode), counter=True)
    f.add("gpulens_load1", "1-minute load average.", h, s.cpu.load_avg_1m)
    f.add("gpulens_cpus", "Logical CPUs online.", h, s.cpu.count)
    m = s.memory
    f.add("gpulens_memory_total_bytes", "Host memory size.", h, m.total_bytes)
    f.add("gpulens_memory_used_bytes", "Host memory in use (total - available, as free).", h, m.used_bytes)
    f.add("gpulens_memory_available_bytes", "Host memory available.", h, m.available_bytes)
    f.add("gpulens_swap_used_bytes", "Swap in use.", h, m.swap_used_bytes)
    for nic in s.network.interfaces:
        lab = {**h, "device": nic.name}
        f.add("gpulens_network_receive_bytes", _HELP["gpulens_network_receive_bytes"], lab, nic.rx_bytes, True)
        f.add("gpulens_network_transmit_bytes", _HELP["gpulens_network_transmit_bytes"], lab, nic.tx_bytes, True)
    for disk in s.storage.disks:
        lab = {**h, "device": disk.name}
        f.add("gpulens_disk_read_bytes", _HELP["gpulens_disk_read_bytes"], lab, disk.read_bytes, True)
        f.add("gpulens_disk_written_bytes", _HELP["gpulens_disk_written_bytes"], lab, disk.write_bytes, True)
    c = s.cache
    f.add("gpulens_cache_l2_hit_ratio", "L2 cache hit ratio over the last interval, 0-1.", h, c.l2_hit_ratio)
    f.add("gpulens_cache_l3_hit_ratio", "L3 cache hit ratio over the last interval, 0-1.", h, c.l3_hit_ratio)
    for ib in s.infiniband:
        lab = {**h, "device": ib.device, "port": str(ib.port)}
        f.add("gpulens_infiniband_symbol_errors", "Symbol errors (port counter).", lab, ib.symbol_errors, True)
        f.add("gpulens_infiniband_link_downed", "Link-downed events (port counter).", lab, ib.link_downed, True)
    for key, reason in s.unavailable.items():
        f.add("gpulens_metric_unavailable_info", "A metric that could not be read, with why.",
              {**h, "gpu": "", "field": key, "reason": reason}, 1.0)


def workload_labels(w: Workload | None) -> dict[str, str]:
    """dcgm-exporter's ``pod``, ``namespace``, ``container`` (so dashboards join), plus ``pod_uid`` and
    ``slurm_job``; only the ones known (a series without a workload keeps its labels as before)."""
    if w is None:
        return {}
    return {k: v for k, v in (("pod", w.pod), ("namespace", w.namespace), ("container", w.container),
                              ("pod_uid", w.pod_uid), ("slurm_job", w.slurm_job)) if v is not None}


def _holders(jobs: Sequence[JobInfo]) -> dict[str, Workload]:
    """GPU index -> the workload of the first job process holding memory on it (used where the GPU's
    ``allocated``, the kubelet's allocation that dcgm-exporter labels by, is not known)."""
    out: dict[str, Workload] = {}
    for j in jobs:
        if j.workload is not None:
            for gpu in j.gpu_mem_bytes:
                out.setdefault(gpu, j.workload)
    return out


def _gpu_metrics(f: _Families, host: str, g: GpuSample, counters: Counters | None,
                 holder: Workload | None = None) -> None:
    lab = {**dict(gpu_labels(host, g)), **workload_labels(holder)}
    f.add("gpulens_gpu_info", "Static GPU facts (value 1).", {**lab, "name": g.name}, 1.0)
    rows: Iterable[tuple[str, str, float | None]] = (
        ("gpulens_gpu_utilization_ratio", "Time a kernel ran, 0-1 (NVML utilization.gpu).", _pct(g.utilization_percent)),
        ("gpulens_gpu_memory_utilization_ratio", "Time memory was read or written, 0-1.", _pct(g.memory_utilization_percent)),
        ("gpulens_gpu_memory_used_bytes", "GPU memory in use.", g.mem_used_bytes),
        ("gpulens_gpu_memory_total_bytes", "GPU memory size.", g.mem_total_bytes),
        ("gpulens_gpu_power_watts", "Power draw.", g.power_w),
        ("gpulens_gpu_power_limit_watts", "Power limit.", g.power_limit_w),
        ("gpulens_gpu_temperature_celsius", "GPU temperature.", g.temperature_c),
        ("gpulens_gpu_sm_clock_hertz", "SM clock.", _mhz(g.sm_clock_mhz)),
        ("gpulens_gpu_memory_clock_hertz", "Memory clock.", _mhz(g.mem_clock_mhz)),
        ("gpulens_gpu_sm_active_ratio", "SM activity, 0-1 (GPM / DCGM PROF_SM_ACTIVE).", _pct(g.sm_activity_percent)),
        ("gpulens_gpu_sm_occupancy_ratio", "SM occupancy, 0-1.", _pct(g.sm_occupancy_percent)),
        ("gpulens_gpu_dram_active_ratio", "DRAM interface active, 0-1.", _pct(g.dram_bw_util_percent)),
        ("gpulens_gpu_tensor_active_ratio", "Tensor pipes active, 0-1 (DCGM PROF_PIPE_TENSOR_ACTIVE).",
         _pct(g.tensor_active_percent)),
    )
    for name, doc, value in rows:
        f.add(name, doc, lab, value)
    f.add("gpulens_gpu_ecc_corrected_errors", "Corrected ECC errors (volatile).", lab, g.ecc_corrected, True)
    f.add("gpulens_gpu_ecc_uncorrected_errors", "Uncorrected ECC errors (volatile).", lab, g.ecc_uncorrected, True)
    if g.energy_joules is not None:
        f.add("gpulens_gpu_energy_joules", _HELP["gpulens_gpu_energy_joules"], lab, g.energy_joules, True)
    last = counters.xid_last(host, g) if counters is not None else (g.xid_events[-1] if g.xid_events else None)
    f.add("gpulens_gpu_xid_last_code", "Code of the newest XID event since the agent started.", lab, last)
    for reason in g.throttle_reasons:
        f.add("gpulens_gpu_throttle_reason", "Clock throttle reason active now (value 1).", {**lab, "reason": reason}, 1.0)
    for p in g.processes:
        plab = {**lab, "pid": str(p.pid)}
        f.add("gpulens_gpu_process_memory_used_bytes", "GPU memory of one process.", plab, p.used_memory_bytes)
        f.add("gpulens_gpu_process_sm_utilization_ratio", "SM share of one process, 0-1.", plab, _pct(p.sm_util_percent))
    for key, reason in g.unavailable.items():
        f.add("gpulens_metric_unavailable_info", "A metric that could not be read, with why.",
              {"host": host, "gpu": str(g.index), "field": key, "reason": reason}, 1.0)


def _job_metrics(f: _Families, host: str, j: JobInfo) -> None:
    lab = {"host": host, "gpulens_job": job_label(j), "pid": str(j.pid), **workload_labels(j.workload)}
    info = {**lab, "user": j.user, "tree_id": j.tree_id, "cmdline": j.cmdline, "job_key": j.job_key or ""}
    f.add("gpulens_job_info", "A job process (value 1); facts in labels.", info, 1.0)
    f.add("gpulens_job_start_time_seconds", "Unix time the process started.", lab, j.start_time)
    f.add("gpulens_job_cpu_cores", "CPU cores the process used over the last interval (1 = one core busy; "
          "rate(gpulens_job_cpu_seconds_total) over a window).", lab, _pct(j.cpu_percent))
    f.add("gpulens_job_resident_memory_bytes", "Resident set size.", lab, j.rss_bytes)
    for gpu, used in j.gpu_mem_bytes.items():
        f.add("gpulens_job_gpu_memory_used_bytes", "GPU memory of the job on one GPU.", {**lab, "gpu": gpu}, used)


def families(
    sample: HostSample, counters: Counters | None = None, cpu_times: Sequence[CpuTimes] = ()
) -> list[Metric]:
    """Every metric family for one sample, the totals so far and the kernel's CPU
    counters (pure; used by the collector and tests).

    Without ``counters`` only the kernel counters the sample carries are exported.
    """
    f = _Families()
    _host_metrics(f, sample, cpu_times)
    holders = _holders(sample.jobs)
    for g in sample.gpus:
        _gpu_metrics(f, sample.host, g, counters, g.allocated or holders.get(str(g.index)))
    for j in sample.jobs:
        _job_metrics(f, sample.host, j)
    if counters is not None:
        for t in counters.totals():
            f.add(t.name, _HELP.get(t.name, t.name), t.labels, t.value, counter=True)
    return list(f.metrics())
