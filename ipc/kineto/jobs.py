"""Bookkeeping of trace jobs: one trace at a time per pid, file watching, Futures.

Internal to :mod:`gpulens.ipc.kineto.service`; every method takes the table's lock,
so the endpoint thread (hand_over) and the watch thread (tick) may race.
Files are looked for outside the lock with :func:`~gpulens.ipc.kineto.requests.probe_trace_file`
(no link followed, no FIFO opened blocking, only the target's regular files).

Kineto drops a config that arrives while its profiler is busy (a trace
running, being written, or another config pending), so a request is never
handed over then: per pid at most one task is *pending* (waiting for a poll)
or *running* (handed, file not yet landed); later ones are *queued* behind
it (``TraceState.QUEUED``, at most ``MAX_QUEUED_PER_PID``, more are refused
at once) and become pending when the one before finishes. A poll that says
the profiler is busy (someone else's trace) keeps the task pending.
A target that exits fails its task within one watch tick ("process N exited
during the trace").
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from gpulens.ipc.errors import NotTraceable, TraceError, TraceTimeout
from gpulens.ipc.kineto.liveness import ProcIdentity, exited
from gpulens.ipc.kineto.requests import (
    ITERATION_FALLBACK_MS,
    FileProbe,
    TraceJob,
    TraceOutput,
    TraceRequest,
    TraceResult,
    TraceState,
    probe_trace_file,
)

log = logging.getLogger(__name__)
MAX_JOBS_KEPT = 200
MAX_QUEUED_PER_PID = 4
"""Traces of one pid that may wait behind its running one; more are refused at once."""
MAX_STEP_MEMORY = 4096

Inspect = Callable[[str, int], "bool | None"]
"""``inspect(path, owner_uid)``: does the finished trace show optimizer steps (None: cannot tell)."""


@dataclass(slots=True)
class PidTask:
    """One pid of a job (mutable; only touched under the table lock)."""

    pid: int
    config: str
    output: TraceOutput | None = None
    poll_grace_s: float = 12.0
    poll_deadline_s: float = 0.0
    handed_s: float | None = None
    handed_wall: float = 0.0
    file: str | None = None
    error: str | None = None
    refused: bool = False
    note: str | None = None
    result_note: str | None = None
    queued_behind: str | None = None
    busy_since_s: float | None = None
    ident: ProcIdentity | None = None

    @property
    def finished(self) -> bool:
        return self.file is not None or self.error is not None

    @property
    def watched(self) -> str:
        """The directory watched, for messages."""
        return f"{self.output.directory}/" if self.output is not None else "nothing"


@dataclass(slots=True)
class _Job:
    request_id: str
    request: TraceRequest
    tasks: dict[int, PidTask]
    future: Future[TraceResult]
    started_s: float
    state: TraceState = TraceState.WAITING_FOR_POLL
    detail: str = ""
    files: dict[int, str] = field(default_factory=dict)

    def snapshot(self) -> TraceJob:
        return TraceJob(
            request_id=self.request_id,
            request=self.request,
            pids=tuple(self.tasks),
            state=self.state,
            detail=self.detail,
            started_s=self.started_s,
            files=dict(self.files),
        )


class JobTable:
    """All jobs of one service, with listeners notified outside the lock."""

    def __init__(self, inspect: Inspect | None = None) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[str, _Job] = {}
        self._pending: dict[int, tuple[str, PidTask]] = {}
        self._running: dict[int, tuple[str, PidTask]] = {}
        self._queued: dict[int, deque[tuple[str, PidTask]]] = {}
        self._inspect = inspect
        self.stepped: dict[int, bool] = {}
        """Per pid: did its last inspected trace show optimizer steps (learned from files)."""
        self.listeners: list[Callable[[TraceJob], None]] = []

    def add(
        self, request_id: str, req: TraceRequest, tasks: dict[int, PidTask], fut: Future[TraceResult]
    ) -> _Job:
        now = time.monotonic()
        with self._lock:
            job = _Job(request_id, req, tasks, fut, now)
            for pid, task in tasks.items():
                if task.error is not None:
                    continue
                ahead = self._running.get(pid) or self._pending.get(pid)
                line = self._queued.get(pid)
                if ahead is None and not line:
                    task.poll_deadline_s = now + task.poll_grace_s
                    self._pending[pid] = (request_id, task)
                elif line is not None and len(line) >= MAX_QUEUED_PER_PID:
                    task.error = (
                        f"process {pid} already has a trace running and {len(line)} queued behind it "
                        f"(at most {MAX_QUEUED_PER_PID}); try again when one finishes"
                    )
                else:
                    behind = line[-1] if line else ahead
                    assert behind is not None
                    task.queued_behind = behind[0]
                    self._queued.setdefault(pid, deque()).append((request_id, task))
            self._jobs[request_id] = job
            while len(self._jobs) > MAX_JOBS_KEPT:
                oldest = next(iter(self._jobs))
                if not self._jobs[oldest].future.done():
                    break
                del self._jobs[oldest]
            self._refresh(job)
            if all(t.finished for t in tasks.values()):
                self._finish(job, now)
            return job

    def snapshot(self, request_id: str) -> TraceJob:
        with self._lock:
            return self._jobs[request_id].snapshot()

    def snapshots(self) -> list[TraceJob]:
        with self._lock:
            return [j.snapshot() for j in self._jobs.values()]

    def waiting_tasks(self, request_id: str) -> list[PidTask]:
        """Tasks of the job that are pending now (queued ones are not)."""
        with self._lock:
            return [t for pid, (rid, t) in self._pending.items() if rid == request_id]

    def hand_over(self, pid: int, accepts: bool = True) -> tuple[str, TraceJob] | None:
        """Config text for a polling pid with a pending request, and the job's new snapshot.

        ``accepts`` False: the poll said the target's profiler is busy; the
        config stays pending (Kineto would drop it) and the job says why.
        """
        with self._lock:
            entry = self._pending.get(pid)
            if entry is None:
                return None
            request_id, task = entry
            job = self._jobs.get(request_id)
            if job is None or task.finished:
                self._pending.pop(pid, None)
                return None
            if _start_missed(job.request):
                return None  # Kineto would refuse it; the next tick fails the task with the reason
            if not accepts:
                if task.busy_since_s is None:
                    task.busy_since_s = time.monotonic()
                before = job.detail
                self._refresh(job)
                return None if job.detail == before else ("", job.snapshot())
            del self._pending[pid]
            self._running[pid] = entry
            task.handed_s = time.monotonic()
            task.handed_wall = time.time()
            self._refresh(job)
            return task.config, job.snapshot()

    def mark_handed(self, pid: int) -> None:
        """Mark a task handed by another route (dynolog RPC)."""
        with self._lock:
            entry = self._pending.pop(pid, None)
            if entry is not None:
                self._running[pid] = entry
                entry[1].handed_s = time.monotonic()
                entry[1].handed_wall = time.time()
                self._refresh(self._jobs[entry[0]])

    def fail_task(self, request_id: str, pid: int, reason: str) -> None:
        with self._lock:
            task = self._jobs[request_id].tasks[pid]
            task.error = reason
            self._release(pid, task, time.monotonic())

    def tick(
        self,
        diagnose: Callable[[int], str],
        probe: Callable[[TraceOutput, int, float], FileProbe] = probe_trace_file,
    ) -> list[TraceJob]:
        """Advance every open job: exits, poll deadlines, files on disk, timeouts."""
        now = time.monotonic()
        changed: list[TraceJob] = []
        with self._lock:
            open_jobs = [j for j in self._jobs.values() if not j.future.done()]
            live = {
                id(j): [t for t in j.tasks.values() if not t.finished and t.queued_behind is None]
                for j in open_jobs
            }
            watched = {
                id(j): [(t, t.output, t.handed_wall) for t in live[id(j)] if t.handed_s is not None]
                for j in open_jobs
            }
        for job in open_jobs:
            # /proc and the target's files: read outside the lock (the endpoint thread's
            # hand_over must never wait behind a slow filesystem).
            gone = {t.pid for t in live[id(job)] if exited(t.pid, t.ident)}
            late = [
                t.pid for t in live[id(job)]
                if t.handed_s is None and t.pid not in gone and now > t.poll_deadline_s and t.busy_since_s is None
            ]
            reasons = {pid: diagnose(pid) for pid in late}
            probes = {t.pid: probe(out, t.pid, wall) for t, out, wall in watched[id(job)] if out is not None}
            steps: dict[int, bool | None] = {}
            for t, out, _wall in watched[id(job)]:
                path = probes[t.pid].path if t.pid in probes else None
                if path is not None and out is not None and self._inspect is not None:
                    steps[t.pid] = self._inspect(path, out.owner_uid)
            with self._lock:
                before = (job.state, job.detail)
                self._advance(job, now, gone, reasons, probes, steps)
                if (job.state, job.detail) != before:
                    changed.append(job.snapshot())
        return changed

    def _advance(
        self,
        job: _Job,
        now: float,
        gone: set[int],
        reasons: dict[int, str],
        probes: dict[int, FileProbe],
        steps: dict[int, bool | None],
    ) -> None:
        req = job.request
        for task in job.tasks.values():
            if task.finished or task.queued_behind is not None:
                continue
            found = probes.get(task.pid, FileProbe())
            if task.handed_s is None:
                if task.pid in gone:
                    task.error = f"process {task.pid} exited before it picked up the trace request"
                elif task.pid in reasons:
                    task.error = reasons[task.pid]
                elif _start_missed(req):
                    task.error = (
                        f"the common start time passed before process {task.pid} picked up its config "
                        "(Kineto refuses a start in the past): ask again with a later start"
                    )
                elif task.busy_since_s is not None and now - task.busy_since_s > req.timeout_s:
                    task.error = (
                        f"process {task.pid}'s profiler stayed busy with another trace for "
                        f"{req.timeout_s:.0f} s; the request was never handed over"
                    )
            elif found.refused is not None:
                task.refused = True
                task.error = f"trace file refused: {found.refused}"
            elif found.path is not None:
                task.file = found.path
                job.files[task.pid] = task.file
                self._learn(task, req, steps.get(task.pid))
            elif task.pid in gone:
                task.error = f"process {task.pid} exited during the trace"
            elif now - task.handed_s > req.timeout_s:
                task.note = found.note or task.note
                task.error = (
                    f"no trace file from process {task.pid} within {req.timeout_s:.0f} s "
                    f"after the config was handed over (watched {task.watched})"
                ) + (f"; {task.note}" if task.note else "")
            else:
                task.note = found.note or task.note
            if task.finished:
                self._release(task.pid, task, now)
        self._refresh(job)
        if all(t.finished for t in job.tasks.values()):
            self._finish(job, now)

    def _learn(self, task: PidTask, req: TraceRequest, stepped: bool | None) -> None:
        if stepped is None:
            return
        self.stepped[task.pid] = stepped
        while len(self.stepped) > MAX_STEP_MEMORY:
            del self.stepped[next(iter(self.stepped))]
        if req.iterations is not None and not stepped:
            task.result_note = (
                f"Kineto traced {ITERATION_FALLBACK_MS} ms, not {req.describe()}: process {task.pid} had not "
                "stepped an optimizer (Kineto counts iterations by optimizer.step() and falls back to a "
                "duration trace before the first)"
            )

    def _release(self, pid: int, task: PidTask, now: float) -> None:
        """``task`` finished: free its pid and promote the next queued task of that pid."""
        for table in (self._pending, self._running):
            if pid in table and table[pid][1] is task:
                del table[pid]
        line = self._queued.get(pid)
        if line is not None:
            for entry in list(line):
                if entry[1] is task:
                    line.remove(entry)
        if pid in self._pending or pid in self._running:
            return
        while line:
            rid, nxt = line.popleft()
            if nxt.finished or rid not in self._jobs:
                continue
            nxt.queued_behind = None
            nxt.poll_deadline_s = now + nxt.poll_grace_s
            self._pending[pid] = (rid, nxt)
            self._refresh(self._jobs[rid])
            break
        if not line:
            self._queued.pop(pid, None)

    def _refresh(self, job: _Job) -> None:
        """The job's state and detail from its tasks' (only while it is open)."""
        if job.future.done():
            return
        open_tasks = [t for t in job.tasks.values() if not t.finished]
        if not open_tasks:
            return
        handed = [t for t in open_tasks if t.handed_s is not None]
        pending = [t for t in open_tasks if t.handed_s is None and t.queued_behind is None]
        req = job.request
        if handed:
            t = handed[0]
            assert t.handed_s is not None
            span = req.warmup_s + (req.duration_ms or ITERATION_FALLBACK_MS) / 1000
            if req.start_time_ms is not None:
                span += max(0.0, req.start_time_ms / 1000 - t.handed_wall)
            if req.duration_ms is not None and time.monotonic() - t.handed_s > span:
                job.state = TraceState.WRITING
                job.detail = f"waiting for process {t.pid} to write its trace"
            else:
                job.state = TraceState.TRACING
                job.detail = f"config handed to process {t.pid}; {_tracing_what(req, t.pid, self.stepped)}"
        elif pending:
            job.state = TraceState.WAITING_FOR_POLL
            busy = [t.pid for t in pending if t.busy_since_s is not None]
            if busy:
                job.detail = (
                    f"process {busy[0]}'s profiler is busy with another trace (not this request); "
                    "the config goes at its first poll after that trace is written"
                )
            else:
                job.detail = "the target picks the request up at its next poll (up to one poll interval)"
        else:
            job.state = TraceState.QUEUED
            t = open_tasks[0]
            job.detail = (
                f"queued behind trace {t.queued_behind} of process {t.pid}; starts when that trace's "
                "file has landed"
            )

    def _finish(self, job: _Job, now: float) -> None:
        missing = {t.pid: t.error or "" for t in job.tasks.values() if t.file is None}
        notes = {t.pid: t.result_note for t in job.tasks.values() if t.result_note}
        if job.files:
            job.state = TraceState.DONE
            job.detail = ", ".join(job.files.values()) + "".join(f"; {n}" for n in notes.values())
            owners = {
                pid: t.output.owner_uid for pid, t in job.tasks.items() if pid in job.files and t.output is not None
            }
            job.future.set_result(
                TraceResult(job.request_id, dict(job.files), missing, now - job.started_s, owners=owners, notes=notes)
            )
            return
        job.state = TraceState.FAILED
        job.detail = "; ".join(f"{pid}: {why}" for pid, why in missing.items())
        timed_out = all(t.handed_s is not None for t in job.tasks.values()) and not any(
            "exited" in (t.error or "") for t in job.tasks.values()
        )
        err_cls: type[TraceError] = TraceTimeout if timed_out else NotTraceable
        if any(t.refused for t in job.tasks.values()):
            err_cls = TraceError
        job.future.set_exception(err_cls(job.detail))

    def fail_all(self, reason: str) -> list[TraceJob]:
        with self._lock:
            out = []
            for job in self._jobs.values():
                if not job.future.done():
                    for t in job.tasks.values():
                        if not t.finished:
                            t.error = reason
                    self._finish(job, time.monotonic())
                    out.append(job.snapshot())
            self._pending.clear()
            self._running.clear()
            self._queued.clear()
            return out

    def notify(self, snap: TraceJob) -> None:
        for listener in list(self.listeners):
            try:
                listener(snap)
            except Exception:
                log.exception("trace job listener failed")


START_PICKUP_S = 0.5
"""Kineto's profiler loop must see a config this long before its start time (it ticks once a second)."""


def _start_missed(req: TraceRequest) -> bool:
    """True when ``req`` has a common start time too close (or past) for a config handed now."""
    return req.start_time_ms is not None and time.time() > req.start_time_ms / 1000 - START_PICKUP_S


def _tracing_what(req: TraceRequest, pid: int, stepped: dict[int, bool]) -> str:
    """What is being traced, honestly: an iterations request may become a duration trace."""
    if req.iterations is None:
        when = " from the common start time" if req.start_time_ms is not None else ""
        return f"tracing {req.describe()}{when}"
    if stepped.get(pid):
        return f"tracing {req.describe()} (the next optimizer steps)"
    return (
        f"tracing {req.describe()} if it steps an optimizer, else {ITERATION_FALLBACK_MS} ms "
        "(Kineto's fallback before the first optimizer.step())"
    )
