"""The request runner: checks each viewer request against its principal and runs it, bounded.

Who asks decides (``gpulens.ipc.principal``): a samples-only connection
(TCP without a token) may send ``history`` only, anything else is refused
with :data:`~gpulens.ipc.principal.NOT_AUTHENTICATED`; every other request
names pids whose owners must be ones the principal may act for (the kinds
themselves, ``gpulens.agent.request_kinds``, check that).

``history``, ``processes``, ``trace_status``, ``trace_diagnose`` and ``trace_processes`` run inline on the
connection's own thread, so they never wait behind anyone's traces.
``profile`` (py-spy) and ``trace`` (the Kineto trace service) each run on a
daemon thread of their own, at most ``Limits.heavy`` at once on the agent,
``Limits.per_uid`` per principal uid and ``Limits.in_flight`` per
connection; one that cannot start is refused at once, naming the limit.
Both are listed in a connection's capabilities only when available and
allowed. ``endpoint_pass`` (a TUI's in-process endpoint owner only,
``gpulens.agent.kineto_owner.HandoverServer``) runs on a thread of its own
too: it waits for the owner's accepted traces to reach Kineto. Every
failure is an error response naming what went wrong; none ends the
connection.

A request's params are decoded into its kind's struct
(``gpulens.ipc.request_schema``) before it runs: a value that breaks the
schema is refused there with the field's own sentence, and each handler
gets checked values. :meth:`RequestRunner.handlers` is the one registry from
params struct to the function serving it; a handler's answer struct is
encoded as the response's result.

The runner is handed what it needs -- a history function, the host name,
the trace service (settable: the agent installs it once it started), a
function that finds the profiler, and its limits -- and knows nothing of
the agent or of sessions.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from gpulens.agent import request_kinds as kinds
from gpulens.agent.gpumem import GpuMemService, gpumem
from gpulens.agent.process_kind import processes
from gpulens.agent.request_kinds import (
    CHUNK_WAIT_S,
    HistoryFn,
    ProfilerFn,
    RequestConn,
    RequestError,
    find_profiler,
)
from gpulens.core.jobs_pattern import DEFAULT_JOB_KEY_ENV
from gpulens.ipc import stream
from gpulens.ipc.errors import ProtocolError
from gpulens.ipc.handover import KIND as HANDOVER_KIND
from gpulens.ipc.principal import NOT_AUTHENTICATED, Principal
from gpulens.ipc.refusal import NoSlot, NoSlotKind
from gpulens.ipc.request_schema import (
    Answer,
    GpuMemParams,
    HistoryParams,
    Params,
    ProcessesParams,
    ProfileParams,
    TraceDiagnoseParams,
    TraceParams,
    TraceProcessesParams,
    TraceStatusParams,
    answer_to_wire,
    decode_params,
)

if TYPE_CHECKING:
    from gpulens.collectors.processes import ProcessLister
    from gpulens.core.model import HostSample
    from gpulens.ipc.kineto.protocol import TraceService

__all__ = ["MAX_HEAVY", "MAX_HEAVY_PER_UID", "MAX_IN_FLIGHT", "Limits", "RequestError", "RequestRunner"]

log = logging.getLogger("gpulens.agent")

MAX_IN_FLIGHT = 4
"""Trace/profile requests one connection may have running at once."""
MAX_HEAVY = 8
"""Trace/profile requests running at once on the whole agent."""
MAX_HEAVY_PER_UID = 2
"""Trace/profile requests running at once for one principal uid (below MAX_HEAVY: no user fills the agent)."""
INLINE_KINDS = frozenset(p.kind for p in (HistoryParams, TraceStatusParams, TraceDiagnoseParams,
                                            TraceProcessesParams, ProcessesParams))
"""Quick requests answered on the connection's own thread."""

P = TypeVar("P", bound=Params[Answer])
Handler = Callable[[RequestConn, stream.Request], "Mapping[str, object]"]
"""Serves one request: its result map (the params decoded into their struct first, for a kind of the schema)."""
Handover = Callable[[Principal, Mapping[str, object]], "dict[str, object]"]
"""Hands an in-process owner's Kineto endpoint over (``endpoint_pass``: its own params check, ipc.handover)."""


