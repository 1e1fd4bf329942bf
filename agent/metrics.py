"""Serve the agent's samples as Prometheus ``/metrics``.

``gpulens agent --metrics-port [PORT]`` (default :data:`DEFAULT_METRICS_PORT`,
7790) calls :func:`serve_metrics`. A custom collector works at scrape time
only: it adds the samples taken since the previous scrape to the running
totals (:mod:`.metrics_counters`) and exports the newest sample's levels
with them (:mod:`.metrics_families`; docs/metrics.md lists every name).
Everything that accumulates is a counter, so ``rate()`` over any window is
the true average whatever the scrape interval.

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
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client.core import CollectorRegistry, Metric
from prometheus_client.exposition import make_wsgi_app
from prometheus_client.registry import Collector

from gpulens.agent.metrics_counters import Counters, job_label
from gpulens.agent.metrics_families import MAX_LABEL_CHARS, families
from gpulens.core.errors import ConfigError, ConfigProblem, SchemaError
from gpulens.core.model import CpuTimes, HostSample
from gpulens.ipc.prom_names import DEFAULT_METRICS_PORT

__all__ = [
    "DEFAULT_METRICS_PORT", "MAX_LABEL_CHARS", "MAX_METRICS_CONNECTIONS", "MetricsServer",
    "SampleCollector", "families", "job_label", "serve_metrics",
]
log = logging.getLogger(__name__)
MAX_METRICS_CONNECTIONS = 16
"""Connections served at once; one more gets 503 and is closed."""
METRICS_IO_TIMEOUT_S = 5.0
"""Each read or write on a /metrics connection."""
METRICS_CONN_DEADLINE_S = 30.0
"""A /metrics connection still open after this is shut down (a trickling client)."""
_BUSY = b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"

Latest = Callable[[], HostSample | None]
History = Callable[[float | None], list[bytes]]
"""``history(since)``: packed samples newer than ``since`` (all when None), oldest first."""
CpuTimesFn = Callable[[], Sequence[CpuTimes]]
"""The kernel's per-CPU time counters now (``collectors.host.read_cpu_times``)."""


class SampleCollector(Collector):
    """A prometheus-client collector: the newest sample's levels and the running totals.

    At each scrape every sample since the previous scrape is added to the
    totals: the agent's history (``history(since)``, packed samples oldest
    first) when given, else ``latest()`` alone (then samples between two
    scrapes are missed by the integrated totals; kernel counters are exact
    either way). The history ring holds ``--history-minutes`` of samples, so
    scrapes further apart than that lose the samples that fell out of it.
    """

    def __init__(self, latest: Latest, history: History | None = None, cpu_times: CpuTimesFn | None = None) -> None:
        self._latest = latest
        self._history = history
        self._cpu_times = cpu_times
        self._counters = Counters()
        self._lock = threading.Lock()

    def _catch_up(self) -> HostSample | None:
        if self._history is not None:
            from gpulens.ipc.errors import ProtocolError
            from gpulens.ipc.serialize import sample_from_msgpack

            for raw in self._history(self._counters.last_time):
                try:  # our own ring: a bad entry must not stop scrapes
                    s = sample_from_msgpack(raw)
                except (SchemaError, ProtocolError) as err:
                    log.debug("history sample skipped: %s", err)
                    continue
                self._counters.observe(s, cpu=self._integrate_cpu(s))
        sample = self._latest()
        if sample is not None:  # a no-op when the history already had it
            self._counters.observe(sample, cpu=self._integrate_cpu(sample))
        return sample

    def _integrate_cpu(self, s: HostSample) -> bool:
        return self._cpu_times is None or s.simulated

    def _kernel_cpu(self, s: HostSample) -> Sequence[CpuTimes]:
        if self._cpu_times is None or s.simulated:
            return ()
        try:
            return self._cpu_times()
        except OSError as err:  # absent this scrape, never 0
            log.debug("CPU counters unreadable: %s", err)
            return ()

    def collect(self) -> Iterator[Metric]:
        with self._lock:  # concurrent scrapes must not integrate one interval twice
            sample = self._catch_up()
            if sample is None:
                return iter(())
            return iter(families(sample, self._counters, self._kernel_cpu(sample)))


