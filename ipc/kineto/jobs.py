"""Bookkeeping of trace jobs: pending configs per pid, file watching, Futures.

Internal to :mod:`gpulens.ipc.kineto.service`; every method takes the table's lock,
so the endpoint thread (hand_over) and the watch thread (tick) may race.
Files are looked for outside the lock with :func:`~gpulens.ipc.kineto.requests.probe_trace_file`
(no link followed, no FIFO opened blocking, only the target's regular files).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from gpulens.ipc.errors import NotTraceable, TraceError, TraceTimeout
from gpulens.ipc.kineto.requests import (
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


@dataclass(slots=True)
class PidTask:
    """One pid of a job (mutable; only touched under the table lock)."""

    pid: int
    config: str
    output: TraceOutput | None = None
    poll_deadline_s: float = 0.0
    handed_s: float | None = None
    handed_wall: float = 0.0
    file: str | None = None
    error: str | None = None
    refused: bool = False
    note: str | None = None

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

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[str, _Job] = {}
        self._pending: dict[int, tuple[str, PidTask]] = {}
        self.listeners: list[Callable[[TraceJob], None]] = []

    def add(
        self, request_id: str, req: TraceRequest, tasks: dict[int, PidTask], fut: Future[TraceResult]
    ) -> _Job:
        with self._lock:
            job = _Job(request_id, req, tasks, fut, time.monotonic())
            for pid, task in tasks.items():
                if task.error is None and pid in self._pending:
                    task.error = f"a trace of process {pid} is already pending"
                elif task.error is None:
                    self._pending[pid] = (request_id, task)
            self._jobs[request_id] = job
            while len(self._jobs) > MAX_JOBS_KEPT:
                oldest = next(iter(self._jobs))
                if not self._jobs[oldest].future.done():
                    break
                del self._jobs[oldest]
            job.detail = self._waiting_detail(job)
            return job

    @staticmethod
    def _waiting_detail(job: _Job) -> str:
        return "the target picks the request up at its next poll (up to one poll interval)"

    def snapshot(self, request_id: str) -> TraceJob:
        with self._lock:
            return self._jobs[request_id].snapshot()

    def snapshots(self) -> list[TraceJob]:
        with self._lock:
            return [j.snapshot() for j in self._jobs.values()]

    def waiting_tasks(self, request_id: str) -> list[PidTask]:
        with self._lock:
            return [t for t in self._jobs[request_id].tasks.values() if not t.finished and t.handed_s is None]

    def hand_over(self, pid: int) -> tuple[str, TraceJob] | None:
        """Config text for a polling pid with a pending request, and the job's new snapshot."""
        with self._lock:
            entry = self._pending.pop(pid, None)
            if entry is None:
                return None
            request_id, task = entry
            job = self._jobs.get(request_id)
            if job is None or task.finished:
                return None
            task.handed_s = time.monotonic()
            task.handed_wall = time.time()
            job.state = TraceState.TRACING
            job.detail = f"config handed to process {pid}; tracing {job.request.describe()}"
            return task.config, job.snapshot()

    def mark_handed(self, pid: int) -> None:
        """Mark a task handed by another route (dynolog RPC)."""
        with self._lock:
            entry = self._pending.pop(pid, None)
            if entry is not None:
                entry[1].handed_s = time.monotonic()
                entry[1].handed_wall = time.time()
                self._jobs[entry[0]].state = TraceState.TRACING

    def fail_task(self, request_id: str, pid: int, reason: str) -> None:
        with self._lock:
            self._pending.pop(pid, None)
            self._jobs[request_id].tasks[pid].error = reason

    def tick(
        self,
        diagnose: Callable[[int], str],
        probe: Callable[[TraceOutput, int, float], FileProbe] = probe_trace_file,
    ) -> list[TraceJob]:
        """Advance every open job: poll deadlines, files on disk, timeouts."""
        now = time.monotonic()
        changed: list[TraceJob] = []
        with self._lock:
            open_jobs = [j for j in self._jobs.values() if not j.future.done()]
            handed = {
                id(j): [(t, t.output, t.handed_wall) for t in j.tasks.values() if t.handed_s is not None and not t.finished]
                for j in open_jobs
            }
        for job in open_jobs:
            late = [t.pid for t in job.tasks.values() if not t.finished and t.handed_s is None and now > t.poll_deadline_s]
            reasons = {pid: diagnose(pid) for pid in late}  # reads /proc: outside the lock
            # Looks at files the target controls: outside the lock too (it never blocks, but
            # a slow filesystem must not hold up the endpoint thread's hand_over).
            probes = {t.pid: probe(out, t.pid, wall) for t, out, wall in handed[id(job)] if out is not None}
            with self._lock:
                before = (job.state, job.detail)
                self._advance(job, now, reasons, probes)
                if (job.state, job.detail) != before:
                    changed.append(job.snapshot())
        return changed

    def _advance(self, job: _Job, now: float, reasons: dict[int, str], probes: dict[int, FileProbe]) -> None:
        req = job.request
        for task in job.tasks.values():
            if task.finished:
                continue
            if task.handed_s is None:
                if task.pid in reasons:
                    self._pending.pop(task.pid, None)
                    task.error = reasons[task.pid]
                continue
            found = probes.get(task.pid, FileProbe())
            task.note = found.note or task.note
            if found.refused is not None:
                task.refused = True
                task.error = f"trace file refused: {found.refused}"
            elif found.path is not None:
                task.file = found.path
                job.files[task.pid] = task.file
            elif now - task.handed_s > req.timeout_s:
                task.error = (
                    f"no trace file from process {task.pid} within {req.timeout_s:.0f} s "
                    f"after the config was handed over (watched {task.watched})"
                ) + (f"; {task.note}" if task.note else "")
            elif req.duration_ms is not None and now - task.handed_s > req.warmup_s + req.duration_ms / 1000:
                job.state = TraceState.WRITING
                job.detail = f"waiting for process {task.pid} to write its trace"
        if all(t.finished for t in job.tasks.values()):
            self._finish(job, now)

    def _finish(self, job: _Job, now: float) -> None:
        missing = {t.pid: t.error or "" for t in job.tasks.values() if t.file is None}
        if job.files:
            job.state = TraceState.DONE
            job.detail = ", ".join(job.files.values())
            owners = {
                pid: t.output.owner_uid for pid, t in job.tasks.items() if pid in job.files and t.output is not None
            }
            job.future.set_result(
                TraceResult(job.request_id, dict(job.files), missing, now - job.started_s, owners=owners)
            )
            return
        job.state = TraceState.FAILED
        job.detail = "; ".join(f"{pid}: {why}" for pid, why in missing.items())
        timed_out = all(t.handed_s is not None for t in job.tasks.values())
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
            return out

    def notify(self, snap: TraceJob) -> None:
        for listener in list(self.listeners):
            try:
                listener(snap)
            except Exception:
                log.exception("trace job listener failed")
