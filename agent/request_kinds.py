"""The request kinds an agent serves: history, profile, trace, trace_status, trace_diagnose, trace_processes.

Each kind is one function that gets the connection that asked (a
:class:`RequestConn`: its principal and a bounded ``put``), the request,
and exactly what the kind needs (a history function, the profiler, the
trace service, the progress table) -- never the agent. It checks the
params, checks every pid against the principal (:func:`check_owner`: each
pid's owner, read from /proc now, must be one the principal may act for,
never the agent's uid), does the work, sends any file as ``chunk``
messages and returns the ``response`` result. A
:class:`RequestError` is a refusal whose message goes back to the viewer.

Files are opened with ``safefs.open_regular_at`` (no symlink, no FIFO or
device, owned by the uid captured when the request was checked, bounded
size) and sent from that descriptor (:func:`send_file`).
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from gpulens.core.errors import GpulensError
from gpulens.core.jobs_pattern import DEFAULT_JOB_KEY_ENV
from gpulens.ipc import stream
from gpulens.ipc.principal import Principal

if TYPE_CHECKING:  # the trace service is imported only when the agent starts one
    from gpulens.ipc.kineto.protocol import TraceService
    from gpulens.ipc.kineto.requests import TraceJob, TraceRequest, TraceResult

MAX_FILE_BYTES = 2 * 1024**3
MAX_PIDS = 64
MAX_PROFILE_S = 60.0
CHUNK_WAIT_S = 30.0
"""How long one frame of an answer may wait for room in the viewer's queue."""
MAX_TAGS = 256
"""Trace progress entries kept for ``trace_status`` (oldest forgotten first)."""
MAX_EVENTS = 64
"""Progress events kept per tag (a trace of many pids has a few per pid)."""
_TAG = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")

HistoryFn = Callable[[float | None, float | None], list[bytes]]
"""Packed samples with ``since < time <= until`` (None: unbounded), oldest first."""


class RequestError(GpulensError):
    """A request that cannot be honoured; the message goes back to the viewer."""

    title = "request refused"


class RequestConn(Protocol):
    """What a request needs of the connection that sent it."""

    @property
    def principal(self) -> Principal:
        """Who asked: decides what may be done."""
        ...

    def put(self, frame: bytes, timeout_s: float | None = None) -> bool:
        """Queue ``frame`` for the viewer, waiting up to ``timeout_s`` for room; False: closed or full."""
        ...


class Profiler(Protocol):
    """py-spy sampling (``gpulens.agent.pyspy``: runs ``collectors.pyspy``, reads with ``analysis.flame.pyspy``)."""

    def sample_pids(self, pids: list[int], duration_s: float, /, rate_hz: int = 100) -> Any:
        """A profile (or folded text) of ``pids`` over ``duration_s`` seconds."""
        ...


ProfilerFn = Callable[[], "Profiler | None"]
"""Finds the profiler (None: not installed)."""


def find_profiler() -> Profiler | None:
    """The py-spy sampler when it is importable, else None."""
    try:
        from gpulens.agent import pyspy
    except ImportError:
        return None
    return pyspy if hasattr(pyspy, "sample_pids") else None


# -- kinds ------------------------------------------------------------------------
def history(conn: RequestConn, req: stream.Request, history_fn: HistoryFn) -> dict[str, Any]:
    """Samples with ``since < time <= until`` as ``history`` frames of this request."""
    from gpulens.ipc.stream_frames import history_frames

    since = _num(req.params, "since", None)
    until = _num(req.params, "until", None)
    raws = history_fn(since, until)
    for frame in history_frames(req.id, raws):
        if not conn.put(frame, CHUNK_WAIT_S):
            raise RequestError("viewer too slow to receive history")
    return {"count": len(raws)}


