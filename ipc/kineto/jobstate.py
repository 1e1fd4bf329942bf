"""The state of one trace job: its pid tasks, what a UI is told, how its Future resolves.

Internal to :mod:`gpulens.ipc.kineto.jobs` (the table that owns the lock) and
:mod:`gpulens.ipc.kineto.jobwatch` (what each watch tick sees):
nothing here locks; callers hold the table's lock.
"""

from __future__ import annotations

import time
from concurrent.futures import Future
from dataclasses import dataclass, field

from gpulens.ipc.errors import NotTraceable, TraceError, TraceTimeout
from gpulens.ipc.kineto.kconfig import (
    ITERATION_FALLBACK_MS,
    MIN_LEAD_S,
    warmup_secs,
    window_end_wall,
)
from gpulens.ipc.kineto.liveness import ProcIdentity
from gpulens.ipc.kineto.outputs import TraceOutput
from gpulens.ipc.kineto.requests import TraceJob, TraceRequest, TraceResult, TraceState
from gpulens.ipc.kineto.untraceable import Untraceable


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
    reason: Untraceable | None = None
    """Why it was refused before it started (``error`` is its sentence); None for any other error."""
    refused: bool = False
    note: str | None = None
    result_note: str | None = None
    queued_behind: str | None = None
    busy_since_s: float | None = None
    ident: ProcIdentity | None = None
    start_wall: float | None = None
    """The trace's start as handed (seconds since the epoch); None for iterations."""
    rehanded: int = 0
    on_tick: bool = False
    """The start was put just after a profiler-loop tick predicted from this process's last trace."""
    ended: bool = False
    """The target ended (exited, crashed, was killed) while its trace ran."""

    @property
    def finished(self) -> bool:
        return self.file is not None or self.error is not None

    @property
    def watched(self) -> str:
        """The directory watched, for messages."""
        return f"{self.output.directory}/" if self.output is not None else "nothing"


@dataclass(slots=True)
class Job:
    """One request's bookkeeping (mutable; only touched under the table lock)."""

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


def refresh(job: Job, stepped: dict[int, bool]) -> None:
    """The job's state and detail from its tasks' (only while it is open)."""
    if job.future.done():
        return
    open_tasks = [t for t in job.tasks.values() if not t.finished]
    if not open_tasks:
        return
    handed = [t for t in open_tasks if t.handed_s is not None]
    pending = [t for t in open_tasks if t.handed_s is None and t.queued_behind is None]
    if handed:
        _refresh_handed(job, handed, len(pending), stepped)
    elif pending:
        _refresh_pending(job, pending)
    else:
        job.state = TraceState.QUEUED
        t = open_tasks[0]
        job.detail = (
            f"queued behind trace {t.queued_behind} of process {t.pid}; starts when that trace's "
            "file has landed"
        )


def _refresh_handed(job: Job, handed: list[PidTask], waits: int, stepped: dict[int, bool]) -> None:
    """Some config was handed over: WRITING once the window has passed, else TRACING (``waits``: pids still pending)."""
    req = job.request
    t = handed[0]
    pids = [h.pid for h in handed]
    started = t.start_wall if t.start_wall is not None else t.handed_wall + req.warmup_s
    if req.duration_ms is not None and time.time() > window_end_wall(started, req.duration_ms):
        job.state = TraceState.WRITING
        job.detail = (f"waiting for process {t.pid} to write its trace" if len(pids) == 1
                      else f"waiting for processes {name_pids(pids)} to write their traces")
    else:
        job.state = TraceState.TRACING
        more = (f" ({waits} more wait{'s' if waits == 1 else ''} for {'its' if waits == 1 else 'their'} poll)"
                if waits else "")
        whom = f"process {t.pid}" if len(pids) == 1 else f"processes {name_pids(pids)}"
        job.detail = f"config handed to {whom}{more}; {tracing_what(req, pids, stepped)}"


def _refresh_pending(job: Job, pending: list[PidTask]) -> None:
    """Nothing handed yet: waiting for a poll, or for a busy profiler to finish someone else's trace."""
    job.state = TraceState.WAITING_FOR_POLL
    busy = [t.pid for t in pending if t.busy_since_s is not None]
    if busy:
        job.detail = (
            f"process {busy[0]}'s profiler is busy with another trace (not this request); "
            "the config goes at its first poll after that trace is written"
        )
    else:
        job.detail = "the target picks the request up at its next poll (up to one poll interval)"


MAX_NAMED = 8
"""Pids a progress line names; more are counted."""


def name_pids(pids: list[int]) -> str:
    """``101, 102, 103``, or the first eight and ``and 4 more``."""
    shown = ", ".join(map(str, pids[:MAX_NAMED]))
    return shown if len(pids) <= MAX_NAMED else f"{shown} and {len(pids) - MAX_NAMED} more"


def finish(job: Job, now: float) -> None:
    """Resolve the job's Future: the files that landed, or one error naming every pid's reason."""
    missing = {t.pid: t.error or "" for t in job.tasks.values() if t.file is None}
    notes = {t.pid: "; ".join(n) for t in job.tasks.values() if (n := task_notes(t))}
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
    job.future.set_exception(_failure(job))


def _failure(job: Job) -> TraceError:
    """The error of a job with no file: refused by a process, timed out after every hand-over, or not traceable."""
    tasks = job.tasks.values()
    if any(t.refused for t in tasks):
        return TraceError(job.detail)
    if all(t.handed_s is not None for t in tasks) and not any(t.ended for t in tasks):
        return TraceTimeout(job.detail)
    return NotTraceable(job.detail, reasons={t.pid: t.reason for t in tasks if t.reason is not None})


def task_notes(task: PidTask) -> list[str]:
    """What the result should say about ``task`` besides its file: where it went instead, what it holds."""
    placed = task.output.note if task.output is not None else None
    return [n for n in (placed, task.result_note) if n]


def start_missed(req: TraceRequest) -> bool:
    """True when ``req`` has a common start time too close (or past) for a config handed now.

    Kineto's profiler loop must see the config ``MIN_LEAD_S`` (one tick + a little) plus the
    warm-up before the start, else it drops it ("start timestamp is in the past").
    """
    return (
        req.start_time_ms is not None
        and time.time() > req.start_time_ms / 1000 - MIN_LEAD_S - warmup_secs(req)
    )


def no_file_error(task: PidTask, req: TraceRequest) -> str:
    """A handed task's error when no file came within the request's timeout."""
    placed = task.output.note if task.output is not None else None
    return (
        f"no trace file from process {task.pid} within {req.timeout_s:.0f} s "
        f"after the config was handed over (watched {task.watched})"
    ) + "".join(f"; {n}" for n in (placed, task.note) if n)


def tracing_what(req: TraceRequest, pids: list[int], stepped: dict[int, bool]) -> str:
    """What is being traced, honestly: an iterations request may become a duration trace."""
    if req.iterations is None:
        when = " from the common start time" if req.start_time_ms is not None else ""
        return f"tracing {req.describe()}{when}"
    if all(stepped.get(pid) for pid in pids):
        return f"tracing {req.describe()} (the next optimizer steps)"
    return (
        f"tracing {req.describe()} if it steps an optimizer, else {ITERATION_FALLBACK_MS} ms "
        "(Kineto's fallback before the first optimizer.step())"
    )
