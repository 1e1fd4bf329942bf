"""Turn per-field PromQL answers into checked :class:`HostSample` objects (pure, no I/O).

Input: for each :class:`~gpulens.ipc.prom_names.MetricMap` row, the list of
``(labels, value)`` pairs Prometheus returned at one evaluation time.
:mod:`gpulens.sources.prometheus.tally` places them on hosts, GPUs and jobs
(rows in table order, so for one field of one host the first family with a
value wins; NaN and infinite values are treated as missing; more than
:data:`~gpulens.sources.prometheus.tally.MAX_HOSTS` hosts are refused before
any sample is built). This module builds each host's sample from its tally:
a field no family provided is None, with a reason (:data:`MISSING`, or why
it was not queried, or why the exporter that named the GPU lacks it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import fields

from gpulens.core.model import (
    CacheSample,
    CpuSample,
    GpuProcess,
    GpuSample,
    HostSample,
    JobInfo,
    MemorySample,
    NetworkSample,
    StorageSample,
    Workload,
)
from gpulens.core.sanitize import check_sample, clean_text
from gpulens.ipc.prom_names import AMD_NOT_EXPORTED, MetricMap
from gpulens.sources.prometheus.tally import (
    Answer,
    Digest,
    GpuTally,
    HostTally,
    JobTally,
    apply_rows,
    merge,
    new_host,
)

MISSING = "no series in Prometheus (gpulens, dcgm-exporter, AMD device-metrics-exporter or node_exporter names)"
_HOST_FIELDS = (
    "cpu.total_percent", "memory.total_bytes", "memory.used_bytes", "network.rx_bytes_per_s",
    "network.tx_bytes_per_s", "storage.read_bytes_per_s", "storage.write_bytes_per_s",
)
_GPU_FIELDS = (
    "utilization_percent", "memory_utilization_percent", "mem_used_bytes", "mem_total_bytes",
    "power_w", "temperature_c", "sm_clock_mhz", "mem_clock_mhz", "power_limit_w",
    "pcie_rx_bytes_per_s", "pcie_tx_bytes_per_s", "nvlink_rx_bytes_per_s",
    "nvlink_tx_bytes_per_s", "ecc_corrected", "ecc_uncorrected", "sm_activity_percent",
    "sm_occupancy_percent", "dram_bw_util_percent", "tensor_active_percent", "energy_joules",
)
_GPU_SET = frozenset(_GPU_FIELDS)
_DOTTED = {name: f"gpu.{name}" for name in _GPU_FIELDS}
SM_FROM_GR = ("DCGM_FI_PROF_SM_ACTIVE not exported (it is off in dcgm-exporter's default counters); "
              "GPU util shows DCGM_FI_PROF_GR_ENGINE_ACTIVE instead (time the graphics/compute engine was active)")
NVLINK_TOTAL_ONLY = "dcgm-exporter gives only received + sent together (DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL)"


def _opt_int(v: float | None) -> int | None:
    return None if v is None else round(v)


_POSITIONAL = (
    "index", "name", "uuid", "utilization_percent", "memory_utilization_percent", "mem_used_bytes",
    "mem_total_bytes", "power_w", "power_limit_w", "temperature_c", "sm_clock_mhz", "mem_clock_mhz",
    "pcie_rx_bytes_per_s", "pcie_tx_bytes_per_s", "nvlink_rx_bytes_per_s", "nvlink_tx_bytes_per_s",
    "ecc_corrected", "ecc_uncorrected", "xid_events", "throttle_reasons", "sm_activity_percent",
    "sm_occupancy_percent", "dram_bw_util_percent", "processes", "unavailable",
)
if tuple(f.name for f in fields(GpuSample))[:len(_POSITIONAL)] != _POSITIONAL:
    # _gpu_sample passes arguments by position (8,000 GPUs a poll): a reordered model must fail loudly
    raise ImportError("core.model.GpuSample fields changed order; update sources.prometheus.assemble._gpu_sample")


def _gpu_sample(index: int, g: GpuTally, skipped: Mapping[str, str]) -> GpuSample:
    got = g.values
    get = got.get
    unavailable = dict(g.unavailable)
    lacks = AMD_NOT_EXPORTED if g.amd_exporter else {}
    for name in _GPU_SET - got.keys():
        if name not in unavailable:
            unavailable[name] = lacks.get(name) or (skipped.get(_DOTTED[name], MISSING) if skipped else MISSING)
    xid = get("xid_last")
    util, gr = get("utilization_percent"), get("gr_engine_active_percent")
    if gr is not None and "sm_activity_percent" not in got:
        util = gr
        unavailable["sm_activity_percent"] = SM_FROM_GR
    nvlink = get("nvlink_total_bytes_per_s")
    if nvlink is not None and "nvlink_rx_bytes_per_s" not in got:
        unavailable["nvlink_rx_bytes_per_s"] = unavailable["nvlink_tx_bytes_per_s"] = NVLINK_TOTAL_ONLY
    xids = tuple(sorted(g.xids)) if g.xids else ((round(xid),) if xid else ())
    return GpuSample(
        index, g.name, g.uuid, util, get("memory_utilization_percent"),
        _opt_int(get("mem_used_bytes")), _opt_int(get("mem_total_bytes")), get("power_w"),
        get("power_limit_w"), get("temperature_c"), _opt_int(get("sm_clock_mhz")),
        _opt_int(get("mem_clock_mhz")), get("pcie_rx_bytes_per_s"), get("pcie_tx_bytes_per_s"),
        get("nvlink_rx_bytes_per_s"), get("nvlink_tx_bytes_per_s"), _opt_int(get("ecc_corrected")),
        _opt_int(get("ecc_uncorrected")), xids,
        tuple(sorted(g.throttle)) if g.throttle else (), get("sm_activity_percent"),
        get("sm_occupancy_percent"), get("dram_bw_util_percent"),
        tuple(GpuProcess(pid, used) for pid, used in sorted(g.processes.items())) if g.processes else (),
        unavailable, tensor_active_percent=get("tensor_active_percent"), nvlink_total_bytes_per_s=nvlink,
        energy_joules=get("energy_joules"), vendor=g.vendor, allocated=_given(g.pod),
    )


def _given(pod: tuple[str, str, str] | None) -> Workload | None:
    if pod is None:
        return None
    namespace, name, container = (clean_text(v[:253]) or None for v in pod)
    return Workload(namespace=namespace, pod=name, container=container, found_by="prometheus")


def _job(pid: int, j: JobTally) -> JobInfo | None:
    start = j.values.get("start_time")
    if not j.labels or start is None:
        return None  # a job needs its info labels and start time; partial rows are dropped
    rss = j.values.get("rss_bytes")
    return JobInfo(
        pid=pid, tree_id=j.labels.get("tree_id", ""), cmdline=j.labels.get("cmdline", ""),
        user=j.labels.get("user", ""), start_time=start, cpu_percent=j.values.get("cpu_percent"),
        rss_bytes=_opt_int(rss), gpu_mem_bytes=dict(j.gpu_mem),
        job_key=j.labels.get("job_key") or None,
    )


def _host_sample(name: str, t: float, h: HostTally, skipped: Mapping[str, str]) -> HostSample:
    v = h.values
    unavailable = dict(h.unavailable)
    for key in _HOST_FIELDS:
        if key not in v:
            unavailable.setdefault(key, skipped.get(key, MISSING))
    jobs = [_job(pid, j) for pid, j in sorted(h.jobs.items())]
    # Prometheus may answer +Inf/NaN or absurd values: n/a with the reason, like an agent's.
    return check_sample(HostSample(
        host=clean_text(name), time=t,
        cpu=CpuSample(total_percent=v.get("cpu.total_percent"), load_avg_1m=v.get("cpu.load_avg_1m"),
                      count=_opt_int(v.get("cpu.count"))),
        memory=MemorySample(total_bytes=_opt_int(v.get("memory.total_bytes")),
                            used_bytes=_opt_int(v.get("memory.used_bytes")),
                            available_bytes=_opt_int(v.get("memory.available_bytes")),
                            swap_used_bytes=_opt_int(v.get("memory.swap_used_bytes"))),
        network=NetworkSample(rx_bytes_per_s=v.get("network.rx_bytes_per_s"),
                              tx_bytes_per_s=v.get("network.tx_bytes_per_s")),
        storage=StorageSample(read_bytes_per_s=v.get("storage.read_bytes_per_s"),
                              write_bytes_per_s=v.get("storage.write_bytes_per_s")),
        cache=CacheSample(l2_hit_ratio=v.get("cache.l2_hit_ratio"), l3_hit_ratio=v.get("cache.l3_hit_ratio"),
                          mem_bandwidth_bytes_per_s=v.get("cache.mem_bandwidth_bytes_per_s")),
        gpus=tuple(_gpu_sample(i, g, skipped) for i, g in sorted(h.gpus.items())),
        jobs=tuple(j for j in jobs if j is not None),
        unavailable=unavailable,
        simulated=bool(v.get("host.simulated")),
    ))


def assemble(
    answers: Iterable[tuple[MetricMap, Answer]],
    t: float,
    extra: Iterable[tuple[MetricMap, Answer]] = (),
    skipped: Mapping[str, str] | None = None,
    digests: Iterable[Digest] = (),
) -> dict[str, HostSample]:
    """Host name -> sample at time ``t`` (unix seconds) from rows' answers, in table order.

    ``extra`` (cached answers of rarely changing fields) and ``digests`` (the
    same, pre-applied by :func:`~gpulens.sources.prometheus.tally.digest`;
    merged after ``extra``) only add to hosts the ``answers`` found, so a host
    that vanished does not live on in a cache, except digests made with
    ``adds_hosts``. ``skipped`` gives the reason for fields deliberately not
    queried (dotted field -> reason), instead of :data:`MISSING`.

    Raises:
        PrometheusError: the answers name more than
            :data:`~gpulens.sources.prometheus.tally.MAX_HOSTS` hosts.
    """
    hosts: dict[str, HostTally] = {}
    apply_rows(hosts, answers)
    seen = set(hosts)
    apply_rows(hosts, extra, only=seen)
    for d in digests:
        for name, c in d.hosts.items():
            h = hosts.get(name)
            if h is None and d.adds_hosts and name in d.instant_hosts:
                h = new_host(hosts, name)
            if h is not None:
                merge(h, c)
    why = skipped or {}
    return {name: _host_sample(name, t, h, why) for name, h in sorted(hosts.items())}
