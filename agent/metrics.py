"""Serve the latest :class:`HostSample` as Prometheus ``/metrics``.

``gpulens agent --metrics-port PORT`` calls :func:`serve_metrics`. A custom
collector reads ``latest()`` at scrape time, so a scrape always shows the
newest sample and costs nothing between scrapes. Names follow Prometheus
conventions (base units: bytes, seconds, watts, hertz, celsius; ``_ratio``
for 0-1 fractions; ``_total`` for counters); docs/metrics.md lists them all.
A value that is ``None`` in the sample is *absent* from the exposition, never
0; its reason is exported as ``gpulens_metric_unavailable_info``.

``/metrics`` has no authentication: it binds loopback, and a non-loopback
address is refused unless the caller says ``public=True``
(``--metrics-public``). The server is bounded: at most
``MAX_METRICS_CONNECTIONS`` connections are served at once (one more is
answered ``503`` and closed without a thread), each socket operation times
out after ``METRICS_IO_TIMEOUT_S`` and a connection still open after
``METRICS_CONN_DEADLINE_S`` is shut down, so idle or trickling clients
cannot hold threads.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.exposition import make_wsgi_app
from prometheus_client.registry import Collector

from gpulens.core.errors import ConfigError
from gpulens.core.model import GpuSample, HostSample, JobInfo

MAX_LABEL_CHARS = 200
"""Longest label value exported (command lines, reasons): keeps scrapes bounded."""
MAX_METRICS_CONNECTIONS = 16
"""Connections served at once; one more gets 503 and is closed."""
METRICS_IO_TIMEOUT_S = 5.0
"""Each read or write on a /metrics connection."""
METRICS_CONN_DEADLINE_S = 30.0
"""A /metrics connection still open after this is shut down (a trickling client)."""
_BUSY = b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"

Latest = Callable[[], HostSample | None]


def _label(value: object) -> str:
    text = str(value)
    return text if len(text) <= MAX_LABEL_CHARS else text[: MAX_LABEL_CHARS - 3] + "..."


class _Families:
    """Metric families built for one scrape, created on first use."""

    def __init__(self) -> None:
        self._fams: dict[str, GaugeMetricFamily | CounterMetricFamily] = {}

    def add(
        self,
        name: str,
        doc: str,
        labels: dict[str, str],
        value: float | None,
        counter: bool = False,
    ) -> None:
        if value is None:
            return  # absent, not 0: the reason is in gpulens_metric_unavailable_info
        fam = self._fams.get(name)
        if fam is None:
            fam = (CounterMetricFamily if counter else GaugeMetricFamily)(name, doc, labels=list(labels))
            self._fams[name] = fam
        fam.add_metric([_label(v) for v in labels.values()], float(value))

    def metrics(self) -> Iterator[Metric]:
        return iter(self._fams.values())


def _host_metrics(f: _Families, s: HostSample) -> None:
    h = {"host": s.host}
    f.add("gpulens_sample_timestamp_seconds", "Unix time the sample was taken.", h, s.time)
    f.add("gpulens_host_simulated", "1 when the data is simulated (demo).", h, float(s.simulated))
    ratio = None if s.cpu.total_percent is None else s.cpu.total_percent / 100.0
    f.add("gpulens_cpu_utilization_ratio", "CPU busy fraction over the last interval, 0-1.", h, ratio)
    for core, pct in enumerate(s.cpu.per_core_percent):
        f.add("gpulens_cpu_core_utilization_ratio", "One core's busy fraction, 0-1.",
              {**h, "core": str(core)}, pct / 100.0)
    f.add("gpulens_cpu_load1", "1-minute load average.", h, s.cpu.load_avg_1m)
    f.add("gpulens_cpu_count", "Logical CPUs.", h, s.cpu.count)
    m = s.memory
    f.add("gpulens_memory_total_bytes", "Host memory size.", h, m.total_bytes)
    f.add("gpulens_memory_used_bytes", "Host memory in use.", h, m.used_bytes)
    f.add("gpulens_memory_available_bytes", "Host memory available.", h, m.available_bytes)
    f.add("gpulens_swap_used_bytes", "Swap in use.", h, m.swap_used_bytes)
    n = s.network
    f.add("gpulens_network_receive_bytes_per_second", "Received, all interfaces but lo.", h, n.rx_bytes_per_s)
    f.add("gpulens_network_transmit_bytes_per_second", "Sent, all interfaces but lo.", h, n.tx_bytes_per_s)
    for nic in n.interfaces:
        lab = {**h, "interface": nic.name}
        f.add("gpulens_network_interface_receive_bytes_per_second", "Received on one interface.", lab, nic.rx_bytes_per_s)
        f.add("gpulens_network_interface_transmit_bytes_per_second", "Sent on one interface.", lab, nic.tx_bytes_per_s)
    st = s.storage
    f.add("gpulens_storage_read_bytes_per_second", "Read, all whole disks.", h, st.read_bytes_per_s)
    f.add("gpulens_storage_write_bytes_per_second", "Written, all whole disks.", h, st.write_bytes_per_s)
    for disk in st.disks:
        lab = {**h, "disk": disk.name}
        f.add("gpulens_disk_read_bytes_per_second", "Read from one disk.", lab, disk.read_bytes_per_s)
        f.add("gpulens_disk_write_bytes_per_second", "Written to one disk.", lab, disk.write_bytes_per_s)
    c = s.cache
    f.add("gpulens_cache_l2_hit_ratio", "L2 cache hit ratio, 0-1.", h, c.l2_hit_ratio)
    f.add("gpulens_cache_l3_hit_ratio", "L3 cache hit ratio, 0-1.", h, c.l3_hit_ratio)
    f.add("gpulens_memory_bandwidth_bytes_per_second", "DRAM bandwidth.", h, c.mem_bandwidth_bytes_per_s)
    for ib in s.infiniband:
        lab = {**h, "device": ib.device, "port": str(ib.port)}
        f.add("gpulens_infiniband_receive_bytes_per_second", "InfiniBand port received.", lab, ib.rx_bytes_per_s)
        f.add("gpulens_infiniband_transmit_bytes_per_second", "InfiniBand port sent.", lab, ib.tx_bytes_per_s)
        f.add("gpulens_infiniband_symbol_errors", "Symbol errors (port counter).", lab, ib.symbol_errors, counter=True)
        f.add("gpulens_infiniband_link_downed", "Link-downed events (port counter).", lab, ib.link_downed, counter=True)
    for key, reason in s.unavailable.items():
        f.add("gpulens_metric_unavailable_info", "A metric that could not be read, with why.",
              {**h, "gpu": "", "field": key, "reason": reason}, 1.0)


def _pct(v: float | None) -> float | None:
    return None if v is None else v / 100.0


def _mhz(v: int | None) -> float | None:
    return None if v is None else v * 1e6


def _gpu_metrics(f: _Families, host: str, g: GpuSample) -> None:
    lab = {"host": host, "gpu": str(g.index), "uuid": g.uuid}
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
        ("gpulens_gpu_pcie_receive_bytes_per_second", "PCIe received.", g.pcie_rx_bytes_per_s),
        ("gpulens_gpu_pcie_transmit_bytes_per_second", "PCIe sent.", g.pcie_tx_bytes_per_s),
        ("gpulens_gpu_nvlink_receive_bytes_per_second", "NVLink received.", g.nvlink_rx_bytes_per_s),
        ("gpulens_gpu_nvlink_transmit_bytes_per_second", "NVLink sent.", g.nvlink_tx_bytes_per_s),
        ("gpulens_gpu_sm_active_ratio", "SM activity, 0-1 (GPM / DCGM PROF_SM_ACTIVE).", _pct(g.sm_activity_percent)),
        ("gpulens_gpu_sm_occupancy_ratio", "SM occupancy, 0-1.", _pct(g.sm_occupancy_percent)),
        ("gpulens_gpu_dram_active_ratio", "DRAM interface active, 0-1.", _pct(g.dram_bw_util_percent)),
    )
    for name, doc, value in rows:
        f.add(name, doc, lab, value)
    f.add("gpulens_gpu_ecc_corrected_errors", "Corrected ECC errors.", lab, g.ecc_corrected, counter=True)
    f.add("gpulens_gpu_ecc_uncorrected_errors", "Uncorrected ECC errors.", lab, g.ecc_uncorrected, counter=True)
    f.add("gpulens_gpu_xid_events", "XID events seen in the last interval.", lab, float(len(g.xid_events)))
    if g.xid_events:
        f.add("gpulens_gpu_xid_last_code", "Code of the last XID event.", lab, g.xid_events[-1])
    for reason in g.throttle_reasons:
        f.add("gpulens_gpu_throttle_reason", "Active clock throttle reason (value 1).", {**lab, "reason": reason}, 1.0)
    for p in g.processes:
        plab = {**lab, "pid": str(p.pid)}
        f.add("gpulens_gpu_process_memory_used_bytes", "GPU memory of one process.", plab, p.used_memory_bytes)
        f.add("gpulens_gpu_process_sm_utilization_ratio", "SM share of one process, 0-1.", plab, _pct(p.sm_util_percent))
    for key, reason in g.unavailable.items():
        f.add("gpulens_metric_unavailable_info", "A metric that could not be read, with why.",
              {"host": host, "gpu": str(g.index), "field": key, "reason": reason}, 1.0)


def job_label(j: JobInfo) -> str:
    """The ``job`` label of a job: its cross-host key, else ``pid-<pid>``."""
    return j.job_key or f"pid-{j.pid}"


def _job_metrics(f: _Families, host: str, j: JobInfo) -> None:
    lab = {"host": host, "job": job_label(j), "pid": str(j.pid)}
    info = {**lab, "user": j.user, "tree_id": j.tree_id, "cmdline": j.cmdline, "job_key": j.job_key or ""}
    f.add("gpulens_job_info", "A job process (value 1); facts in labels.", info, 1.0)
    f.add("gpulens_job_start_time_seconds", "Unix time the process started.", lab, j.start_time)
    f.add("gpulens_job_cpu_utilization_ratio", "CPU used, in cores (1.0 = one core busy).", lab, _pct(j.cpu_percent))
    f.add("gpulens_job_resident_memory_bytes", "Resident set size.", lab, j.rss_bytes)
    for gpu, used in j.gpu_mem_bytes.items():
        f.add("gpulens_job_gpu_memory_used_bytes", "GPU memory of the job on one GPU.", {**lab, "gpu": gpu}, used)


def families(sample: HostSample) -> list[Metric]:
    """Every metric family for one sample (pure; used by the collector and tests)."""
    f = _Families()
    _host_metrics(f, sample)
    for g in sample.gpus:
        _gpu_metrics(f, sample.host, g)
    for j in sample.jobs:
        _job_metrics(f, sample.host, j)
    return list(f.metrics())


class SampleCollector(Collector):
    """A prometheus-client collector reading ``latest()`` at each scrape."""

    def __init__(self, latest: Latest) -> None:
        self._latest = latest

    def collect(self) -> Iterator[Metric]:
        sample = self._latest()
        if sample is None:
            return iter(())
        return iter(families(sample))


class _Handler(WSGIRequestHandler):
    """One request per connection, every socket operation bounded, nothing logged."""

    timeout = METRICS_IO_TIMEOUT_S  # StreamRequestHandler.setup() applies it to the connection

    def log_message(self, format: str, *args: Any) -> None:
        """Log nothing."""


class _BoundedServer(ThreadingMixIn, WSGIServer):
    """A thread per connection, at most ``MAX_METRICS_CONNECTIONS`` of them, each with a deadline."""

    daemon_threads = True
    block_on_close = False

    def server_activate(self) -> None:
        super().server_activate()
        self._slots = threading.BoundedSemaphore(MAX_METRICS_CONNECTIONS)
        self._open: dict[socket.socket, float] = {}
        self._open_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            with contextlib.suppress(OSError):
                request.setblocking(False)
                request.send(_BUSY)
            self.shutdown_request(request)
            return
        with self._open_lock:
            self._open[request] = time.monotonic() + METRICS_CONN_DEADLINE_S
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._finished(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._finished(request)

    def _finished(self, request: Any) -> None:
        with self._open_lock:
            if self._open.pop(request, None) is None:
                return
        self._slots.release()

    def service_actions(self) -> None:
        """Called by serve_forever about twice a second: shut connections past their deadline."""
        now = time.monotonic()
        with self._open_lock:
            late = [r for r, deadline in self._open.items() if deadline < now]
        for request in late:
            with contextlib.suppress(OSError):
                request.shutdown(socket.SHUT_RDWR)

    def active_connections(self) -> int:
        """Connections being served now."""
        with self._open_lock:
            return len(self._open)


@dataclass
class MetricsServer:
    """A running ``/metrics`` endpoint; ``close()`` stops it (idempotent)."""

    server: Any
    thread: threading.Thread
    port: int
    addr: str

    def close(self) -> None:
        """Stop serving and free the port."""
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
            self.thread.join(timeout=5)


def serve_metrics(
    port: int, host: str, latest: Latest, addr: str = "127.0.0.1", *, public: bool = False
) -> MetricsServer:
    """Serve ``/metrics`` on ``addr:port`` (``port=0`` picks a free one) from a bounded server.

    ``host`` is the agent's host name; samples carry their own ``host`` label,
    so it is only used to name the serving thread. Binds loopback unless told
    otherwise; a non-loopback ``addr`` needs ``public=True``.

    Raises:
        ConfigError: a non-loopback ``addr`` without ``public``.
        OSError: the address cannot be bound (port in use, bad address).
    """
    from gpulens.agent.listener import is_loopback

    if not public and not is_loopback(addr):
        raise ConfigError(
            f"--metrics-addr {addr}: /metrics has no authentication, so a non-loopback address needs --metrics-public"
        )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SampleCollector(latest))
    infos = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, sockaddr = infos[0]

    class _Server(_BoundedServer):
        address_family = family

    server = _Server((str(sockaddr[0]), port), _Handler)
    server.set_app(make_wsgi_app(registry))
    thread = threading.Thread(target=server.serve_forever, name=f"gpulens-metrics-{host}", daemon=True)
    thread.start()
    return MetricsServer(server=server, thread=thread, port=int(server.server_address[1]), addr=addr)
