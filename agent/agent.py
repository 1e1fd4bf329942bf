"""The gpulens agent: samples this host, keeps history, serves viewers.

One sampling thread calls ``sampler.sample()`` every ``interval_s``, encodes
the sample once, appends it to a bounded history ring and offers the frame
to every subscribed viewer. Viewers come over TCP (``serve_tcp``), the
local control socket (``gpulens.ipc.control``) or stdin/stdout
(``serve_stdio``). Subscribing and sampling share one lock, so a viewer's
backfill (history newer than its ``since``) and its live stream meet with
neither a gap nor a duplicate.

Authority: who asks decides what is allowed (``gpulens.ipc.principal``).
A TCP or TLS viewer that proved the token acts with the agent owner's
authority; without a token configured a TCP viewer gets samples and
history only; a control-socket peer acts for its own uid (``SO_PEERCRED``);
stdio (ssh) is the owner. Limits: at most ``MAX_PENDING`` TCP connections
may be unauthenticated at once (the oldest is dropped for a new one, so a
flood of idle sockets never locks out a real viewer), each with
``HANDSHAKE_TIMEOUT_S`` for TLS, token and hello; at most ``MAX_VIEWERS``
admitted TCP viewers. Every thread is a daemon, so SIGTERM exits at once.

Nothing a viewer does can stop the agent: each connection's failures are
caught in :class:`~gpulens.agent.sessions.ViewerConnection`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import socket
import ssl
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable

from gpulens.agent.requests import RequestRunner
from gpulens.agent.sessions import HANDSHAKE_TIMEOUT_S, ViewerConnection
from gpulens.core.events import HostSampler
from gpulens.core.model import HostSample
from gpulens.ipc import auth, stream
from gpulens.ipc.principal import SAMPLES_ONLY, Principal, owner
from gpulens.ipc.serialize import sample_to_dict
from gpulens.ipc.stream_frames import history_frames, pack_sample, sample_frame
from gpulens.ipc.transport import SocketTransport, StdioTransport, Transport

log = logging.getLogger("gpulens.agent")

MAX_VIEWERS = 64
"""Admitted TCP viewers (past the token and hello) served at once."""
MAX_PENDING = 16
"""TCP connections not yet through TLS, token and hello; a new one drops the oldest."""
STDIO_HANDSHAKE_S = 30.0
"""The ssh viewer's hello may take longer (a slow link); it is the only stdio viewer anyway."""
STOP_JOIN_S = 1.0


Sampler = HostSampler
"""What the agent samples with (the protocol lives in core.events)."""