def profile(conn: RequestConn, req: stream.Request, profiler: Profiler, hostname: str) -> dict[str, Any]:
    """py-spy ``pids`` for ``duration_s`` at ``rate_hz``; the folded stacks go back as one file."""
    pids = parse_pids(req.params)
    duration = _num(req.params, "duration_s", 5.0)
    if duration is None or not 0 < duration <= MAX_PROFILE_S:
        raise RequestError(f"duration_s must be in (0, {MAX_PROFILE_S:g}]")
    rate = _num(req.params, "rate_hz", 100.0)
    if rate is None or not 1 <= rate <= 1000:
        raise RequestError("rate_hz must be 1..1000")
    check_owner(conn.principal, pids)
    result = profiler.sample_pids(list(pids), duration, rate_hz=int(rate))
    text = result if isinstance(result, str) else _folded(result)
    name = f"profile-{hostname}-{int(time.time())}.folded"
    send_bytes(conn, req.id, name, text.encode())
    return {"files": [name], "pids": list(pids), "duration_s": duration}


def trace(
    conn: RequestConn,
    req: stream.Request,
    svc: TraceService,
    progress: TraceProgress,
    job_key_env: tuple[str, ...] = DEFAULT_JOB_KEY_ENV,
) -> dict[str, Any]:
    """A Kineto trace of ``pids`` (or of a job's polling pids); each file goes back as chunks.

    ``job_key``: every polling process the principal may trace whose ``job_key_env`` value is the key.
    """
    from gpulens.ipc.kineto.requests import TraceRequest

    p = req.params
    kwargs = _trace_options(p)
    _resolve_pids(conn, svc, p, kwargs, job_key_env)
    owners = check_owner(conn.principal, kwargs["pids"]) if kwargs.get("pids") else {}
    tag = p.get("tag")
    if tag is not None and (not isinstance(tag, str) or not _TAG.fullmatch(tag)):
        raise RequestError("tag must be 1..64 characters of [A-Za-z0-9._-]")
    try:
        treq = TraceRequest(**kwargs)
        treq.validate()
    except (TypeError, ValueError) as err:
        raise RequestError(f"bad trace request: {err}") from err
    res = _await_trace(svc, treq, progress, (id(conn), tag or ""), tag is not None)
    return {
        "request_id": res.request_id,
        "files": _send_traces(conn, req, res.files, owners),
        "missing": {str(k): v for k, v in res.missing.items()},
        "notes": {str(k): v for k, v in res.notes.items()},
        "elapsed_s": res.elapsed_s,
    }


def _trace_options(p: Mapping[str, Any]) -> dict[str, Any]:
    """The request's integer, true/false and seconds options, checked, as TraceRequest keywords."""
    kwargs: dict[str, Any] = {}
    for key in ("duration_ms", "iterations", "job_id", "start_time_ms"):
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
    return kwargs


def _resolve_pids(
    conn: RequestConn, svc: TraceService, p: Mapping[str, Any], kwargs: dict[str, Any], job_key_env: tuple[str, ...]
) -> None:
    """Set ``kwargs["pids"]`` from ``pids``, else ``job_key``, else ``job_id`` (which it replaces)."""
    job_key = p.get("job_key")
    if "pids" in p:
        kwargs["pids"] = parse_pids(p)
    elif job_key is not None:
        if not isinstance(job_key, str) or not _TAG.fullmatch(job_key):
            raise RequestError("job_key must be 1..64 characters of [A-Za-z0-9._-]")
        kwargs["pids"] = job_key_pids(svc, conn.principal, job_key, job_key_env)
    elif kwargs.get("job_id") is not None:
        # Resolved here, not by the service: each pid's owner is checked and captured.
        kwargs["pids"] = job_pids(svc, conn.principal, kwargs.pop("job_id"))


def _await_trace(
    svc: TraceService, treq: TraceRequest, progress: TraceProgress, pkey: tuple[int, str], tagged: bool
) -> TraceResult:
    """Run ``treq`` and wait for its result; a tagged request reports its jobs' progress under ``pkey``."""

    def on_job(job: TraceJob) -> None:
        if job.request is treq:  # only this request's jobs
            progress.set(pkey, job.state.value, job.detail)

    listener = on_job if tagged else None
    if listener is not None:
        progress.set(pkey, "requested", "request received by the agent")
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
    if tagged:
        progress.set(pkey, "sending", "sending the trace files")
    return res


