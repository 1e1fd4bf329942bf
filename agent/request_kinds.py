"""The request kinds an agent serves: history, profile, trace, trace_status, trace_diagnose, trace_processes.

Each kind is one function that gets the connection that asked (a
:class:`RequestConn`: its principal and a bounded ``put``), the request's
id, its params as the kind's struct (``gpulens.ipc.request_schema``: types
and bounds were checked when the frame was decoded) and exactly what the
kind needs (a history function, the profiler, the trace service, the
progress table) -- never the agent. It checks every pid against the
principal (:func:`check_owner`: each pid's owner, read from /proc now, must
be one the principal may act for, never the agent's uid), does the work,
sends any file as ``chunk`` messages and returns the kind's answer struct.
A :class:`RequestError` is a refusal whose message goes back to the viewer.

Files are opened with ``safefs.open_regular_at`` (no symlink, no FIFO or
device, owned by the uid captured when the request was checked, bounded
size) and sent from that descriptor (:func:`send_file`).
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import CancelledError
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from msgspec import UNSET, UnsetType

from gpulens.core.errors import GpulensError
from gpulens.core.jobs_pattern import DEFAULT_JOB_KEY_ENV
from gpulens.core.reasons import rendered
from gpulens.ipc import stream
from gpulens.ipc.principal import Principal
from gpulens.ipc.request_schema import (
    MAX_PIDS,
    HistoryAnswer,
    HistoryParams,
    Poller,
    ProfileAnswer,
    ProfileParams,
    ProgressEvent,
    TraceAnswer,
    TraceDiagnoseAnswer,
    TraceDiagnoseParams,
    TraceParams,
    TraceProcessesAnswer,
    TraceProcessesParams,
    TraceStatusAnswer,
    TraceStatusParams,
)

if TYPE_CHECKING:  # the trace service is imported only when the agent starts one
    from gpulens.ipc.kineto.protocol import TraceService
    from gpulens.ipc.kineto.requests import TraceJob, TraceRequest, TraceResult

MAX_FILE_BYTES = 2 * 1024**3
CHUNK_WAIT_S = 30.0
"""How long one frame of an answer may wait for room in the viewer's queue."""
MAX_TAGS = 256
"""Trace progress entries kept for ``trace_status`` (oldest forgotten first)."""
MAX_EVENTS = 64
"""Progress events kept per tag (a trace of many pids has a few per pid)."""

T = TypeVar("T")
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

    def sample_pids(self, pids: list[int], duration_s: float, /, rate_hz: int = 100) -> object:
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
def history(conn: RequestConn, rid: int, p: HistoryParams, history_fn: HistoryFn) -> HistoryAnswer:
    """Samples with ``since < time <= until`` as ``history`` frames of request ``rid``."""
    from gpulens.ipc.stream_frames import history_frames

    raws = history_fn(_or(p.since, None), _or(p.until, None))
    for frame in history_frames(rid, raws):
        if not conn.put(frame, CHUNK_WAIT_S):
            raise RequestError("viewer too slow to receive history")
    return HistoryAnswer(count=len(raws))


def profile(conn: RequestConn, rid: int, p: ProfileParams, profiler: Profiler, hostname: str) -> ProfileAnswer:
    """py-spy ``pids`` for ``duration_s`` at ``rate_hz``; the folded stacks go back as one file."""
    check_owner(conn.principal, p.pids)
    result = profiler.sample_pids(list(p.pids), p.duration_s, rate_hz=int(p.rate_hz))
    text = result if isinstance(result, str) else _folded(result)
    name = f"profile-{hostname}-{int(time.time())}.folded"
    send_bytes(conn, rid, name, text.encode())
    return ProfileAnswer(files=(name,), pids=p.pids, duration_s=p.duration_s)


def trace(
    conn: RequestConn,
    rid: int,
    p: TraceParams,
    svc: TraceService,
    progress: TraceProgress,
    job_key_env: tuple[str, ...] = DEFAULT_JOB_KEY_ENV,
) -> TraceAnswer:
    """A Kineto trace of ``pids`` (or of a job's polling pids); each file goes back as chunks.

    ``job_key``: every polling process the principal may trace whose ``job_key_env`` value is the key.
    """
    job_key = p.job_key if isinstance(p.job_key, str) else None
    pids = _resolve_pids(conn, svc, p, job_key, job_key_env)
    owners = check_owner(conn.principal, pids) if pids else {}
    tag = p.tag if isinstance(p.tag, str) else None
    try:
        treq = _trace_request(p, pids, from_job=pids is not None and p.pids is UNSET and job_key is None)
        treq.validate()
    except (TypeError, ValueError) as err:
        raise RequestError(f"bad trace request: {err}") from err
    res = _await_trace(svc, treq, progress, (id(conn), tag or ""), tag is not None)
    return TraceAnswer(
        request_id=res.request_id,
        files=_send_traces(conn, rid, res.files, owners),
        missing={str(k): v for k, v in res.missing.items()},
        notes={str(k): v for k, v in res.notes.items()},
        elapsed_s=res.elapsed_s,
    )


