"""Running totals for ``/metrics``: what accumulates, integrated over every sample.

Prometheus reads throughput with ``rate()`` over counters, so what it shows
over a window is the true amount whatever the scrape interval. The kernel's
own counters are exported as they are, as node_exporter does: network and
disk bytes travel in the sample, CPU seconds per mode are read at scrape
time. Everything else that accumulates is only known per interval (GPU
power, PCIe and NVLink throughput, XID events, throttle reasons, InfiniBand
throughput, a job's CPU use, and network/disk/CPU of SIMULATED samplers),
so :class:`Counters` integrates it here: each sample's rate times the time
since the previous sample (its rates are averages over exactly that
interval), power by the trapezoid rule. :meth:`Counters.observe` must see
every sample once, in order; the totals start at 0 when the agent starts
(Prometheus' ``rate()`` and ``increase()`` handle that as a counter reset).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from gpulens.core.model import GpuSample, HostSample, JobInfo

Labels = tuple[tuple[str, str], ...]
Key = tuple[str, Labels]
"""(metric name, label pairs in order)."""


@dataclass(frozen=True, slots=True)
class Total:
    """One integrated counter as /metrics exports it."""

    name: str
    labels: dict[str, str]
    value: float


def job_label(j: JobInfo) -> str:
    """The ``gpulens_job`` label of a job: its cross-host key, else ``pid-<pid>``."""
    return j.job_key or f"pid-{j.pid}"


def gpu_labels(host: str, g: GpuSample) -> tuple[tuple[str, str], ...]:
    """The labels naming one GPU in every GPU series; ``vendor`` only on a GPU not NVIDIA's
    (an AMD GPU's series say ``vendor="amd"``; NVIDIA series keep the labels they always had)."""
    base = (("host", host), ("gpu", str(g.index)), ("uuid", g.uuid))
    return base if g.vendor == "nvidia" else (*base, ("vendor", g.vendor))


class Counters:
    """Totals integrated from consecutive samples of one host (not thread-safe: one caller)."""

    def __init__(self) -> None:
        self._totals: dict[Key, float] = {}
        self._job_totals: dict[Key, float] = {}
        """Per-process totals, kept only while the process is in the samples."""
        self._last: HostSample | None = None
        self._xid_last: dict[tuple[tuple[str, str], ...], int] = {}
        self.observed = 0

    @property
    def last_time(self) -> float | None:
        """Time of the newest sample observed (None before the first)."""
        return None if self._last is None else self._last.time

    def _add(self, name: str, labels: tuple[tuple[str, str], ...], amount: float | None) -> None:
        if amount is None or amount != amount or amount < 0:  # None, NaN or negative: nothing known
            return
        key = (name, labels)
        self._totals[key] = self._totals.get(key, 0.0) + amount

    def _touch(self, name: str, labels: tuple[tuple[str, str], ...]) -> None:
        """Make the series exist at 0, so a reason or code seen for the first time is an increase."""
        self._totals.setdefault((name, labels), 0.0)

    def observe(self, s: HostSample, cpu: bool = True) -> None:
        """Add one sample's interval (the time since the previous sample) to the totals.

        ``cpu``: integrate CPU busy/idle seconds from the percentages (False when
        the kernel's own CPU counters are exported instead). A sample not newer
        than the previous one (the same sample again, or the clock stepped back)
        adds nothing; after a step back integration resumes from it.
        """
        prev = self._last
        if prev is not None and s.time <= prev.time:
            if s.time < prev.time:
                self._last = s
            return
        self._last = s
        self.observed += 1
        for g in s.gpus:  # events and states are counted even without a previous sample
            lab = gpu_labels(s.host, g)
            for code in g.xid_events:
                self._add("gpulens_gpu_xid_errors", (*lab, ("code", str(code))), 1.0)
                self._xid_last[lab] = code
            for reason in g.throttle_reasons:
                self._touch("gpulens_gpu_throttle_seconds", (*lab, ("reason", reason)))
        # the first sample makes every series exist at 0, so rate() has two points a scrape sooner
        dt = 0.0 if prev is None else s.time - prev.time
        self._host(s, dt, cpu)
        old_gpus = {g.uuid or str(g.index): g for g in prev.gpus} if prev is not None else {}
        for g in s.gpus:
            self._gpu(s.host, g, old_gpus.get(g.uuid or str(g.index)), dt)
        self._jobs(s, dt)

    def _host(self, s: HostSample, dt: float, cpu: bool) -> None:
        h: Labels = (("host", s.host),)
        lab: Labels
        n = s.network
        if not n.interfaces:  # a sampler with totals only (SIMULATED): no device label
            self._add("gpulens_network_receive_bytes", h, _times(n.rx_bytes_per_s, dt))
            self._add("gpulens_network_transmit_bytes", h, _times(n.tx_bytes_per_s, dt))
        for nic in n.interfaces:
            if nic.rx_bytes is None:
                lab = (*h, ("device", nic.name))
                self._add("gpulens_network_receive_bytes", lab, nic.rx_bytes_per_s * dt)
                self._add("gpulens_network_transmit_bytes", lab, nic.tx_bytes_per_s * dt)
        st = s.storage
        if not st.disks:
            self._add("gpulens_disk_read_bytes", h, _times(st.read_bytes_per_s, dt))
            self._add("gpulens_disk_written_bytes", h, _times(st.write_bytes_per_s, dt))
        for d in st.disks:
            if d.read_bytes is None:
                lab = (*h, ("device", d.name))
                self._add("gpulens_disk_read_bytes", lab, d.read_bytes_per_s * dt)
                self._add("gpulens_disk_written_bytes", lab, d.write_bytes_per_s * dt)
        c = s.cpu
        if cpu:  # no kernel counters: busy and idle seconds from the percentages
            cores = c.per_core_percent
            if cores:
                for i, pct in enumerate(cores):
                    self._cpu(h, str(i), pct, dt)
            elif c.total_percent is not None and c.count:
                for i in range(c.count):
                    self._cpu(h, str(i), c.total_percent, dt)
        self._add("gpulens_memory_traffic_bytes", h, _times(s.cache.mem_bandwidth_bytes_per_s, dt))
        for ib in s.infiniband:
            lab = (*h, ("device", ib.device), ("port", str(ib.port)))
            self._add("gpulens_infiniband_receive_bytes", lab, _times(ib.rx_bytes_per_s, dt))
            self._add("gpulens_infiniband_transmit_bytes", lab, _times(ib.tx_bytes_per_s, dt))

    def _cpu(self, h: tuple[tuple[str, str], ...], cpu: str, pct: float, dt: float) -> None:
        busy = min(max(pct, 0.0), 100.0) / 100.0
        self._add("gpulens_cpu_seconds", (*h, ("cpu", cpu), ("mode", "busy")), busy * dt)
        self._add("gpulens_cpu_seconds", (*h, ("cpu", cpu), ("mode", "idle")), (1.0 - busy) * dt)

    def _gpu(self, host: str, g: GpuSample, old: GpuSample | None, dt: float) -> None:
        lab = gpu_labels(host, g)
        if g.energy_joules is None and g.power_w is not None:
            before = old.power_w if old is not None and old.power_w is not None else g.power_w
            self._add("gpulens_gpu_energy_joules", lab, (before + g.power_w) / 2 * dt)
        self._add("gpulens_gpu_pcie_receive_bytes", lab, _times(g.pcie_rx_bytes_per_s, dt))
        self._add("gpulens_gpu_pcie_transmit_bytes", lab, _times(g.pcie_tx_bytes_per_s, dt))
        self._add("gpulens_gpu_nvlink_receive_bytes", lab, _times(g.nvlink_rx_bytes_per_s, dt))
        self._add("gpulens_gpu_nvlink_transmit_bytes", lab, _times(g.nvlink_tx_bytes_per_s, dt))
        for reason in g.throttle_reasons:
            self._add("gpulens_gpu_throttle_seconds", (*lab, ("reason", reason)), dt)

    def _jobs(self, s: HostSample, dt: float) -> None:
        """CPU seconds per process; a process that left the samples leaves the totals
        (pids are reused: a new process must start from 0, not from the old one's total)."""
        old, self._job_totals = self._job_totals, {}
        for j in s.jobs:
            key = ("gpulens_job_cpu_seconds",
                   (("host", s.host), ("gpulens_job", job_label(j)), ("pid", str(j.pid)),
                    ("start", f"{j.start_time:.0f}")))
            total = old.get(key, 0.0)
            if j.cpu_percent is not None and j.cpu_percent >= 0:
                total += j.cpu_percent / 100.0 * dt
            self._job_totals[key] = total

    def totals(self) -> Iterator[Total]:
        """Every total so far, names without ``_total`` (prometheus_client adds it)."""
        for table in (self._totals, self._job_totals):
            for (name, labels), value in table.items():
                yield Total(name, {k: v for k, v in labels if k != "start"}, value)

    def xid_last(self, host: str, g: GpuSample) -> int | None:
        """Code of the newest XID event of GPU ``g`` since the agent started."""
        return self._xid_last.get(gpu_labels(host, g))


def _times(rate: float | None, dt: float) -> float | None:
    return None if rate is None else rate * dt