def served(params: type[P], fn: Callable[[RequestConn, int, P], Answer]) -> tuple[str, Handler]:
    """``params``' kind and the handler that decodes a request's params into ``params`` (a refusal names the broken field),
    runs ``fn`` with them and encodes its answer."""

    def run(conn: RequestConn, req: stream.Request) -> Mapping[str, object]:
        try:
            decoded = decode_params(params.kind, req.params)
        except ProtocolError as err:
            raise RequestError(str(err)) from None
        assert isinstance(decoded, params)
        return answer_to_wire(fn(conn, req.id, decoded))

    return params.kind, run


@dataclass(frozen=True, slots=True)
class Limits:
    """How many trace/profile requests may run at once: per connection, per principal uid, on the agent."""

    in_flight: int = MAX_IN_FLIGHT
    per_uid: int = MAX_HEAVY_PER_UID
    heavy: int = MAX_HEAVY


class RequestRunner:
    """Checks each request against its connection's principal and runs it (inline or on its own thread)."""

    def __init__(
        self,
        *,
        history: HistoryFn,
        hostname: str,
        trace_service: TraceService | None = None,
        profiler: ProfilerFn = find_profiler,
        limits: Limits = Limits(),  # frozen: one default shared safely
        job_key_env: tuple[str, ...] = DEFAULT_JOB_KEY_ENV,
    ) -> None:
        self._history = history
        self.hostname = hostname
        self.trace_service: TraceService | None = trace_service
        self.trace_error = ""
        """Why there is no trace service (shown when a viewer asks for a trace anyway)."""
        self.profiler = profiler
        self.limits = limits
        self.job_key_env = job_key_env
        """Environment variables naming a process's job (the config's ``job_key_env``), in order."""
        self._in_flight: dict[int, int] = {}
        self._per_uid: dict[int, int] = {}
        self._heavy = 0
        self._closing = False
        self._lock = threading.Lock()
        self._progress = kinds.TraceProgress()
        self.gpumem: GpuMemService | None = None
        """``--gpumem``'s system-wide tracer (without it, a ``gpumem`` request traces a window itself)."""
        self.latest: Callable[[], HostSample | None] = lambda: None
        """The agent's newest sample: GPU memory NVML reports per pid now (what tracing did not see)."""
        self.lister: ProcessLister | None = None
        """This host's process table (``processes``); None: not served (a TUI's in-process endpoint owner)."""
        self.gpumem_windows = False
        """Whether ``gpumem`` requests trace a window when there is no tracer (``gpulens agent`` as root)."""
        self.handover: Handover | None = None
        """Hands this owner's Kineto endpoint over (set on a TUI's in-process owner only)."""

    def gpu_used(self, pid: int) -> int | None:
        """GPU memory NVML reports for ``pid`` in the newest sample (None: no GPU lists it)."""
        s = self.latest()
        found = [p.used_memory_bytes for g in (s.gpus if s else ()) for p in g.processes
                 if p.pid == pid and p.used_memory_bytes is not None]
        return sum(found) if found else None

    def served_kinds(self) -> tuple[str, ...]:
        """Every request kind this agent can serve now, to someone."""
        return tuple(self.handlers())

    def handlers(self) -> dict[str, Handler]:
        """The one registry from request kind (its params struct's ``kind``) to the function serving it, for
        what this agent has now (the trace service, the profiler and the tracer may come and go), in the
        order capabilities are listed."""
        table = [served(HistoryParams, lambda conn, rid, p: kinds.history(conn, rid, p, self._history))]
        if (lister := self.lister) is not None:
            table.append(served(ProcessesParams, lambda conn, rid, p: processes(conn, rid, p, lister, self.latest)))
        if (prof := self.profiler()) is not None:
            table.append(served(ProfileParams, lambda conn, rid, p: kinds.profile(conn, rid, p, prof, self.hostname)))
        if self.gpumem is not None or self.gpumem_windows:
            table.append(served(GpuMemParams, lambda conn, rid, p: gpumem(conn, rid, p, self.gpumem, self.hostname,
                                                                           self.gpu_used)))
        if (svc := self.trace_service) is not None:
            progress, env = self._progress, self.job_key_env
            table += [
                served(TraceParams, lambda conn, rid, p: kinds.trace(conn, rid, p, svc, progress, env)),
                served(TraceStatusParams, lambda conn, rid, p: kinds.trace_status(conn, rid, p, progress)),
                served(TraceDiagnoseParams, lambda conn, rid, p: kinds.trace_diagnose(conn, rid, p, svc)),
                served(TraceProcessesParams, lambda conn, rid, p: kinds.trace_processes(conn, rid, p, svc, env)),
            ]
        out = dict(table)
        if self.trace_service is not None and (handover := self.handover) is not None:
            out[HANDOVER_KIND] = lambda conn, req: handover(conn.principal, req.params)
        return out

    def capabilities(self, principal: Principal) -> tuple[str, ...]:
        """The request kinds ``principal`` may send (a samples-only peer: history)."""
        if principal.samples_only:
            return ("history",)
        return self.served_kinds()

    def close(self) -> None:
        """Refuse new trace/profile requests; running ones are daemons and need not be waited for."""
        with self._lock:
            self._closing = True

    def submit(self, conn: RequestConn, req: stream.Request) -> None:
        """Check ``req`` against ``conn``'s principal and run it; answers at once when it cannot run."""
        principal = conn.principal
        handler = self.handlers().get(req.kind)
        if handler is None:
            why = f" ({self.trace_error})" if req.kind == "trace" and self.trace_error else ""
            conn.put(_error(req, f"unsupported request kind {req.kind[:40]!r}{why}; this agent serves: "
                                 + ", ".join(self.capabilities(principal))), CHUNK_WAIT_S)
            return
        if req.kind not in self.capabilities(principal):
            conn.put(_error(req, NOT_AUTHENTICATED), CHUNK_WAIT_S)
            return
        if req.kind in INLINE_KINDS:
            self._run(handler, conn, req)
            return
        assert principal.uid is not None
        refusal = self._reserve(id(conn), principal.uid)
        if refusal is not None:
            conn.put(_error(req, str(refusal)), CHUNK_WAIT_S)
            return
        try:
            threading.Thread(
                target=self._run_heavy, args=(handler, conn, req, principal.uid),
                name=f"gpulens-request-{req.kind}", daemon=True,
            ).start()
        except RuntimeError as err:  # cannot start a thread (interpreter shutting down, no memory)
            self._release(id(conn), principal.uid)
            conn.put(_error(req, f"agent cannot start the request: {err}"), CHUNK_WAIT_S)

    def running(self) -> int:
        """Trace/profile requests running now."""
        with self._lock:
            return self._heavy

    def _reserve(self, key: int, uid: int) -> NoSlot | None:
        """Take a slot for connection ``key`` and ``uid`` (None), or why not (the viewer is told ``str()`` of it)."""
        lim = self.limits
        with self._lock:
            if self._closing:
                return NoSlot(NoSlotKind.STOPPING)
            if self._in_flight.get(key, 0) >= lim.in_flight:
                return NoSlot(NoSlotKind.IN_FLIGHT, lim.in_flight)
            if self._per_uid.get(uid, 0) >= lim.per_uid:
                return NoSlot(NoSlotKind.PER_UID, lim.per_uid, uid=uid)
            if self._heavy >= lim.heavy:
                return NoSlot(NoSlotKind.AGENT_FULL, lim.heavy)
            self._in_flight[key] = self._in_flight.get(key, 0) + 1
            self._per_uid[uid] = self._per_uid.get(uid, 0) + 1
            self._heavy += 1
            return None

    def _release(self, key: int, uid: int) -> None:
        with self._lock:
            for table, k in ((self._in_flight, key), (self._per_uid, uid)):
                n = table.get(k, 1) - 1
                if n <= 0:
                    table.pop(k, None)
                else:
                    table[k] = n
            self._heavy = max(0, self._heavy - 1)

    def _run_heavy(self, handler: Handler, conn: RequestConn, req: stream.Request, uid: int) -> None:
        try:
            self._run(handler, conn, req)
        finally:
            self._release(id(conn), uid)

    def _run(self, handler: Handler, conn: RequestConn, req: stream.Request) -> None:
        try:
            result = dict(handler(conn, req))
            conn.put(stream.encode(stream.Response(id=req.id, ok=True, result=result)), CHUNK_WAIT_S)
        except RequestError as err:
            conn.put(_error(req, str(err)), CHUNK_WAIT_S)
        except Exception as err:  # last resort of the request's thread: the viewer is answered whatever failed
            log.exception("request %s (%s) failed", req.id, req.kind)
            conn.put(_error(req, f"{type(err).__name__}: {err}"), CHUNK_WAIT_S)


def _error(req: stream.Request, message: str) -> bytes:
    return stream.encode(stream.Response(id=req.id, ok=False, error=message))
