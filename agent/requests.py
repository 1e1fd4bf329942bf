"""Requests a viewer can send to the agent: history, profile, trace, trace_status, trace_diagnose.

Who asks decides (``gpulens.ipc.principal``): a samples-only connection
(TCP without a token) may send ``history`` only, anything else is refused
with :data:`~gpulens.ipc.principal.NOT_AUTHENTICATED`; every other request
names pids, and each pid's owner (read from /proc when the request is
checked) must be one the principal may act for (``may_trace``: its own
uid, or anyone for root) -- never the agent's uid. The owner captured then
is the owner every result file must have: files are opened with
``safefs.open_regular_at`` (no symlink, no FIFO or device, owned by the
target, bounded size) and read from that descriptor. A job-id trace is
resolved to the polling pids of that job the principal may trace.

``history``, ``trace_status`` and ``trace_diagnose`` run inline on the
connection's own thread, so they never wait behind anyone's traces.
``profile`` (py-spy, ``gpulens.analysis.flame.pyspy``) and ``trace``
(``gpulens.ipc.kineto.service.LocalTraceService``) each run on a daemon thread of
their own, at most ``MAX_HEAVY`` at once on the agent, ``MAX_HEAVY_PER_UID``
per principal uid and ``MAX_IN_FLIGHT`` per connection; one that cannot
start is refused at once. Both are listed in a connection's capabilities
only when importable and allowed. When the agent owns the Kineto endpoint
it also serves the local control socket (``gpulens.ipc.control``). Results
that are files travel as ``chunk`` messages before the request's
``response``. Every failure is an error response naming what went wrong;
none ends the connection.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpulens.ipc import stream
from gpulens.ipc.principal import NOT_AUTHENTICATED, Principal

if TYPE_CHECKING:
    from gpulens.agent.agent import Agent
    from gpulens.agent.sessions import ViewerConnection

log = logging.getLogger("gpulens.agent")

MAX_IN_FLIGHT = 4
"""Trace/profile requests one connection may have running at once."""
MAX_HEAVY = 8
"""Trace/profile requests running at once on the whole agent."""
MAX_HEAVY_PER_UID = 2
"""Trace/profile requests running at once for one principal uid (below MAX_HEAVY: no user fills the agent)."""
INLINE_KINDS = frozenset({"history", "trace_status", "trace_diagnose"})
"""Quick requests answered on the connection's own thread."""
MAX_FILE_BYTES = 2 * 1024**3
MAX_PIDS = 64
MAX_PROFILE_S = 60.0
CHUNK_WAIT_S = 30.0
MAX_TAGS = 256
"""Trace progress entries kept for ``trace_status`` (oldest forgotten first)."""
MAX_EVENTS = 64
"""Progress events kept per tag (a trace of many pids has a few per pid)."""
_TAG = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class RequestError(Exception):
    """A request that cannot be honoured; the message goes back to the viewer."""


