"""Turn per-field PromQL answers into :class:`HostSample` objects (pure, no I/O).

Input: for each :class:`~.prom_mapping.MetricMap` row, the list of
``(labels, value)`` pairs Prometheus returned at one evaluation time. Rows are
applied in table order, so for one field of one host the first family with a
value wins. NaN and infinite values (0/0 of a rate with no traffic, ...) are
treated as missing. A field no family provided is None, with a reason.
Answers naming more than :data:`MAX_HOSTS` hosts are refused as soon as the
next host would be added (a :class:`PrometheusError` saying how to narrow
the query), before any sample is built.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields

from gpulens.core.errors import PrometheusError
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
from gpulens.ipc.prom_names import AMD_NOT_EXPORTED, MetricMap, gpu_of, host_of, throttle_names

Answer = Iterable[tuple[Mapping[str, str], float]]
MAX_HOSTS = 4096
"""Hosts one poll may name: as many as the viewer's store keeps (collectors.store.MAX_HOSTS)."""

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


@dataclass
class _Gpu:
    uuid: str = ""
    name: str = ""
    values: dict[str, float] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)
    throttle: set[str] = field(default_factory=set)
    processes: dict[int, int] = field(default_factory=dict)
    xids: set[int] = field(default_factory=set)
    vendor: str = "nvidia"
    """``amd`` once a row of AMD's device-metrics-exporter named this GPU."""
    amd_exporter: bool = False
    """AMD's device-metrics-exporter named it: the fields it never exports are n/a with that reason."""
    pod: tuple[str, str, str] | None = None
    """(namespace, pod, container) from dcgm-exporter's Kubernetes labels (gpulens' /metrics has the same)."""


@dataclass
class _Job:
    labels: Mapping[str, str] = field(default_factory=dict)
    values: dict[str, float] = field(default_factory=dict)
    gpu_mem: dict[str, int] = field(default_factory=dict)


@dataclass
class _Host:
    values: dict[str, float] = field(default_factory=dict)
    gpus: dict[int, _Gpu] = field(default_factory=dict)
    jobs: dict[int, _Job] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)


def _pod_of(labels: Mapping[str, str]) -> tuple[str, str, str] | None:
    """(namespace, pod, container) of a series dcgm-exporter labelled with the pod given its GPU, or None."""
    pod = labels.get("pod", "")
    if not pod:
        return None
    return labels.get("namespace", ""), pod, labels.get("container", "")


def _new_host(hosts: dict[str, _Host], name: str) -> _Host:
    if len(hosts) >= MAX_HOSTS:
        raise PrometheusError(
            "garbage", f"Prometheus answered with more than {MAX_HOSTS} hosts (the host limit, as many as "
            "gpulens keeps); narrow it with --prom-selector, e.g. '{cluster=\"a\"}'")
    h = hosts[name] = _Host()
    return h


def _apply(hosts: dict[str, _Host], row: MetricMap, scope: str, labels: Mapping[str, str], value: float) -> None:
    host = host_of(labels)
    if host is None or not math.isfinite(value):
        return
    ident = gpu_of(labels) if scope == "gpu" else None
    if scope == "gpu" and ident is None:
        return  # dcgm samples without a gpu label cannot be placed
    h = hosts.get(host)
    if h is None:
        h = _new_host(hosts, host)
    if row.field == "host.unavailable":
        _apply_unavailable(h, labels)
    elif scope == "host":
        h.values.setdefault(row.field, value)
    elif scope == "gpu":
        assert ident is not None
        _apply_gpu(h, row, ident, labels, value)
    else:
        _apply_job(h, row.field, labels, value)


def _apply_unavailable(h: _Host, labels: Mapping[str, str]) -> None:
    """``host.unavailable``: why a field (of the host, or of one GPU) has no value."""
    gpu, key, reason = labels.get("gpu", ""), labels.get("field", ""), labels.get("reason", "")
    if gpu.isdigit() and len(gpu) <= 4:
        h.gpus.setdefault(int(gpu), _Gpu()).unavailable[key] = reason
    elif key:
        h.unavailable[key] = reason


def _apply_gpu(h: _Host, row: MetricMap, ident: tuple[int, str], labels: Mapping[str, str], value: float) -> None:
    """A GPU-scope series: the GPU's identity (instant rows only), then its value by field."""
    g = h.gpus.get(ident[0])
    if g is None:
        g = h.gpus[ident[0]] = _Gpu()
    if row.family == "amd":
        g.vendor, g.amd_exporter = "amd", True
    if not row.windowed:  # ids come from instant rows only, so the order of passes cannot change them
        g.uuid = g.uuid or ident[1]
        g.name = g.name or labels.get("name") or labels.get("modelName") or ""
        g.pod = g.pod or _pod_of(labels)
    _GPU_SPECIAL.get(row.field, _gpu_value)(g, row.field, labels, value)


def _gpu_value(g: _Gpu, field: str, labels: Mapping[str, str], value: float) -> None:
    g.values.setdefault(field[4:], value)


