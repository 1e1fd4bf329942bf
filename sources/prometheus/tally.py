"""Place each PromQL answer's series on its host, GPU or job (pure, no I/O).

What the answers say, per host, before any sample is built: the tallies
:func:`~gpulens.sources.prometheus.assemble.assemble` turns into samples.

Input: for each :class:`~gpulens.ipc.prom_names.MetricMap` row, the list of
``(labels, value)`` pairs Prometheus returned at one evaluation time
(:data:`Answer`). Rows are applied in table order, so for one field of one
host the first family with a value wins; instant rows before windowed ones
(:func:`apply_rows`). NaN and infinite values (0/0 of a rate with no traffic,
...) are left out. Answers naming more than :data:`MAX_HOSTS` hosts are
refused as soon as the next host would be added (a :class:`PrometheusError`
saying how to narrow the query), before any sample is built.

Answers re-read only every few polls are applied once into a :class:`Digest`
(:func:`digest`) and merged into each poll's tallies (:func:`merge`), so the
polls in between merge small maps instead of re-reading every series.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gpulens.core.errors import PrometheusError
from gpulens.ipc.prom_names import MetricMap, gpu_of, host_of, throttle_names

Answer = Iterable[tuple[Mapping[str, str], float]]
"""One row's answer: ``(labels, value)`` per series."""
MAX_HOSTS = 4096
"""Hosts one poll may name: as many as the viewer's store keeps (gpulens.store.ingest.MAX_HOSTS)."""


@dataclass
class GpuTally:
    """What the answers said about one GPU of a host: ids, values by field, reasons, events."""

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
class JobTally:
    """What the answers said about one job (a pid) of a host: its info labels and values."""

    labels: Mapping[str, str] = field(default_factory=dict)
    values: dict[str, float] = field(default_factory=dict)
    gpu_mem: dict[str, int] = field(default_factory=dict)


@dataclass
class HostTally:
    """What the answers said about one host: its values by dotted field, GPUs by index, jobs by pid."""

    values: dict[str, float] = field(default_factory=dict)
    gpus: dict[int, GpuTally] = field(default_factory=dict)
    jobs: dict[int, JobTally] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)


def _pod_of(labels: Mapping[str, str]) -> tuple[str, str, str] | None:
    """(namespace, pod, container) of a series dcgm-exporter labelled with the pod given its GPU, or None."""
    pod = labels.get("pod", "")
    if not pod:
        return None
    return labels.get("namespace", ""), pod, labels.get("container", "")


def new_host(hosts: dict[str, HostTally], name: str) -> HostTally:
    """A new, empty tally for host ``name``, refused past :data:`MAX_HOSTS` hosts."""
    if len(hosts) >= MAX_HOSTS:
        raise PrometheusError(
            "garbage", f"Prometheus answered with more than {MAX_HOSTS} hosts (the host limit, as many as "
            "gpulens keeps); narrow it with --prom-selector, e.g. '{cluster=\"a\"}'")
    h = hosts[name] = HostTally()
    return h


def _apply(hosts: dict[str, HostTally], row: MetricMap, scope: str, labels: Mapping[str, str], value: float) -> None:
    host = host_of(labels)
    if host is None or not math.isfinite(value):
        return
    ident = gpu_of(labels) if scope == "gpu" else None
    if scope == "gpu" and ident is None:
        return  # dcgm samples without a gpu label cannot be placed
    h = hosts.get(host)
    if h is None:
        h = new_host(hosts, host)
    if row.field == "host.unavailable":
        _apply_unavailable(h, labels)
    elif scope == "host":
        h.values.setdefault(row.field, value)
    elif scope == "gpu":
        assert ident is not None
        _apply_gpu(h, row, ident, labels, value)
    else:
        _apply_job(h, row.field, labels, value)


def _apply_unavailable(h: HostTally, labels: Mapping[str, str]) -> None:
    """``host.unavailable``: why a field (of the host, or of one GPU) has no value."""
    gpu, key, reason = labels.get("gpu", ""), labels.get("field", ""), labels.get("reason", "")
    if gpu.isdigit() and len(gpu) <= 4:
        h.gpus.setdefault(int(gpu), GpuTally()).unavailable[key] = reason
    elif key:
        h.unavailable[key] = reason


def _apply_gpu(h: HostTally, row: MetricMap, ident: tuple[int, str], labels: Mapping[str, str], value: float) -> None:
    """A GPU-scope series: the GPU's identity (instant rows only), then its value by field."""
    g = h.gpus.get(ident[0])
    if g is None:
        g = h.gpus[ident[0]] = GpuTally()
    if row.family == "amd":
        g.vendor, g.amd_exporter = "amd", True
    if not row.windowed:  # ids come from instant rows only, so the order of passes cannot change them
        g.uuid = g.uuid or ident[1]
        g.name = g.name or labels.get("name") or labels.get("modelName") or ""
        g.pod = g.pod or _pod_of(labels)
    _GPU_SPECIAL.get(row.field, _gpu_value)(g, row.field, labels, value)


