"""What the watch thread finds about a job's open tasks, and what it concludes from it.

Internal to :mod:`gpulens.ipc.kineto.jobs`: :meth:`~gpulens.ipc.kineto.jobs.JobTable.tick`
reads /proc and the targets' files outside the table's lock
(:func:`look_at_processes`: which targets ended and how, why a late one has
not polled; :func:`look_into_files`: what a landed trace shows), keeps what
it saw in a :class:`Looked`, then settles each task under the lock: one not
handed over yet fails now or waits (:func:`pickup_failure`, a
:class:`PickupFailure`); a handed one lands, ends with its process, times out
or waits (:func:`settle_handed`). A landed duration trace teaches where its
process's profiler loop ticks, and whether it stepped an optimizer
(:func:`learn`), remembered per process by the table. Nothing here locks.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from gpulens.core.reasons import Reason, ReasonText
from gpulens.ipc.kineto.jobstate import Job, PidTask, no_file_error, start_missed
from gpulens.ipc.kineto.jobtext import (
    NO_MEMORY_NOTE,
    ended_before_pickup,
    ended_during_trace,
    missed_common_start,
)
from gpulens.ipc.kineto.kconfig import ITERATION_FALLBACK_MS, window_end_wall
from gpulens.ipc.kineto.liveness import ProcIdentity, exited
from gpulens.ipc.kineto.outputs import FileProbe, TraceOutput
from gpulens.ipc.kineto.requests import TraceRequest

MAX_STEP_MEMORY = 4096
"""Processes whose learned loop tick (and pids whose optimizer steps) are remembered; the oldest go first."""

Inspect = Callable[[str, int], "bool | None"]
"""``inspect(path, owner_uid)``: does the finished trace show optimizer steps (None: cannot tell)."""
Ended = Callable[[int, "ProcIdentity | None"], "int | None"]
"""``ended(pid, ident)`` of a process found gone: its ``waitpid`` status if it was seen, else None."""


@dataclass(frozen=True, slots=True)
class Looked:
    """What one watch tick saw of one job's tasks, outside the table's lock (by pid)."""

    gone: dict[int, int | None]
    """Targets that exited: their ``waitpid`` status, None when it was not seen."""
    reasons: dict[int, str]
    """Targets past their poll deadline that have not polled: why (the diagnosis' sentence)."""
    probes: dict[int, FileProbe]
    """Handed targets: their trace file, landed or refused, or not yet."""
    steps: dict[int, bool | None]
    """Landed files: did the target step an optimizer (None: cannot tell)."""
    memory: dict[int, bool | None]
    """Landed files of a ``profile_memory`` request: do they hold ``[memory]`` events."""


def loop_key(task: PidTask) -> tuple[int, int]:
    """The process a learned loop tick belongs to: a reused pid is another process (no tick known)."""
    return task.pid, task.ident.start_ticks if task.ident is not None else -1


def look_at_processes(
    live: list[PidTask], now: float, diagnose: Callable[[int], str], ended: Ended
) -> tuple[dict[int, int | None], dict[int, str]]:
    """(how each exited target ended, why each target past its poll deadline has not polled)."""
    gone = {t.pid: ended(t.pid, t.ident) for t in live if exited(t.pid, t.ident)}
    late = [
        t.pid for t in live
        if t.handed_s is None and t.pid not in gone and now > t.poll_deadline_s and t.busy_since_s is None
    ]
    return gone, {pid: diagnose(pid) for pid in late}


def look_into_files(
    req: TraceRequest, watched: list[tuple[PidTask, TraceOutput | None, float]], probes: dict[int, FileProbe],
    inspect: Inspect | None, memory: Inspect,
) -> tuple[dict[int, bool | None], dict[int, bool | None]]:
    """For each landed file: (did the target step an optimizer, does it hold the memory events asked for)."""
    steps: dict[int, bool | None] = {}
    held: dict[int, bool | None] = {}
    for t, out, _wall in watched:
        path = probes[t.pid].path if t.pid in probes else None
        if path is not None and out is not None and inspect is not None:
            steps[t.pid] = inspect(path, out.owner_uid)
        if path is not None and out is not None and req.profile_memory:
            held[t.pid] = memory(path, out.owner_uid)
    return steps, held


class PickupKind(enum.Enum):
    """Why a task not handed over yet fails; the comment says which fields of :class:`PickupFailure` it fills."""

    ENDED = "ended"  # pid, status (its waitpid status; None: nobody but its parent saw it)
    NOT_POLLED = "not-polled"  # pid, detail (the diagnosis' sentence: why it has not polled in time)
    START_MISSED = "start-missed"  # pid, detail (jobtext's sentence, worded from the task's facts)
    STAYED_BUSY = "stayed-busy"  # pid, timeout_s (how long its profiler stayed busy with another trace)


@dataclass(frozen=True, slots=True)
class PickupFailure(Reason):
    """Why a task not handed over yet fails now: ``kind`` and the facts its sentence names; ``str()`` is the
    task's error, the one line its job's snapshot, the result and the log carry."""

    kind: PickupKind
    pid: int
    status: int | None = None
    detail: str = ""
    timeout_s: float = 0.0

    TEXT: ClassVar[ReasonText] = {
        PickupKind.ENDED: lambda v: ended_before_pickup(v.pid, v.status),
        PickupKind.NOT_POLLED: "{0.detail}",  # the words as they came
        PickupKind.START_MISSED: "{0.detail}",  # the words as they came
        PickupKind.STAYED_BUSY: ("process {0.pid}'s profiler stayed busy with another trace for "
                                 "{0.timeout_s:.0f} s; the request was never handed over"),
    }


def pickup_failure(task: PidTask, req: TraceRequest, now: float, looked: Looked) -> PickupFailure | None:
    """Why a task not handed over yet fails now (its process ended, never polls, missed the start,
    stayed busy too long); None: it still waits."""
    pid = task.pid
    if pid in looked.gone:
        return PickupFailure(PickupKind.ENDED, pid, status=looked.gone[pid])
    if pid in looked.reasons:
        return PickupFailure(PickupKind.NOT_POLLED, pid, detail=looked.reasons[pid])
    if start_missed(req):
        return PickupFailure(PickupKind.START_MISSED, pid, detail=missed_common_start(task, None))
    if task.busy_since_s is not None and now - task.busy_since_s > req.timeout_s:
        return PickupFailure(PickupKind.STAYED_BUSY, pid, timeout_s=req.timeout_s)
    return None


def settle_handed(job: Job, task: PidTask, since_handed_s: float, looked: Looked,
                  ticks: dict[tuple[int, int], float], stepped: dict[int, bool]) -> None:
    """A handed task: its file refused or landed (learned from), its process gone, the request timed out,
    or still waiting."""
    req = job.request
    found = looked.probes.get(task.pid, FileProbe())
    if found.refused is not None:
        task.refused = True
        task.error = f"trace file refused: {found.refused}"
    elif found.path is not None:
        task.file = found.path
        job.files[task.pid] = task.file
        learn(ticks, stepped, task, req, looked.steps.get(task.pid))
        if looked.memory.get(task.pid) is False:
            task.result_note = "; ".join(n for n in (task.result_note, NO_MEMORY_NOTE) if n)
    elif task.pid in looked.gone:
        task.ended = True
        task.error = ended_during_trace(task.pid, looked.gone[task.pid])
    elif since_handed_s > req.timeout_s:
        task.note = found.note or task.note
        task.error = no_file_error(task, req)
    else:
        task.note = found.note or task.note


def learn(ticks: dict[tuple[int, int], float], stepped: dict[int, bool], task: PidTask, req: TraceRequest,
          steps: bool | None) -> None:
    """What a landed trace teaches: where its process's profiler loop ticks (``ticks``, a duration
    trace's), whether the pid stepped an optimizer (``stepped``; ``steps`` None: cannot tell), and the
    note of an iteration trace Kineto ran as a duration one."""
    if task.start_wall is not None and req.duration_ms is not None and task.ident is not None:
        # Kineto's loop woke at the window's end and ticks every second from there.
        ticks[loop_key(task)] = window_end_wall(task.start_wall, req.duration_ms)
        while len(ticks) > MAX_STEP_MEMORY:
            del ticks[next(iter(ticks))]
    if steps is None:
        return
    stepped[task.pid] = steps
    while len(stepped) > MAX_STEP_MEMORY:
        del stepped[next(iter(stepped))]
    if req.iterations is not None and not steps:
        task.result_note = (
            f"Kineto traced {ITERATION_FALLBACK_MS} ms, not {req.describe()}: process {task.pid} had not "
            "stepped an optimizer (Kineto counts iterations by optimizer.step() and falls back to a "
            "duration trace before the first)"
        )