class Agent:
    """Sampling loop, history ring and viewer registry of one host."""

    def __init__(
        self,
        sampler: Sampler,
        *,
        hostname: str,
        interval_s: float = 1.0,
        history_s: float = 900.0,
        token: bytes | None = None,
        max_queued_frames: int = 128,
        version: str = "",
    ) -> None:
        self.sampler = sampler
        self.hostname = hostname
        self.interval_s = interval_s
        self.token = token
        self.max_queued_frames = max_queued_frames
        self.version = version
        self.replay_guard = auth.ReplayGuard()
        self._ring: deque[tuple[float, bytes]] = deque(maxlen=max(1, math.ceil(history_s / interval_s) + 1))
        self._history_s = history_s
        self._latest: HostSample | None = None
        self._lock = threading.Lock()
        self._viewers: set[ViewerConnection] = set()
        self._conns: set[ViewerConnection] = set()
        self._pending: OrderedDict[_Gate, None] = OrderedDict()
        self._gates: dict[int, _Gate] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_error = ""
        self.requests = RequestRunner(self)

    # -- sampling ---------------------------------------------------------------
    def start(self) -> None:
        """Start the sampling thread."""
        self._thread = threading.Thread(target=self._loop, name="gpulens-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop sampling, drop every viewer, close the sampler and services."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=STOP_JOIN_S)  # a daemon: a wedged sampler cannot hold the exit
        with self._lock:
            gates = list(self._pending)
            self._pending.clear()
        for gate in gates:
            gate.shut()
        for conn in list(self._conns):
            conn.drop("agent stopping")
        self.requests.close()
        with contextlib.suppress(Exception):
            self.sampler.close()

    def latest(self) -> HostSample | None:
        """The newest sample (for ``--metrics-port``)."""
        return self._latest

    def _loop(self) -> None:
        next_t = time.monotonic()
        while not self._stop.is_set():
            self.sample_once()
            next_t += self.interval_s
            now = time.monotonic()
            if next_t < now:  # fell behind (slow sampler): skip ticks, never burst
                next_t = now
            self._stop.wait(next_t - now)

    def sample_once(self) -> None:
        """Take one sample and fan it out; a failing sampler is logged, not fatal."""
        try:
            s = self.sampler.sample()
        except Exception as err:
            msg = f"{type(err).__name__}: {err}"
            if msg != self._last_error:
                log.warning("sampling failed: %s", msg)
                self._last_error = msg
            return
        if s.host != self.hostname:
            s = dataclasses.replace(s, host=self.hostname)
        s = self._mark_polling(s)
        raw = pack_sample(sample_to_dict(s))
        frame = sample_frame(raw)
        slow: list[ViewerConnection] = []
        with self._lock:
            self._ring.append((s.time, raw))
            cutoff = s.time - self._history_s
            while self._ring and self._ring[0][0] < cutoff:
                self._ring.popleft()
            self._latest = s
            for v in self._viewers:
                if not v.offer(frame):
                    slow.append(v)
        for v in slow:
            v.drop(f"slow viewer: {self.max_queued_frames} frames queued unsent")

    def _mark_polling(self, s: HostSample) -> HostSample:
        """Set ``kineto_polling`` on the jobs whose pid polls our Kineto endpoint (viewers offer tracing)."""
        svc = self.requests.trace_service
        if svc is None or not s.jobs:
            return s
        try:
            polling = svc.polling_pids()
        except Exception as err:  # the sample matters more than the flag
            log.debug("polling pids unavailable: %s", err)
            return s
        if not any(j.pid in polling for j in s.jobs):
            return s
        jobs = tuple(dataclasses.replace(j, kineto_polling=True) if j.pid in polling else j for j in s.jobs)
        return dataclasses.replace(s, jobs=jobs)

    # -- viewers ----------------------------------------------------------------
    def hello(self, principal: Principal) -> stream.Hello:
        """The agent's hello to a viewer; ``caps`` lists what THIS viewer may request."""
        return stream.Hello(
            proto=stream.PROTOCOL_VERSION,
            role="agent",
            host=self.hostname,
            caps=self.requests.capabilities(principal),
            version=self.version,
            interval_s=self.interval_s,
        )

    def history_since(self, since: float | None, until: float | None = None) -> list[bytes]:
        """Packed samples with ``since < time <= until``, oldest first."""
        with self._lock:
            return self._history_locked(since, until)

    def _history_locked(self, since: float | None, until: float | None) -> list[bytes]:
        lo = -math.inf if since is None else since
        hi = math.inf if until is None else until
        return [raw for t, raw in self._ring if lo < t <= hi]

    def subscribe(self, conn: ViewerConnection, since: float | None) -> None:
        """Send history newer than ``since`` (if given), then live samples."""
        with self._lock:
            if since is not None:
                for frame in history_frames(0, self._history_locked(since, None)):
                    conn.put(frame)
            self._viewers.add(conn)

    def _forget(self, conn: ViewerConnection) -> None:
        with self._lock:
            self._viewers.discard(conn)
            self._conns.discard(conn)
            gate = self._gates.pop(id(conn), None)
            if gate is not None:
                self._pending.pop(gate, None)
        if gate is not None:
            gate.close()

    def admit(self, conn: ViewerConnection) -> str | None:
        """Admit a viewer that finished its handshake; the reason when it cannot be (busy)."""
        with self._lock:
            if conn.kind == "tcp" and self._admitted_tcp() >= MAX_VIEWERS:
                return f"agent has {MAX_VIEWERS} viewers"
            conn.admitted = True
            gate = self._gates.pop(id(conn), None)
            if gate is not None:
                self._pending.pop(gate, None)
        if gate is not None:
            gate.close()
        return None

    def _admitted_tcp(self) -> int:
        return sum(1 for c in self._conns if c.admitted and c.kind == "tcp")

    def serve_connection(
        self,
        transport: Transport,
        peer: str,
        *,
        principal: Principal | None = None,
        kind: str = "tcp",
        deadline: float | None = None,
    ) -> None:
        """Serve one viewer on ``transport`` until it leaves (blocking).

        ``principal`` None: a TCP viewer, whose authority the token decides
        (the owner's once it proves the agent's token; samples only when the
        agent has none). The control socket and stdio pass the principal the
        transport already proved (no token challenge then).
        """
        self._serve(transport, peer, principal=principal, kind=kind, deadline=deadline, gate=None)

    def _serve(
        self,
        transport: Transport,
        peer: str,
        *,
        principal: Principal | None,
        kind: str,
        deadline: float | None,
        gate: _Gate | None,
    ) -> None:
        token = None
        if principal is None:
            token = self.token
            principal = owner("token") if token is not None else SAMPLES_ONLY
        conn = ViewerConnection(
            self, transport, peer, principal=principal, token=token,
            max_queued_frames=self.max_queued_frames, kind=kind, deadline=deadline,
        )
        conn.on_close = self._forget
        with self._lock:
            self._conns.add(conn)
            if gate is not None:
                self._gates[id(conn)] = gate
                gate.conn = conn
        log.info("viewer %s connected", peer)
        conn.run()

    def serve_stdio(self, rfd: int, wfd: int) -> None:
        """Serve the one viewer on stdin/stdout (owner authority: ssh logged it in); returns when it leaves."""
        self.serve_connection(
            StdioTransport(rfd, wfd), "stdio", principal=owner("stdio"), kind="stdio",
            deadline=time.monotonic() + STDIO_HANDSHAKE_S,
        )

    def serve_tcp(
        self,
        sock: socket.socket,
        ssl_context: ssl.SSLContext | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        """Accept viewers on a listening socket until ``stop`` is set (blocking)."""
        stop = stop or self._stop
        sock.settimeout(0.5)
        while not stop.is_set():
            try:
                client, addr = sock.accept()
            except TimeoutError:
                continue
            except OSError as err:
                log.warning("accept failed: %s", err)
                time.sleep(0.1)
                continue
            self._accept_tcp(client, f"{addr[0]}:{addr[1]}", ssl_context)

    def _accept_tcp(self, client: socket.socket, peer: str, ssl_context: ssl.SSLContext | None) -> None:
        """Give a new TCP connection a pending slot (dropping the oldest pending one if full) and a thread."""
        with self._lock:
            full = self._admitted_tcp() >= MAX_VIEWERS
        if full:
            log.warning("refusing viewer %s: %d viewers already connected", peer, MAX_VIEWERS)
            with contextlib.suppress(OSError):
                client.setblocking(False)
                client.send(stream.encode(stream.ErrorMsg("busy", f"agent has {MAX_VIEWERS} viewers")))
            client.close()
            return
        try:
            gate = _Gate(client, peer)
        except OSError as err:  # out of file descriptors
            log.warning("refusing viewer %s: %s", peer, err.strerror or err)
            client.close()
            return
        evicted = None
        with self._lock:
            if len(self._pending) >= MAX_PENDING:
                evicted, _ = self._pending.popitem(last=False)
            self._pending[gate] = None
        if evicted is not None:
            why = f"dropped: {MAX_PENDING} newer connections are still unauthenticated"
            log.info("viewer %s %s", evicted.peer, why)
            evicted.shut(why)
        threading.Thread(
            target=self._serve_socket, args=(client, peer, ssl_context, gate), name=f"gpulens-viewer-{peer}", daemon=True
        ).start()

    def _serve_socket(
        self, client: socket.socket, peer: str, ssl_context: ssl.SSLContext | None, gate: _Gate
    ) -> None:
        deadline = time.monotonic() + HANDSHAKE_TIMEOUT_S
        try:
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # A fixed send buffer turns off kernel autotuning, so a stalled viewer
            # fills it quickly and the bounded queue (not megabytes of kernel
            # memory) decides when it is dropped.
            client.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 256 * 1024)
            if ssl_context is not None:
                # The whole handshake is bounded (CPython applies one deadline per call).
                client.settimeout(max(deadline - time.monotonic(), 0.001))
                try:
                    client = ssl_context.wrap_socket(client, server_side=True)
                except (OSError, ssl.SSLError) as err:
                    log.info("viewer %s: TLS handshake failed: %s", peer, err)
                    client.close()
                    return
            self._serve(SocketTransport(client), peer, principal=None, kind="tcp", deadline=deadline, gate=gate)
        except OSError as err:
            log.info("viewer %s: %s", peer, err.strerror or err)
            with contextlib.suppress(OSError):
                client.close()
        finally:
            with self._lock:
                self._pending.pop(gate, None)
            gate.close()

    def pending_count(self) -> int:
        """TCP connections not yet admitted (for tests and the soak benchmark)."""
        with self._lock:
            return len(self._pending)

    def viewer_count(self) -> int:
        """Viewers subscribed to live samples now."""
        with self._lock:
            return len(self._viewers)


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket (SO_REUSEADDR so a restarted agent gets its port back).

    Raises:
        OSError: the name does not resolve, or the port is taken / not allowed.
    """
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, addr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def is_loopback(host: str) -> bool:
    """True when every address ``host`` resolves to is a loopback address."""
    import ipaddress

    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    try:
        return all(ipaddress.ip_address(str(i[4][0]).split("%")[0]).is_loopback for i in infos)
    except ValueError:
        return False


class _Gate:
    """A pending TCP connection's slot: a duplicate of its socket, to shut it down from the accept thread.

    ``shutdown`` acts on the socket, not the descriptor, so it wakes the
    connection's thread wherever it blocks (TLS handshake included) without
    closing a descriptor that thread still uses.
    """

    def __init__(self, client: socket.socket, peer: str) -> None:
        self.peer = peer
        self.conn: ViewerConnection | None = None
        self._dup: socket.socket | None = client.dup()
        self._lock = threading.Lock()

    def shut(self, reason: str = "agent stopping") -> None:
        """Wake and end the connection (idempotent)."""
        with self._lock:
            if self.conn is not None and not self.conn.reason:
                self.conn.reason = reason
            if self._dup is not None:
                with contextlib.suppress(OSError):
                    self._dup.shutdown(socket.SHUT_RDWR)
        self.close()

    def close(self) -> None:
        """Release the duplicate descriptor (the connection itself goes on)."""
        with self._lock:
            dup, self._dup = self._dup, None
        if dup is not None:
            with contextlib.suppress(OSError):
                dup.close()


SamplerFactory = Callable[..., Sampler]