def _gpu_value(g: GpuTally, field: str, labels: Mapping[str, str], value: float) -> None:
    g.values.setdefault(field[4:], value)


def _gpu_throttle_reason(g: GpuTally, field: str, labels: Mapping[str, str], value: float) -> None:
    g.throttle.add(labels.get("reason", "?"))


def _gpu_throttle_mask(g: GpuTally, field: str, labels: Mapping[str, str], value: float) -> None:
    g.throttle.update(throttle_names(value))


def _gpu_xid(g: GpuTally, field: str, labels: Mapping[str, str], value: float) -> None:
    code = labels.get("code", "")
    if code.isdigit() and len(code) <= 10:
        g.xids.add(int(code))


def _gpu_process(g: GpuTally, field: str, labels: Mapping[str, str], value: float) -> None:
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


def _apply_job(h: HostTally, field: str, labels: Mapping[str, str], value: float) -> None:
    """A job-scope series, placed by its ``pid`` label (skipped without a valid one)."""
    pid_text = labels.get("pid", "")
    if not pid_text.isdigit() or len(pid_text) > 10:
        return
    j = h.jobs.setdefault(int(pid_text), JobTally())
    if field == "job.info":
        j.labels = labels
    elif field == "job.gpu_mem_bytes":
        j.gpu_mem[labels.get("gpu", "?")] = int(value)
    else:
        j.values.setdefault(field[4:], value)


_SPECIAL = {"host.unavailable", "gpu.throttle_reasons", "gpu.throttle_mask", "gpu.xid_events", "gpu.processes"}


_INDEX = {str(i): i for i in range(256)}
"""GPU index label -> int, for the usual indexes (saves a parse per series)."""


def _apply_plain_host(hosts: dict[str, HostTally], row: MetricMap, answer: Answer, only: set[str] | None) -> None:
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
            h = new_host(hosts, host)
        h.values.setdefault(key, value)


def _apply_plain_gpu(hosts: dict[str, HostTally], row: MetricMap, answer: Answer, only: set[str] | None) -> None:
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
            h = new_host(hosts, host)
        g = h.gpus.get(i)
        if g is None:
            g = h.gpus[i] = GpuTally()
        if amd:
            g.vendor, g.amd_exporter = "amd", True
        elif ids and labels.get("vendor") == "amd":
            g.vendor = "amd"
        if ids:
            _identify(g, labels)
        if isfinite(value):
            g.values.setdefault(key, value)


def _identify(g: GpuTally, labels: Mapping[str, str]) -> None:
    """Fill the GPU's uuid, name and pod from a series' labels, where not known yet."""
    g.uuid = g.uuid or labels.get("uuid") or labels.get("UUID") or ""
    g.name = g.name or labels.get("name") or labels.get("modelName") or ""
    g.pod = g.pod or _pod_of(labels)


def _apply_row(hosts: dict[str, HostTally], row: MetricMap, answer: Answer, only: set[str] | None) -> None:
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


def apply_rows(hosts: dict[str, HostTally], answers: Iterable[tuple[MetricMap, Answer]],
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

    def __init__(self, hosts: dict[str, HostTally], adds_hosts: bool = False,
                 instant_hosts: frozenset[str] = frozenset()) -> None:
        self.hosts = hosts
        self.adds_hosts = adds_hosts
        self.instant_hosts = instant_hosts
        """The hosts instant rows named: the ones ``adds_hosts`` may add."""


def digest(answers: Iterable[tuple[MetricMap, Answer]], adds_hosts: bool = False) -> Digest:
    """Pre-apply cached answers (rows in table order) for
    :func:`~gpulens.sources.prometheus.assemble.assemble`'s ``digests``.

    ``adds_hosts``: the hosts of these answers are hosts of the samples even
    when the fresh answers do not name them (a dcgm-exporter host whose GPUs
    report only host-screen details, as in Datadog's scrape). For answers
    re-read every few polls, so a host that vanished lives on only until then.

    Raises:
        PrometheusError: the answers name more than :data:`MAX_HOSTS` hosts.
    """
    hosts: dict[str, HostTally] = {}
    instant = apply_rows(hosts, answers, windowed_anywhere=True)  # for hosts the fresh answers name
    return Digest(hosts, adds_hosts, frozenset(instant))


def merge(h: HostTally, c: HostTally) -> None:
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
            g = h.gpus[i] = GpuTally()
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
            j = h.jobs[pid] = JobTally()
        if cj.labels:
            j.labels = cj.labels
        j.gpu_mem.update(cj.gpu_mem)
        j.values = {**cj.values, **j.values}

