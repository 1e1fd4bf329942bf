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

The agent is assembled from parts that do not know it: each
:class:`~gpulens.agent.sessions.ViewerConnection` sees it as a
:class:`~gpulens.agent.sessions.SessionHost`; the
:class:`~gpulens.agent.requests.RequestRunner` is handed the history
function, the host name, the trace service and the profiler; the
:class:`~gpulens.agent.listener.TcpListener` gets a serve function and a
busy check. The agent owns the sampling loop, the history ring, the viewer
registry and the trace service's lifetime (with the control socket).

The Kineto name taken when the agent starts: an
:class:`~gpulens.agent.kineto_owner.EndpointClaimer` asks a local gpulens
holding it (a TUI's in-process owner) to hand it over, or tries again every
``claim_retry_s`` seconds; meanwhile the agent serves without traces and
says why. A TUI's owner (:func:`endpoint_owner` + :meth:`Agent.allow_handover`)
answers such a request (docs/security.md, "hand-over").
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
from collections import deque
from collections.abc import Callable

from gpulens.agent.kineto_owner import CLAIM_RETRY_S, EventFn
from gpulens.agent.listener import PendingSlot, TcpListener
from gpulens.agent.request_kinds import ProfilerFn, find_profiler
from gpulens.agent.requests import RequestRunner
from gpulens.agent.sessions import Refusal, RefusalKind, ViewerConnection
from gpulens.agent.trace_host import TraceHost
from gpulens.collectors.processes import ProcessLister
from gpulens.core.events import HostSampler
from gpulens.core.logbook import Failure, call_guarded
from gpulens.core.model import HostSample
from gpulens.ipc import auth, stream
from gpulens.ipc.principal import SAMPLES_ONLY, Principal, owner
from gpulens.ipc.serialize import sample_to_dict
from gpulens.ipc.stream_frames import history_frames, pack_sample, sample_frame
from gpulens.ipc.transport import StdioTransport, Transport

log = logging.getLogger("gpulens.agent")

MAX_VIEWERS = 64
"""Admitted TCP viewers (past the token and hello) served at once."""
STDIO_HANDSHAKE_S = 30.0
"""The ssh viewer's hello may take longer (a slow link); it is the only stdio viewer anyway."""
STOP_JOIN_S = 1.0


Sampler = HostSampler
"""What the agent samples with (the protocol lives in core.events)."""


class Agent:
    """Sampling loop, history ring and viewer registry of one host; the :class:`SessionHost` of its viewers.

    ``profiler`` finds the py-spy sampler (tests hand in a fake). ``job_key_env``:
    the environment variables naming a process's job (the config's; default
    ``DEFAULT_JOB_KEY_ENV``).
    """

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
        profiler: ProfilerFn = find_profiler,
        job_key_env: tuple[str, ...] | None = None,
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
        self._slots: dict[int, PendingSlot] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_error = ""
        self.claim_retry_s = CLAIM_RETRY_S
        """How often a taken Kineto name is tried again (``gpulens agent --claim-retry``)."""
        self.requests = RequestRunner(history=self.history_since, hostname=hostname, profiler=profiler)
        self.requests.latest = lambda: self._latest
        self.requests.lister = ProcessLister()
        if job_key_env is not None:  # the config's: trace_processes and job_key traces read these
            self.requests.job_key_env = tuple(job_key_env)
        self._listener = TcpListener(self._serve_tcp, busy=self._busy)
        self.trace = TraceHost(self.requests, self._stop, lambda transport, peer, principal: self.serve_connection(
            transport, peer, principal=principal, kind="control"))
        """The trace service's lifetime: endpoint, claim, hand-over, control socket."""

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
        self._listener.shut_all()
        for conn in list(self._conns):
            conn.drop("agent stopping")
        self.requests.close()  # running requests are daemons: not waited for
        self.trace.close()
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
        except Exception as err:  # last resort of the sampling thread: a failing sampler must not end sampling
            msg = f"{type(err).__name__}: {err}"
            if msg != self._last_error:  # once per distinct error, with its traceback
                log.warning("sampling failed: %s", msg, exc_info=True)
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
            # A kind of its own for the log's rate limit: other peers' disconnects must not hide it.
            log.warning("dropping a slow viewer %s: %d frames queued unsent", v.peer, self.max_queued_frames)
            v.drop(f"slow viewer: {self.max_queued_frames} frames queued unsent")

    def _mark_polling(self, s: HostSample) -> HostSample:
        """Set ``kineto_polling`` on the jobs whose pid polls our Kineto endpoint (viewers offer tracing)."""
        svc = self.requests.trace_service
        if svc is None or not s.jobs:
            return s
        polling = call_guarded(log, "reading the pids polling Kineto", svc.polling_pids)
        if isinstance(polling, Failure):  # the sample matters more than the flag (and the sampling thread most)
            return s
        if not any(j.pid in polling for j in s.jobs):
            return s
        jobs = tuple(dataclasses.replace(j, kineto_polling=True) if j.pid in polling else j for j in s.jobs)
        return dataclasses.replace(s, jobs=jobs)

    # -- the trace service (agent.trace_host) -------------------------------------
    def start_trace_service(self, socket_dir: str | None = None, *, strict: bool = False) -> None:
        """Own this host's Kineto endpoint when the trace service is installed (and the control socket).

        ``socket_dir`` as for :class:`~gpulens.ipc.kineto.service.LocalTraceService`.
        ``strict``: raise why the endpoint could not be bound (EndpointBusy, ...)
        instead of logging it and serving without traces. Not strict, a taken
        name is claimed in the background (:class:`~gpulens.agent.kineto_owner.EndpointClaimer`):
        a local gpulens holding it is asked to hand it over; anyone else is
        tried again every ``claim_retry_s`` seconds.
        """
        self.trace.start(socket_dir, strict=strict, retry_s=self.claim_retry_s)

    def allow_handover(self, on_event: EventFn) -> None:
        """Hand this owner's endpoint over when a later agent of root or our uid asks (a TUI's owner).

        ``on_event`` is told ``draining``, then ``resumed`` or ``released``
        (see :class:`~gpulens.agent.kineto_owner.HandoverServer`).
        """
        self.trace.allow_handover(on_event)

    def reclaim_endpoint(self) -> None:
        """Take the Kineto name back after handing it over (the new owner exited or did not check out).

        Serves the control socket again and may hand over again. Raises as
        ``LocalTraceService.start`` (EndpointBusy: someone else holds it now).
        """
        self.trace.reclaim()

    # -- SessionHost: what each viewer connection asks of the agent -----------------
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

    def admit(self, conn: ViewerConnection) -> Refusal | None:
        """Admit a viewer that finished its handshake; the reason when it cannot be (busy)."""
        with self._lock:
            if conn.kind == "tcp" and self._admitted_tcp() >= MAX_VIEWERS:
                return Refusal(RefusalKind.VIEWERS_FULL, limit=MAX_VIEWERS)
            conn.admitted = True
            slot = self._slots.pop(id(conn), None)
        if slot is not None:
            slot.release()
        return None

    def subscribe(self, conn: ViewerConnection, since: float | None) -> None:
        """Send history newer than ``since`` (if given), then live samples."""
        with self._lock:
            if since is not None:
                for frame in history_frames(0, self._history_locked(since, None)):
                    conn.put(frame)
            self._viewers.add(conn)

    def submit(self, conn: ViewerConnection, req: stream.Request) -> None:
        """Hand the viewer's request to the request runner."""
        self.requests.submit(conn, req)

    def forget(self, conn: ViewerConnection) -> None:
        """A viewer closed: no more samples for it; its pending slot (if any) is freed."""
        with self._lock:
            self._viewers.discard(conn)
            self._conns.discard(conn)
            slot = self._slots.pop(id(conn), None)
        if slot is not None:
            slot.release()

    def history_since(self, since: float | None, until: float | None = None) -> list[bytes]:
        """Packed samples with ``since < time <= until``, oldest first."""
        with self._lock:
            return self._history_locked(since, until)

    def _history_locked(self, since: float | None, until: float | None) -> list[bytes]:
        lo = -math.inf if since is None else since
        hi = math.inf if until is None else until
        return [raw for t, raw in self._ring if lo < t <= hi]

    def _admitted_tcp(self) -> int:
        return sum(1 for c in self._conns if c.admitted and c.kind == "tcp")

    def _busy(self) -> Refusal | None:
        """The listener's ``busy``: the refusal :meth:`admit` would give a TCP viewer now (the listener
        logs it and sends its words as a ``busy`` error)."""
        with self._lock:
            full = self._admitted_tcp() >= MAX_VIEWERS
        return Refusal(RefusalKind.VIEWERS_FULL, limit=MAX_VIEWERS) if full else None

    # -- serving ------------------------------------------------------------------
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
        self._serve(transport, peer, principal=principal, kind=kind, deadline=deadline, slot=None)

    def _serve_tcp(self, transport: Transport, peer: str, deadline: float, slot: PendingSlot) -> None:
        self._serve(transport, peer, principal=None, kind="tcp", deadline=deadline, slot=slot)

    def _serve(
        self,
        transport: Transport,
        peer: str,
        *,
        principal: Principal | None,
        kind: str,
        deadline: float | None,
        slot: PendingSlot | None,
    ) -> None:
        token = None
        if principal is None:
            token = self.token
            principal = owner("token") if token is not None else SAMPLES_ONLY
        conn = ViewerConnection(
            self, transport, peer, principal=principal, token=token, replay_guard=self.replay_guard,
            max_queued_frames=self.max_queued_frames, kind=kind, deadline=deadline,
        )
        with self._lock:
            self._conns.add(conn)
            if slot is not None:
                self._slots[id(conn)] = slot
                slot.conn = conn
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
        """Accept viewers on a listening socket until ``stop`` (default: ``stop()``) is set (blocking)."""
        self._listener.run(sock, ssl_context, stop or self._stop)

    def pending_count(self) -> int:
        """TCP connections not yet admitted (for tests and the soak benchmark)."""
        return self._listener.pending_count()

SamplerFactory = Callable[..., Sampler]


class _NoSampler:
    """The sampler of an in-process endpoint owner: it serves traces, never samples."""

    def sample(self) -> HostSample:
        raise RuntimeError("an in-process endpoint owner does not sample")

    def close(self) -> None:
        """Nothing to release."""


def endpoint_owner(
    hostname: str, socket_dir: str | None = None, *, version: str = "", job_key_env: tuple[str, ...] | None = None
) -> Agent:
    """An in-process agent that owns this host's Kineto endpoint and serves its control socket.

    What a TUI watching this machine, or a ``gpulens trace`` that found the
    name free, runs: every other gpulens on the host then traces through its
    control socket (same ``SO_PEERCRED`` rule as a real agent: each peer for
    its own processes; a non-root owner serves only its user and root). It
    never samples (no history, no live samples on the control socket). A
    TUI's owner also calls :meth:`Agent.allow_handover`, so that an agent
    started later can take the endpoint over.

    Raises:
        EndpointBusy: the Kineto name is taken (by an agent, another gpulens, dynolog, ...).
        UnsafePath, IpcError, OSError: the socket directory cannot be used.
    """
    agent = Agent(_NoSampler(), hostname=hostname, version=version, job_key_env=job_key_env)
    agent.start_trace_service(socket_dir, strict=True)
    return agent