def _trace_request(p: TraceParams, pids: tuple[int, ...] | None, *, from_job: bool) -> TraceRequest:
    """The service's request for ``p`` with ``pids`` resolved; unset options (and None seconds) keep its defaults.

    ``from_job``: the pids are ``job_id``'s, which they replace.
    """
    from gpulens.ipc.kineto.requests import TraceRequest

    d = TraceRequest()
    return TraceRequest(
        pids=pids or (),
        job_id=None if from_job else _or(p.job_id, d.job_id),
        duration_ms=_or(p.duration_ms, d.duration_ms),
        iterations=_or(p.iterations, d.iterations),
        record_shapes=_or(p.record_shapes, d.record_shapes),
        with_stack=_or(p.with_stack, d.with_stack),
        with_flops=_or(p.with_flops, d.with_flops),
        with_modules=_or(p.with_modules, d.with_modules),
        profile_memory=_or(p.profile_memory, d.profile_memory),
        warmup_s=_seconds(p.warmup_s, d.warmup_s),
        timeout_s=_seconds(p.timeout_s, d.timeout_s),
        start_time_ms=_or(p.start_time_ms, d.start_time_ms),
    )


def _or(value: T | UnsetType, default: T) -> T:
    return default if isinstance(value, UnsetType) else value


def _seconds(value: float | UnsetType | None, default: float) -> float:
    """A seconds option: left out or None keeps the default."""
    return default if value is None or isinstance(value, UnsetType) else value


def _resolve_pids(
    conn: RequestConn, svc: TraceService, p: TraceParams, job_key: str | None, job_key_env: tuple[str, ...]
) -> tuple[int, ...] | None:
    """The pids asked for: ``pids``, else ``job_key``'s, else ``job_id``'s (None: none of them given)."""
    if not isinstance(p.pids, UnsetType):
        return p.pids
    if job_key is not None:
        return job_key_pids(svc, conn.principal, job_key, job_key_env)
    if isinstance(p.job_id, int):
        # Resolved here, not by the service: each pid's owner is checked and captured.
        return job_pids(svc, conn.principal, p.job_id)
    return None


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
        except (GpulensError, OSError, TimeoutError, CancelledError, ValueError) as err:
            raise RequestError(f"trace failed: {err}") from err
    finally:
        if listener is not None:
            svc.remove_listener(listener)
    if tagged:
        progress.set(pkey, "sending", "sending the trace files")
    return res


def _send_traces(conn: RequestConn, rid: int, files: dict[int, str], owners: dict[int, int]) -> dict[str, str]:
    """Send each trace file, as its process's owner; pid -> the name it went back as."""
    names: dict[str, str] = {}
    for pid, path in files.items():
        if pid not in owners:
            raise RequestError(f"the trace service returned a file for process {pid}, which was not asked for")
        name = f"{pid}-{Path(path).name}"
        send_file(conn, rid, name, Path(path), owner=owners[pid])
        names[str(pid)] = name
    return names


def trace_diagnose(conn: RequestConn, rid: int, p: TraceDiagnoseParams, svc: TraceService) -> TraceDiagnoseAnswer:
    """Per pid: null when it can be traced now, else why not with the fix (read from the process).

    The wire carries the reason's sentence (:func:`core.reasons.rendered`), as it always has."""
    check_owner(conn.principal, p.pids)
    return TraceDiagnoseAnswer(reasons={str(pid): rendered(svc.diagnose(pid)) for pid in p.pids})


MAX_PROCESSES = 1024
"""Entries one ``trace_processes`` answer carries."""
def trace_processes(
    conn: RequestConn, rid: int, p: TraceProcessesParams, svc: TraceService,
    job_key_env: tuple[str, ...] = DEFAULT_JOB_KEY_ENV,
) -> TraceProcessesAnswer:
    """The polling processes the principal may trace: pid, ancestors, job keys, rank, poll timing, busy.

    ``job_keys``: the values of ``job_key_env`` (the config's, in its order) set in the process's environment.
    """
    from gpulens.core.procfs import proc_environ, proc_uid

    out: list[Poller] = []
    for proc in svc.processes():
        if len(out) >= MAX_PROCESSES:
            break
        if not conn.principal.may_act_for(proc_uid(proc.pid)):
            continue
        env = proc_environ(proc.pid) or {}
        rank = env.get("RANK", "")
        out.append(Poller(
            pid=proc.pid,
            ancestors=tuple(proc.ancestors[:16]),
            job_id=proc.job_id,
            job_keys=tuple([env[k] for k in job_key_env if env.get(k)][:4]),
            rank=int(rank) if rank.isdigit() and len(rank) < 8 else None,
            interval_s=proc.interval_s,
            busy=proc.busy,
        ))
    return TraceProcessesAnswer(processes=tuple(out))


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


def trace_status(conn: RequestConn, rid: int, p: TraceStatusParams, progress: TraceProgress) -> TraceStatusAnswer:
    """The progress of this viewer's trace tagged ``tag`` (another viewer's tags are not visible)."""
    return progress.status((id(conn), p.tag))


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

    def status(self, key: tuple[int, str]) -> TraceStatusAnswer:
        """The ``trace_status`` answer for ``key``."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return TraceStatusAnswer(state="unknown", detail="no trace with this tag from this viewer (yet)")
            state, detail = entry.events[-1]
            return TraceStatusAnswer(state=state, detail=detail, first=entry.first,
                                     events=tuple(ProgressEvent(state=s, detail=d) for s, d in entry.events))


class _Progress:
    """Every state change of one tagged trace, in order (``first``: index of ``events[0]``)."""

    __slots__ = ("events", "first")

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.first = 0


# -- checks -----------------------------------------------------------------------
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


def _folded(result: object) -> str:
    try:
        from gpulens.analysis.flame.folded import to_folded
        from gpulens.analysis.flame.model import Profile
    except ImportError as err:
        raise RequestError(f"flame exporters not installed: {err}") from err
    if not isinstance(result, Profile):
        raise RequestError(f"the profiler answered {type(result).__name__}, neither folded text nor a profile")
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
    from gpulens.ipc.kineto.outputs import open_trace_file

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