def _gpu_throttle_reason(g: _Gpu, field: str, labels: Mapping[str, str], value: float) -> None:
    g.throttle.add(labels.get("reason", "?"))


def _gpu_throttle_mask(g: _Gpu, field: str, labels: Mapping[str, str], value: float) -> None:
    g.throttle.update(throttle_names(value))


def _gpu_xid(g: _Gpu, field: str, labels: Mapping[str, str], value: float) -> None:
    code = labels.get("code", "")
    if code.isdigit() and len(code) <= 10:
        g.xids.add(int(code))


def _gpu_process(g: _Gpu, field: str, labels: Mapping[str, str], value: float) -> None:
    pid = labels.get("pid", "")
    if pid.isdigit() and len(pid) <= 10:
        g.processes.setdefault(int(pid), int(value))


_GPU_SPECIAL = {
    "gpu.throttle_reasons": _gpu_throttle_reason,
    "gpu.throttle_mask": _gpu_throttle_mask,
    "gpu.xid_events": _gpu_xid,
    "gpu.processes": _gpu_process,
}
"""GPU fields that are not a plain value, by field (any other: :func:`_gpu_value`)."""


def _apply_job(h: _Host, field: str, labels: Mapping[str, str], value: float) -> None:
    """A job-scope series, placed by its ``pid`` label (skipped without a valid one)."""
    pid_text = labels.get("pid", "")
    if not pid_text.isdigit() or len(pid_text) > 10:
        return
    j = h.jobs.setdefault(int(pid_text), _Job())
    if field == "job.info":
        j.labels = labels
    elif field == "job.gpu_mem_bytes":
        j.gpu_mem[labels.get("gpu", "?")] = int(value)
    else:
        j.values.setdefault(field[4:], value)


_SPECIAL = {"host.unavailable", "gpu.throttle_reasons", "gpu.throttle_mask", "gpu.xid_events", "gpu.processes"}


_INDEX = {str(i): i for i in range(256)}
"""GPU index label -> int, for the usual indexes (saves a parse per series)."""


def _apply_plain_host(hosts: dict[str, _Host], row: MetricMap, answer: Answer, only: set[str] | None) -> None:
    """The hot path (tens of thousands of series per poll): plain host or GPU
    values, without the per-series branching of :func:`_apply`. With ``only``,
    series of other hosts are skipped. This one: host values."""
    isfinite = math.isfinite
    find = hosts.get
    key = row.field
    for labels, value in answer:
        host = labels.get("host") or host_of(labels)
        if host is None or not isfinite(value) or (only is not None and host not in only):
            continue
        h = find(host)
        if h is None:
            h = _new_host(hosts, host)
        h.values.setdefault(key, value)


def _apply_plain_gpu(hosts: dict[str, _Host], row: MetricMap, answer: Answer, only: set[str] | None) -> None:
    """GPU values: as :func:`_apply_plain_host`, for GPUs."""
    isfinite = math.isfinite
    find = hosts.get
    key = row.field[4:]
    # gpulens: ids only on gpu_info; windowed rows never (see _apply)
    ids = (row.family != "gpulens" or row.field == "gpu.info") and not row.windowed
    amd = row.family == "amd"
    index = _INDEX.get
    for labels, value in answer:
        host = labels.get("host") or host_of(labels)
        idx = labels.get("gpu", "")
        i = index(idx)
        if i is None:
            if not idx.isdigit() or len(idx) > 4:
                continue
            i = int(idx)
        if host is None or (only is not None and host not in only):
            continue
        h = find(host)
        if h is None:
            h = _new_host(hosts, host)
        g = h.gpus.get(i)
        if g is None:
            g = h.gpus[i] = _Gpu()
        if amd:
            g.vendor, g.amd_exporter = "amd", True
        elif ids and labels.get("vendor") == "amd":
            g.vendor = "amd"
        if ids:
            _identify(g, labels)
        if isfinite(value):
            g.values.setdefault(key, value)


def _identify(g: _Gpu, labels: Mapping[str, str]) -> None:
    """Fill the GPU's uuid, name and pod from a series' labels, where not known yet."""
    g.uuid = g.uuid or labels.get("uuid") or labels.get("UUID") or ""
    g.name = g.name or labels.get("name") or labels.get("modelName") or ""
    g.pod = g.pod or _pod_of(labels)


def _apply_row(hosts: dict[str, _Host], row: MetricMap, answer: Answer, only: set[str] | None) -> None:
    scope = row.scope
    if scope != "job" and row.field not in _SPECIAL:
        (_apply_plain_host if scope == "host" else _apply_plain_gpu)(hosts, row, answer, only)
    elif only is None:
        for labels, value in answer:
            _apply(hosts, row, scope, labels, value)
    else:
        for labels, value in answer:
            if host_of(labels) in only:
                _apply(hosts, row, scope, labels, value)