def _send_traces(
    conn: RequestConn, req: stream.Request, files: dict[int, str], owners: dict[int, int]
) -> dict[str, str]:
    """Send each trace file, as its process's owner; pid -> the name it went back as."""
    names: dict[str, str] = {}
    for pid, path in files.items():
        if pid not in owners:
            raise RequestError(f"the trace service returned a file for process {pid}, which was not asked for")
        name = f"{pid}-{Path(path).name}"
        send_file(conn, req.id, name, Path(path), owner=owners[pid])
        names[str(pid)] = name
    return names


def trace_diagnose(conn: RequestConn, req: stream.Request, svc: TraceService) -> dict[str, Any]:
    """Per pid: null when it can be traced now, else why not with the fix (read from the process)."""
    pids = parse_pids(req.params)
    check_owner(conn.principal, pids)
    return {"reasons": {str(pid): svc.diagnose(pid) for pid in pids}}


MAX_PROCESSES = 1024
"""Entries one ``trace_processes`` answer carries."""
def trace_processes(
    conn: RequestConn, req: stream.Request, svc: TraceService, job_key_env: tuple[str, ...] = DEFAULT_JOB_KEY_ENV
) -> dict[str, Any]:
    """The polling processes the principal may trace: pid, ancestors, job keys, rank, poll timing, busy.

    ``job_keys``: the values of ``job_key_env`` (the config's, in its order) set in the process's environment.
    """
    from gpulens.core.procfs import proc_environ, proc_uid

    out: list[dict[str, Any]] = []
    for p in svc.processes():
        if len(out) >= MAX_PROCESSES:
            break
        if not conn.principal.may_act_for(proc_uid(p.pid)):
            continue
        env = proc_environ(p.pid) or {}
        rank = env.get("RANK", "")
        out.append({
            "pid": p.pid,
            "ancestors": list(p.ancestors[:16]),
            "job_id": p.job_id,
            "job_keys": [env[k] for k in job_key_env if env.get(k)][:4],
            "rank": int(rank) if rank.isdigit() and len(rank) < 8 else None,
            "interval_s": p.interval_s,
            "busy": p.busy,
        })
    return {"processes": out}


def job_key_pids(
    svc: TraceService, principal: Principal, key: str, job_key_env: tuple[str, ...] = DEFAULT_JOB_KEY_ENV
) -> tuple[int, ...]:
    """Polling pids of the principal with ``key`` as the value of one of ``job_key_env`` (or as job id)."""
    from gpulens.core.procfs import proc_environ, proc_uid

    pids = []
    for p in svc.processes():
        if not principal.may_act_for(proc_uid(p.pid)):
            continue
        env = proc_environ(p.pid) or {}
        if any(env.get(k) == key for k in job_key_env) or (key.isdigit() and p.job_id == int(key)):
            pids.append(p.pid)
    if not pids:
        names = ", ".join(job_key_env[:6]) or "no job_key_env configured"
        raise RequestError(f"no process with job key {key!r} ({names}) polls this agent's Kineto endpoint")
    return tuple(pids[:MAX_PIDS])


def trace_status(conn: RequestConn, req: stream.Request, progress: TraceProgress) -> dict[str, Any]:
    """The progress of this viewer's trace tagged ``tag`` (another viewer's tags are not visible)."""
    tag = req.params.get("tag")
    if not isinstance(tag, str) or not _TAG.fullmatch(tag):
        raise RequestError("tag must be 1..64 characters of [A-Za-z0-9._-]")
    return progress.status((id(conn), tag))