class RequestRunner:
    """Checks each request against its connection's principal and runs it (inline or on its own thread)."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self._in_flight: dict[int, int] = {}
        self._per_uid: dict[int, int] = {}
        self._heavy = 0
        self._closing = False
        self._lock = threading.Lock()
        self.trace_service: Any = None
        self.trace_error = ""
        self.control: Any = None
        # (viewer id, tag) -> latest progress of that viewer's tagged trace.
        self._progress: OrderedDict[tuple[int, str], _Progress] = OrderedDict()

    def served_kinds(self) -> tuple[str, ...]:
        """Every request kind this agent can serve now, to someone."""
        caps = ["history"]
        if _profiler() is not None:
            caps.append("profile")
        if self.trace_service is not None:
            caps += ["trace", "trace_status", "trace_diagnose"]
        return tuple(caps)

    def capabilities(self, principal: Principal) -> tuple[str, ...]:
        """The request kinds ``principal`` may send (a samples-only peer: history)."""
        if principal.samples_only:
            return ("history",)
        return self.served_kinds()

    def start_trace_service(self) -> None:
        """Own this host's Kineto endpoint when the trace service is installed."""
        try:
            from gpulens.ipc.kineto.service import LocalTraceService
        except ImportError as err:
            self.trace_error = f"trace service not installed: {err}"
            return
        svc = LocalTraceService()
        try:
            svc.start()
        except Exception as err:
            self.trace_error = f"Kineto endpoint not started: {err}"
            log.warning("%s", self.trace_error)
            return
        self.trace_service = svc
        log.info("Kineto endpoint serving at %s", svc.address)
        if svc.dynolog is None:
            self._start_control(svc.socket_dir or "")

    def _start_control(self, socket_dir: str) -> None:
        """Serve the local control socket so ``gpulens trace`` here can use this agent."""
        from gpulens.ipc.control import ControlListener, describe_holder

        listener = ControlListener(
            socket_dir,
            lambda transport, peer, principal: self.agent.serve_connection(
                transport, peer, principal=principal, kind="control"
            ),
        )
        try:
            listener.start()
        except OSError as err:
            held = describe_holder(listener.name) if err.errno == 98 else ""  # EADDRINUSE
            log.warning("local control socket %s not served: %s%s", listener.address, err.strerror or err, held)
            return
        self.control = listener
        log.info("local control socket at %s", listener.address)

    def close(self) -> None:
        """Stop the control socket and the trace service; refuse new requests (running ones are daemons)."""
        with self._lock:
            self._closing = True
        if self.control is not None:
            self.control.stop()
            self.control = None
        if self.trace_service is not None:
            self.trace_service.stop()
            self.trace_service = None

    def submit(self, conn: ViewerConnection, req: stream.Request) -> None:
        """Check ``req`` against ``conn``'s principal and run it; answers at once when it cannot run."""
        principal = conn.principal
        if req.kind not in self.served_kinds() or not hasattr(self, f"_do_{req.kind}"):
            why = f" ({self.trace_error})" if req.kind == "trace" and self.trace_error else ""
            conn.put(_error(req, f"unsupported request kind {req.kind[:40]!r}{why}; this agent serves: "
                                 + ", ".join(self.capabilities(principal))), CHUNK_WAIT_S)
            return
        if req.kind not in self.capabilities(principal):
            conn.put(_error(req, NOT_AUTHENTICATED), CHUNK_WAIT_S)
            return
        if req.kind in INLINE_KINDS:
            self._run(conn, req)
            return
        assert principal.uid is not None
        refusal = self._reserve(id(conn), principal.uid)
        if refusal is not None:
            conn.put(_error(req, refusal), CHUNK_WAIT_S)
            return
        try:
            threading.Thread(
                target=self._run_heavy, args=(conn, req, principal.uid),
                name=f"gpulens-request-{req.kind}", daemon=True,
            ).start()
        except RuntimeError as err:  # cannot start a thread (interpreter shutting down, no memory)
            self._release(id(conn), principal.uid)
            conn.put(_error(req, f"agent cannot start the request: {err}"), CHUNK_WAIT_S)

    def _reserve(self, key: int, uid: int) -> str | None:
        with self._lock:
            if self._closing:
                return "agent is stopping"
            if self._in_flight.get(key, 0) >= MAX_IN_FLIGHT:
                return f"too many requests in flight on this connection (at most {MAX_IN_FLIGHT})"
            if self._per_uid.get(uid, 0) >= MAX_HEAVY_PER_UID:
                return (f"uid {uid} already has {MAX_HEAVY_PER_UID} trace/profile requests running "
                        "(the limit per user); try again when one finishes")
            if self._heavy >= MAX_HEAVY:
                return f"agent is running {MAX_HEAVY} trace/profile requests (its limit); try again when one finishes"
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

    def running(self) -> int:
        """Trace/profile requests running now."""
        with self._lock:
            return self._heavy

    def _run_heavy(self, conn: ViewerConnection, req: stream.Request, uid: int) -> None:
        try:
            self._run(conn, req)
        finally:
            self._release(id(conn), uid)

    def _run(self, conn: ViewerConnection, req: stream.Request) -> None:
        try:
            result = getattr(self, f"_do_{req.kind}")(conn, req)
            conn.put(stream.encode(stream.Response(id=req.id, ok=True, result=result)), CHUNK_WAIT_S)
        except RequestError as err:
            conn.put(_error(req, str(err)), CHUNK_WAIT_S)
        except Exception as err:
            log.exception("request %s (%s) failed", req.id, req.kind)
            conn.put(_error(req, f"{type(err).__name__}: {err}"), CHUNK_WAIT_S)

    # -- kinds ------------------------------------------------------------------
    def _do_history(self, conn: ViewerConnection, req: stream.Request) -> dict[str, Any]:
        since = _num(req.params, "since", None)
        until = _num(req.params, "until", None)
        from gpulens.ipc.stream_frames import history_frames

        raws = self.agent.history_since(since, until)
        for frame in history_frames(req.id, raws):
            if not conn.put(frame, CHUNK_WAIT_S):
                raise RequestError("viewer too slow to receive history")
        return {"count": len(raws)}

    def _do_profile(self, conn: ViewerConnection, req: stream.Request) -> dict[str, Any]:
        pids = _pids(req.params)
        duration = _num(req.params, "duration_s", 5.0)
        if duration is None or not 0 < duration <= MAX_PROFILE_S:
            raise RequestError(f"duration_s must be in (0, {MAX_PROFILE_S:g}]")
        rate = _num(req.params, "rate_hz", 100.0)
        if rate is None or not 1 <= rate <= 1000:
            raise RequestError("rate_hz must be 1..1000")
        _check_owner(conn.principal, pids)
        prof = _profiler()
        assert prof is not None
        result = prof.sample_pids(list(pids), duration, rate_hz=int(rate))
        text = result if isinstance(result, str) else _folded(result)
        name = f"profile-{self.agent.hostname}-{int(time.time())}.folded"
        _send_bytes(conn, req.id, name, text.encode())
        return {"files": [name], "pids": list(pids), "duration_s": duration}

    def _do_trace(self, conn: ViewerConnection, req: stream.Request) -> dict[str, Any]:
        from gpulens.ipc.kineto.requests import TraceRequest

        p = req.params
        kwargs: dict[str, Any] = {}
        for key in ("duration_ms", "iterations", "job_id"):
            if key in p:
                v = p[key]
                if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
                    raise RequestError(f"{key} must be an integer")
                kwargs[key] = v
        for key in ("record_shapes", "with_stack", "with_flops", "with_modules", "profile_memory"):
            if key in p:
                if not isinstance(p[key], bool):
                    raise RequestError(f"{key} must be true or false")
                kwargs[key] = p[key]
        for key in ("warmup_s", "timeout_s"):
            v = _num(p, key, None)
            if v is not None:
                kwargs[key] = v
        svc = self.trace_service
        if "pids" in p:
            kwargs["pids"] = _pids(p)
        elif kwargs.get("job_id") is not None:
            # Resolved here, not by the service: each pid's owner is checked and captured.
            kwargs["pids"] = _job_pids(svc, conn.principal, kwargs.pop("job_id"))
        owners = _check_owner(conn.principal, kwargs["pids"]) if kwargs.get("pids") else {}
        tag = p.get("tag")
        if tag is not None and (not isinstance(tag, str) or not _TAG.fullmatch(tag)):
            raise RequestError("tag must be 1..64 characters of [A-Za-z0-9._-]")
        try:
            treq = TraceRequest(**kwargs)
            treq.validate()
        except (TypeError, ValueError) as err:
            raise RequestError(f"bad trace request: {err}") from err
        progress_key = (id(conn), tag or "")

        def on_job(job: Any) -> None:
            if job.request is treq:  # only this request's jobs
                self._set_progress(progress_key, {"state": job.state.value, "detail": job.detail})

        listener = on_job if tag is not None else None
        if listener is not None:
            self._set_progress(progress_key, {"state": "requested", "detail": "request received by the agent"})
            svc.add_listener(listener)
        try:
            fut = svc.request_trace(treq)
            try:
                res = fut.result(timeout=treq.timeout_s + 30)
            except Exception as err:
                raise RequestError(f"trace failed: {err}") from err
        finally:
            if listener is not None:
                svc.remove_listener(listener)
        if tag is not None:
            self._set_progress(progress_key, {"state": "sending", "detail": "sending the trace files"})
        names: dict[str, str] = {}
        for pid, path in res.files.items():
            if pid not in owners:
                raise RequestError(f"the trace service returned a file for process {pid}, which was not asked for")
            name = f"{pid}-{Path(path).name}"
            _send_file(conn, req.id, name, Path(path), owner=owners[pid])
            names[str(pid)] = name
        return {
            "request_id": res.request_id,
            "files": names,
            "missing": {str(k): v for k, v in res.missing.items()},
            "elapsed_s": res.elapsed_s,
        }

    def _do_trace_diagnose(self, conn: ViewerConnection, req: stream.Request) -> dict[str, Any]:
        """Per pid: null when it can be traced now, else why not with the fix (read from the process)."""
        pids = _pids(req.params)
        _check_owner(conn.principal, pids)
        return {"reasons": {str(pid): self.trace_service.diagnose(pid) for pid in pids}}

    def _do_trace_status(self, conn: ViewerConnection, req: stream.Request) -> dict[str, Any]:
        tag = req.params.get("tag")
        if not isinstance(tag, str) or not _TAG.fullmatch(tag):
            raise RequestError("tag must be 1..64 characters of [A-Za-z0-9._-]")
        with self._lock:
            entry = self._progress.get((id(conn), tag))
            if entry is None:
                return {"state": "unknown", "detail": "no trace with this tag from this viewer (yet)",
                        "first": 0, "events": []}
            state, detail = entry.events[-1]
            return {"state": state, "detail": detail, "first": entry.first,
                    "events": [{"state": s, "detail": d} for s, d in entry.events]}

    def _set_progress(self, key: tuple[int, str], entry: dict[str, Any]) -> None:
        with self._lock:
            prog = self._progress.get(key)
            if prog is None:
                prog = self._progress[key] = _Progress()
            event = (str(entry["state"]), str(entry["detail"]))
            if not prog.events or prog.events[-1] != event:
                prog.events.append(event)
                if len(prog.events) > MAX_EVENTS:
                    del prog.events[0]
                    prog.first += 1
            self._progress.move_to_end(key)
            while len(self._progress) > MAX_TAGS:
                self._progress.popitem(last=False)