def _apply_rows(hosts: dict[str, _Host], answers: Iterable[tuple[MetricMap, Answer]],
                only: set[str] | None = None, windowed_anywhere: bool = False) -> set[str]:
    """Apply instant rows, then windowed ones (``rate()``, ``increase()``), each in table order.

    A windowed row still answers for a target that is gone (its range holds the
    old points for a whole window), so it only adds to hosts an instant row
    named, unless ``windowed_anywhere``. Returns the hosts instant rows named.
    """
    windowed = []
    for row, answer in answers:
        if row.windowed:
            windowed.append((row, answer))
        else:
            _apply_row(hosts, row, answer, only)
    instant = set(hosts)
    limit = None if windowed_anywhere else (instant if only is None else only)
    for row, answer in windowed:
        _apply_row(hosts, row, answer, limit)
    return instant


class Digest:
    """Answers of rarely re-read fields, applied once and kept per host, so
    that the polls in between merge ~10,000 small maps instead of re-reading
    ~100,000 series (see :func:`digest`)."""

    __slots__ = ("adds_hosts", "hosts", "instant_hosts")

    def __init__(self, hosts: dict[str, _Host], adds_hosts: bool = False,
                 instant_hosts: frozenset[str] = frozenset()) -> None:
        self.hosts = hosts
        self.adds_hosts = adds_hosts
        self.instant_hosts = instant_hosts
        """The hosts instant rows named: the ones ``adds_hosts`` may add."""


def digest(answers: Iterable[tuple[MetricMap, Answer]], adds_hosts: bool = False) -> Digest:
    """Pre-apply cached answers (rows in table order) for :func:`assemble`'s ``digests``.

    ``adds_hosts``: the hosts of these answers are hosts of the samples even
    when the fresh answers do not name them (a dcgm-exporter host whose GPUs
    report only host-screen details, as in Datadog's scrape). For answers
    re-read every few polls, so a host that vanished lives on only until then.

    Raises:
        PrometheusError: the answers name more than :data:`MAX_HOSTS` hosts.
    """
    hosts: dict[str, _Host] = {}
    instant = _apply_rows(hosts, answers, windowed_anywhere=True)  # for hosts the fresh answers name
    return Digest(hosts, adds_hosts, frozenset(instant))


def _merge(h: _Host, c: _Host) -> None:
    """Add a digest's host ``c`` to ``h`` as if its series were applied after
    ``h``'s own: plain values only where ``h`` has none, ids only where empty,
    reasons and job labels overwritten (as :func:`_apply` does). ``c`` is not
    changed: it serves every poll until the next re-read."""
    if c.values:
        h.values = {**c.values, **h.values}
    if c.unavailable:
        h.unavailable.update(c.unavailable)
    for i, cg in c.gpus.items():
        g = h.gpus.get(i)
        if g is None:
            g = h.gpus[i] = _Gpu()
        g.uuid = g.uuid or cg.uuid
        g.name = g.name or cg.name
        if cg.vendor != "nvidia":
            g.vendor = cg.vendor
        g.amd_exporter = g.amd_exporter or cg.amd_exporter
        if cg.values:
            g.values = {**cg.values, **g.values}
        if cg.unavailable:
            g.unavailable.update(cg.unavailable)
        if cg.throttle:
            g.throttle |= cg.throttle
        if cg.processes:
            g.processes = {**cg.processes, **g.processes}
        if cg.xids:
            g.xids |= cg.xids
    for pid, cj in c.jobs.items():
        j = h.jobs.get(pid)
        if j is None:
            j = h.jobs[pid] = _Job()
        if cj.labels:
            j.labels = cj.labels
        j.gpu_mem.update(cj.gpu_mem)
        j.values = {**cj.values, **j.values}


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
    raise ImportError("collectors.model.GpuSample fields changed order; update prom_assemble._gpu_sample")


def _gpu_sample(index: int, g: _Gpu, skipped: Mapping[str, str]) -> GpuSample:
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


def _job(pid: int, j: _Job) -> JobInfo | None:
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


def _host_sample(name: str, t: float, h: _Host, skipped: Mapping[str, str]) -> HostSample:
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
    same, pre-applied by :func:`digest`; merged after ``extra``) only add to
    hosts the ``answers`` found, so a host that vanished does not live on in a
    cache, except digests made with ``adds_hosts``. ``skipped`` gives the reason for fields deliberately not queried
    (dotted field -> reason), instead of "no series in Prometheus".

    Raises:
        PrometheusError: the answers name more than :data:`MAX_HOSTS` hosts.
    """
    hosts: dict[str, _Host] = {}
    _apply_rows(hosts, answers)
    seen = set(hosts)
    _apply_rows(hosts, extra, only=seen)
    for d in digests:
        for name, c in d.hosts.items():
            h = hosts.get(name)
            if h is None and d.adds_hosts and name in d.instant_hosts:
                h = _new_host(hosts, name)
            if h is not None:
                _merge(h, c)
    why = skipped or {}
    return {name: _host_sample(name, t, h, why) for name, h in sorted(hosts.items())}