class _Handler(WSGIRequestHandler):
    """One request per connection, every socket operation bounded, nothing logged."""

    timeout = METRICS_IO_TIMEOUT_S  # StreamRequestHandler.setup() applies it to the connection

    def log_message(self, format: str, *args: object) -> None:
        """Log nothing."""


_Request = socket.socket | tuple[bytes, socket.socket]
"""What socketserver hands a server per request (a stream server's is the connected socket)."""


def _socket_of(request: _Request) -> socket.socket:
    return request if isinstance(request, socket.socket) else request[1]


class _BoundedServer(ThreadingMixIn, WSGIServer):
    """A thread per connection, at most ``MAX_METRICS_CONNECTIONS`` of them, each with a deadline."""

    daemon_threads = True
    block_on_close = False

    def server_activate(self) -> None:
        super().server_activate()
        self._slots = threading.BoundedSemaphore(MAX_METRICS_CONNECTIONS)
        self._open: dict[socket.socket, float] = {}
        self._open_lock = threading.Lock()

    def process_request(self, request: _Request, client_address: object) -> None:
        conn = _socket_of(request)
        if not self._slots.acquire(blocking=False):
            with contextlib.suppress(OSError):
                conn.setblocking(False)
                conn.send(_BUSY)
            self.shutdown_request(request)
            return
        with self._open_lock:
            self._open[conn] = time.monotonic() + METRICS_CONN_DEADLINE_S
        started = False
        try:
            super().process_request(request, client_address)
            started = True
        finally:
            if not started:  # no thread took it: free its slot here
                self._finished(request)

    def process_request_thread(self, request: _Request, client_address: object) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._finished(request)

    def _finished(self, request: _Request) -> None:
        with self._open_lock:
            if self._open.pop(_socket_of(request), None) is None:
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

@dataclass
class MetricsServer:
    """A running ``/metrics`` endpoint; ``close()`` stops it (idempotent)."""

    server: _BoundedServer | None
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
    port: int, host: str, latest: Latest, addr: str = "127.0.0.1", *, public: bool = False,
    history: History | None = None, cpu_times: CpuTimesFn | None = None,
) -> MetricsServer:
    """Serve ``/metrics`` on ``addr:port`` (``port=0`` picks a free one) from a bounded server.

    ``history`` (the agent's ``history_since``) lets the totals see every
    sample, not only the one current at each scrape (see :class:`SampleCollector`).
    ``cpu_times`` (``collectors.host.read_cpu_times``) gives the kernel's CPU
    counters at scrape time for samples of this machine (not SIMULATED ones);
    without it CPU seconds are integrated from the samples' percentages.

    ``host`` is the agent's host name; samples carry their own ``host`` label,
    so it is only used to name the serving thread. Binds loopback unless told
    otherwise; a non-loopback ``addr`` needs ``public=True``.

    Raises:
        ConfigError: a non-loopback ``addr`` without ``public``.
        OSError: the address cannot be bound (port in use, bad address).
    """
    from gpulens.agent.listener import is_loopback

    if not public and not is_loopback(addr):
        raise ConfigError(where=f"--metrics-addr {addr}", expected="--metrics-public", got=addr,
                          problem=ConfigProblem.CONFLICT,
                          detail="/metrics has no authentication, so a non-loopback address needs --metrics-public")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SampleCollector(latest, history, cpu_times))
    infos = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, sockaddr = infos[0]

    class _Server(_BoundedServer):
        address_family = family

    server = _Server((str(sockaddr[0]), port), _Handler)
    server.set_app(make_wsgi_app(registry))
    thread = threading.Thread(target=server.serve_forever, name=f"gpulens-metrics-{host}", daemon=True)
    thread.start()
    return MetricsServer(server=server, thread=thread, port=int(server.server_address[1]), addr=addr)