class _Progress:
    """Every state change of one tagged trace, in order (``first``: index of ``events[0]``)."""

    __slots__ = ("events", "first")

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.first = 0


def _error(req: stream.Request, message: str) -> bytes:
    return stream.encode(stream.Response(id=req.id, ok=False, error=message))


def _num(params: Any, key: str, default: float | None) -> float | None:
    v = params.get(key, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
        raise RequestError(f"{key} must be a number")
    return float(v)


def _pids(params: Any) -> tuple[int, ...]:
    pids = params.get("pids")
    if not isinstance(pids, list) or not pids or len(pids) > MAX_PIDS:
        raise RequestError(f"pids must be a list of 1..{MAX_PIDS} process ids")
    if not all(isinstance(p, int) and not isinstance(p, bool) and p > 0 for p in pids):
        raise RequestError("pids must be positive integers")
    return tuple(pids)


def _check_owner(principal: Principal, pids: tuple[int, ...]) -> dict[int, int]:
    """Each pid's owner uid, read now; refuses a pid ``principal`` may not act for (never the agent's uid)."""
    from gpulens.core.procfs import proc_uid

    owners: dict[int, int] = {}
    for pid in pids:
        uid = proc_uid(pid)
        if uid is None:
            raise RequestError(f"process {pid} does not exist")
        if not principal.may_act_for(uid):
            raise RequestError(
                f"process {pid} belongs to uid {uid}; {principal.describe()} may trace or profile "
                "only its own processes"
            )
        owners[pid] = uid
    return owners


def _job_pids(svc: Any, principal: Principal, job_id: int) -> tuple[int, ...]:
    """The polling pids of ``job_id`` that ``principal`` may trace (a job id is only a claim)."""
    from gpulens.core.procfs import proc_uid

    pids = [int(p.pid) for p in svc.processes() if p.job_id == job_id]
    mine = tuple(pid for pid in pids if principal.may_act_for(proc_uid(pid)))
    if not mine:
        whose = "" if principal.uid == 0 else f" of uid {principal.uid}"
        raise RequestError(f"no process{whose} with job id {job_id} polls this agent's Kineto endpoint")
    return mine[:MAX_PIDS]


def _profiler() -> Any:
    try:
        from gpulens.analysis.flame import pyspy
    except ImportError:
        return None
    return pyspy if hasattr(pyspy, "sample_pids") else None


def _folded(result: Any) -> str:
    try:
        from gpulens.analysis.flame.folded import to_folded
    except ImportError as err:
        raise RequestError(f"flame exporters not installed: {err}") from err
    text: str = to_folded(result)
    return text


def _send_bytes(conn: ViewerConnection, rid: int, name: str, data: bytes) -> None:
    size = stream.FILE_CHUNK_BYTES
    offsets = range(0, max(len(data), 1), size)
    for off in offsets:
        chunk = stream.FileChunk(
            id=rid, name=name, offset=off, data=data[off : off + size], last=off + size >= len(data)
        )
        if not conn.put(stream.encode(chunk), CHUNK_WAIT_S):
            raise RequestError("viewer too slow to receive the file")


def _send_file(conn: ViewerConnection, rid: int, name: str, path: Path, *, owner: int) -> None:
    """Send ``path`` as chunks if it is a regular file owned by ``owner`` (no symlink, FIFO or device)."""
    from gpulens.core.safefs import UnsafePath, open_regular_at

    try:
        fd = open_regular_at(None, path, owner=owner, max_bytes=MAX_FILE_BYTES)
    except UnsafePath as err:
        raise RequestError(f"trace file refused: {err}") from err
    try:
        total = os.fstat(fd).st_size
        off = 0
        while True:
            data = os.read(fd, stream.FILE_CHUNK_BYTES)
            last = off + len(data) >= total or not data
            chunk = stream.FileChunk(id=rid, name=name, offset=off, data=data, last=last)
            if not conn.put(stream.encode(chunk), CHUNK_WAIT_S):
                raise RequestError("viewer too slow to receive the file")
            off += len(data)
            if last:
                return
    finally:
        os.close(fd)