class TraceProgress:
    """Every state change of each tagged trace, per (viewer id, tag); at most ``MAX_TAGS`` kept (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[int, str], _Progress] = OrderedDict()

    def set(self, key: tuple[int, str], state: str, detail: str) -> None:
        """Record a state change (a repeat of the last one is not recorded again)."""
        event = (str(state), str(detail))
        with self._lock:
            prog = self._entries.get(key)
            if prog is None:
                prog = self._entries[key] = _Progress()
            if not prog.events or prog.events[-1] != event:
                prog.events.append(event)
                if len(prog.events) > MAX_EVENTS:
                    del prog.events[0]
                    prog.first += 1
            self._entries.move_to_end(key)
            while len(self._entries) > MAX_TAGS:
                self._entries.popitem(last=False)

    def status(self, key: tuple[int, str]) -> dict[str, Any]:
        """The ``trace_status`` result for ``key``."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return {"state": "unknown", "detail": "no trace with this tag from this viewer (yet)",
                        "first": 0, "events": []}
            state, detail = entry.events[-1]
            return {"state": state, "detail": detail, "first": entry.first,
                    "events": [{"state": s, "detail": d} for s, d in entry.events]}


class _Progress:
    """Every state change of one tagged trace, in order (``first``: index of ``events[0]``)."""

    __slots__ = ("events", "first")

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.first = 0


# -- checks -----------------------------------------------------------------------
def _num(params: Mapping[str, Any], key: str, default: float | None) -> float | None:
    v = params.get(key, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
        raise RequestError(f"{key} must be a number")
    return float(v)


def parse_pids(params: Mapping[str, Any]) -> tuple[int, ...]:
    """The request's ``pids``: 1..MAX_PIDS positive integers."""
    pids = params.get("pids")
    if not isinstance(pids, list) or not pids or len(pids) > MAX_PIDS:
        raise RequestError(f"pids must be a list of 1..{MAX_PIDS} process ids")
    if not all(isinstance(p, int) and not isinstance(p, bool) and p > 0 for p in pids):
        raise RequestError("pids must be positive integers")
    return tuple(pids)


def check_owner(principal: Principal, pids: tuple[int, ...]) -> dict[int, int]:
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


def job_pids(svc: TraceService, principal: Principal, job_id: int) -> tuple[int, ...]:
    """The polling pids of ``job_id`` that ``principal`` may trace (a job id is only a claim)."""
    from gpulens.core.procfs import proc_uid

    pids = [int(p.pid) for p in svc.processes() if p.job_id == job_id]
    mine = tuple(pid for pid in pids if principal.may_act_for(proc_uid(pid)))
    if not mine:
        whose = "" if principal.uid == 0 else f" of uid {principal.uid}"
        raise RequestError(f"no process{whose} with job id {job_id} polls this agent's Kineto endpoint")
    return mine[:MAX_PIDS]


def _folded(result: Any) -> str:
    try:
        from gpulens.analysis.flame.folded import to_folded
    except ImportError as err:
        raise RequestError(f"flame exporters not installed: {err}") from err
    text: str = to_folded(result)
    return text


# -- files ------------------------------------------------------------------------
def send_bytes(conn: RequestConn, rid: int, name: str, data: bytes) -> None:
    """Send ``data`` as the file ``name`` of request ``rid``, in chunks."""
    size = stream.FILE_CHUNK_BYTES
    for off in range(0, max(len(data), 1), size):
        chunk = stream.FileChunk(
            id=rid, name=name, offset=off, data=data[off : off + size], last=off + size >= len(data)
        )
        if not conn.put(stream.encode(chunk), CHUNK_WAIT_S):
            raise RequestError("viewer too slow to receive the file")


def send_file(conn: RequestConn, rid: int, name: str, path: Path, *, owner: int) -> None:
    """Send ``path`` as chunks if it is a regular file owned by ``owner``.

    Opened by the trace service's own check (no symlink anywhere on the path, which
    runs through the target user's directory; no FIFO or device), never by name twice.
    """
    from gpulens.core.safefs import UnsafePath
    from gpulens.ipc.kineto.requests import open_trace_file

    try:
        fd = open_trace_file(path, owner, max_bytes=MAX_FILE_BYTES)
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
