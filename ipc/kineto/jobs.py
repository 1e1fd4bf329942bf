"""Bookkeeping of trace jobs: one trace at a time per pid, hand-over and re-hand, Futures.

Internal to :mod:`gpulens.ipc.kineto.service`; every method takes the table's lock,
so the endpoint thread (hand_over) and the watch thread (tick) may race.
Files are looked for outside the lock with :func:`~gpulens.ipc.kineto.outputs.probe_trace_file`
(no link followed, no FIFO opened blocking, only the target's regular files); what a
tick sees and concludes for each task (ended, never polled, landed, timed out) is
:mod:`gpulens.ipc.kineto.jobwatch`'s.

Kineto drops a config that arrives while its profiler is busy (a trace
running, being written, or another config pending), so a request is never
handed over then: per pid at most one task is *pending* (waiting for a poll)
or *running* (handed, file not yet landed); later ones are *queued* behind
it (``TraceState.QUEUED``, at most ``MAX_QUEUED_PER_PID``, more are refused
at once) and become pending when the one before finishes. A poll that says
the profiler is busy (someone else's trace) keeps the task pending.
A target that exits fails its task within one watch tick, saying how it ended
where that could be seen ("process N crashed (SIGSEGV) during the trace",
:mod:`gpulens.ipc.kineto.jobtext`). A pid of a common-start request (a job's
rank) still busy with another trace when that start comes is not traced and
says so; the request's other pids are traced and returned.

A duration trace without a common start gets its ``PROFILE_START_TIME``
at hand-over (:func:`~gpulens.ipc.kineto.kconfig.stamp_start`: one profiler
tick ahead instead of Kineto's two). A poll that says the profiler is idle
after that start and before the file can be written means Kineto dropped
the config (its loop saw it too late): it is handed again with a fresh start
and :data:`REHAND_LEAD_S` more lead each time (a loaded machine's loop runs
late), at most :data:`MAX_REHANDS` times, or, for a common start that cannot
move, fails at once with the reason.
While a file is due, :meth:`JobTable.watch_interval` asks for quicker looks.

Each landed duration trace tells where the target's profiler loop ticks
(at the window's end, then every second: :func:`~gpulens.ipc.kineto.kconfig.loop_tick_after`);
the next start stamped for that process goes just after its next tick rather
than a whole tick after the hand-over (issue 32 item 8). A start so placed that
Kineto drops all the same (the loop was moved by someone else's trace) is
handed again with the full pickup, and the tick forgotten.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future

from gpulens.core.logbook import call_isolated
from gpulens.ipc.kineto.jobstate import Job, finish, refresh, start_missed
from gpulens.ipc.kineto.jobstate import PidTask as PidTask  # re-exported for the service and tests
from gpulens.ipc.kineto.jobtext import missed_common_start, never_traced
from gpulens.ipc.kineto.jobwatch import (
    Ended,
    Inspect,
    Looked,
    look_at_processes,
    look_into_files,
    loop_key,
    pickup_failure,
    settle_handed,
)
from gpulens.ipc.kineto.kconfig import (
    KINETO_DEFAULT_LEAD_S,
    PICKUP_S,
    file_due_wall,
    stamp_start,
    warmup_secs,
)
from gpulens.ipc.kineto.liveness import zombie_status
from gpulens.ipc.kineto.outputs import FileProbe, TraceOutput, probe_trace_file
from gpulens.ipc.kineto.requests import TraceJob, TraceRequest, TraceResult
from gpulens.ipc.kineto.steps import shows_memory_events

log = logging.getLogger(__name__)
MAX_JOBS_KEPT = 200
MAX_QUEUED_PER_PID = 4
"""Traces of one pid that may wait behind its running one; more are refused at once."""
DROP_GRACE_S = 0.1
"""An idle poll this long after a handed trace's start means Kineto dropped the config."""
MAX_REHANDS = 2
REHAND_LEAD_S = 2.0
"""Seconds added to the start's lead each time a config is handed again after Kineto's loop missed it."""
DUE_TICK_S = 0.02
"""The watch period while a file is due (from just before it can land until ``DUE_WINDOW_S`` after)."""
DUE_WINDOW_S = 5.0
PREDICT_TICKS = True
"""Stamp a start just after the profiler loop's tick learned from the last trace (False: a whole
pickup after every hand-over, as before issue 32 item 8; benchmarks/trace_latency.py compares both)."""


class JobTable:
    """All jobs of one service, with listeners notified outside the lock."""

    def __init__(self, inspect: Inspect | None = None, memory: Inspect = shows_memory_events) -> None:
        """``memory(path, owner_uid)``: does a ``profile_memory`` trace hold ``[memory]`` events."""
        self._lock = threading.Lock()
        self._jobs: dict[str, Job] = {}
        self._pending: dict[int, tuple[str, PidTask]] = {}
        self._running: dict[int, tuple[str, PidTask]] = {}
        self._queued: dict[int, deque[tuple[str, PidTask]]] = {}
        self._inspect = inspect
        self._memory = memory
        self.stepped: dict[int, bool] = {}
        """Per pid: did its last inspected trace show optimizer steps (learned from files)."""
        self.ticks: dict[tuple[int, int], float] = {}
        """Per process (pid, start ticks): a wall time its Kineto profiler loop ticked (a trace's end)."""
        self.listeners: list[Callable[[TraceJob], None]] = []

    def add(
        self, request_id: str, req: TraceRequest, tasks: dict[int, PidTask], fut: Future[TraceResult]
    ) -> Job:
        now = time.monotonic()
        with self._lock:
            job = Job(request_id, req, tasks, fut, now)
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
            refresh(job, self.stepped)
            if all(t.finished for t in tasks.values()):
                finish(job, now)
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

    def unhanded(self) -> int:
        """Tasks accepted whose config has not reached Kineto yet: waiting for their target's poll, or queued."""
        with self._lock:
            waiting = sum(not t.finished for _, t in self._pending.values())
            return waiting + sum(not t.finished for line in self._queued.values() for _, t in line)

    def hand_over(self, pid: int, accepts: bool = True) -> tuple[str, TraceJob] | None:
        """Config text for a polling pid with a pending request, and the job's new snapshot.

        ``accepts`` False: the poll said the target's profiler is busy; the
        config stays pending (Kineto would drop it) and the job says why.
        """
        with self._lock:
            entry = self._pending.get(pid)
            if entry is None:
                return self._dropped(pid, accepts)
            request_id, task = entry
            job = self._jobs.get(request_id)
            if job is None or task.finished:
                self._pending.pop(pid, None)
                return None
            if start_missed(job.request):
                return None  # Kineto would refuse it; the next tick fails the task with the reason
            if not accepts:
                if task.busy_since_s is None:
                    task.busy_since_s = time.monotonic()
                before = job.detail
                refresh(job, self.stepped)
                return None if job.detail == before else ("", job.snapshot())
            del self._pending[pid]
            self._running[pid] = entry
            text = self._hand(job, task)
            refresh(job, self.stepped)
            return text, job.snapshot()

    def _hand(self, job: Job, task: PidTask, on_tick: bool = True) -> str:
        """The text to hand over now: an explicit start for a duration trace starting at once."""
        task.handed_s = time.monotonic()
        task.handed_wall = time.time()
        # A loop late once (a loaded machine) gets REHAND_LEAD_S more each time it is handed again.
        pickup = PICKUP_S + REHAND_LEAD_S * task.rehanded
        tick = self.ticks.get(loop_key(task)) if on_tick and PREDICT_TICKS and not task.rehanded else None
        text, task.start_wall = stamp_start(task.config, task.handed_wall, warmup_secs(job.request), pickup, tick)
        task.on_tick = tick is not None and task.start_wall is not None and job.request.start_time_ms is None
        return text

    def _dropped(self, pid: int, accepts: bool) -> tuple[str, TraceJob] | None:
        """A running trace's target polls with an idle profiler: hand it again, or fail (lock held)."""
        entry = self._running.get(pid)
        if entry is None or not accepts:
            return None
        request_id, task = entry
        job = self._jobs.get(request_id)
        req = job.request if job is not None else None
        if job is None or req is None or task.finished or task.start_wall is None or req.duration_ms is None:
            return None
        now = time.time()
        # Kineto is busy from activation (before the start) until the file is written.
        if not task.start_wall + DROP_GRACE_S < now < file_due_wall(task.start_wall, req.duration_ms):
            return None
        why = f"process {pid}'s Kineto did not start the trace: its profiler was idle after the start time"
        if task.on_tick:  # the loop did not tick where its last trace said: hand it with the full pickup
            log.info("%s (placed after a predicted profiler tick); handing it again", why)
            self.ticks.pop(loop_key(task), None)
            text = self._hand(job, task, on_tick=False)
            refresh(job, self.stepped)
            return text, job.snapshot()
        if req.start_time_ms is None and task.rehanded < MAX_REHANDS:
            task.rehanded += 1
            log.info("%s (its loop may have picked the config up too late); handing it again", why)
            text = self._hand(job, task)
            refresh(job, self.stepped)
            return text, job.snapshot()
        task.error = never_traced(task, why, req.start_time_ms is not None)
        self._release(pid, task, time.monotonic())
        refresh(job, self.stepped)
        if all(t.finished for t in job.tasks.values()):
            finish(job, time.monotonic())
        return "", job.snapshot()

    def mark_handed(self, pid: int) -> None:
        """Mark a task handed by another route (dynolog RPC)."""
        with self._lock:
            entry = self._pending.pop(pid, None)
            if entry is not None:
                self._running[pid] = entry
                job, task = self._jobs[entry[0]], entry[1]
                task.handed_s = time.monotonic()
                task.handed_wall = time.time()
                if job.request.duration_ms is not None:  # dynolog hands PROFILE_START_TIME=0 at its next poll
                    task.start_wall = (
                        job.request.start_time_ms / 1000 if job.request.start_time_ms is not None
                        else task.handed_wall + warmup_secs(job.request) + KINETO_DEFAULT_LEAD_S
                    )
                refresh(job, self.stepped)

    def busy(self) -> bool:
        """Whether a job is still open: only then has the watch thread anything to look at."""
        with self._lock:
            return any(not j.future.done() for j in self._jobs.values())

    def watch_interval(self, default_s: float) -> float:
        """How long the watch thread may sleep: ``DUE_TICK_S`` while a handed trace's file is due.

        Kineto writes the file one profiler tick after the window ends
        (:func:`~gpulens.ipc.kineto.kconfig.file_due_wall`); looking every
        ``DUE_TICK_S`` from just before then takes the file within tens of
        ms of its rename rather than within ``default_s``.
        """
        now = time.time()
        with self._lock:
            for rid, task in self._running.values():
                job = self._jobs.get(rid)
                if task.start_wall is None or job is None or job.request.duration_ms is None:
                    continue
                due = file_due_wall(task.start_wall, job.request.duration_ms)
                if due - 0.1 <= now <= due + DUE_WINDOW_S:
                    return min(default_s, DUE_TICK_S)
        return default_s

    def open_pids(self) -> set[int]:
        """Pids of open tasks (queued ones too): the processes whose end the service listens for."""
        with self._lock:
            return {t.pid for j in self._jobs.values() if not j.future.done() for t in j.tasks.values()
                    if not t.finished}

    def fail_task(self, request_id: str, pid: int, reason: str) -> None:
        with self._lock:
            task = self._jobs[request_id].tasks[pid]
            task.error = reason
            self._release(pid, task, time.monotonic())

    def tick(
        self,
        diagnose: Callable[[int], str],
        probe: Callable[[TraceOutput, int, float], FileProbe] = probe_trace_file,
        ended: Ended = zombie_status,
    ) -> list[TraceJob]:
        """Advance every open job: exits (``ended`` says how), poll deadlines, files on disk, timeouts."""
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
            gone, reasons = look_at_processes(live[id(job)], now, diagnose, ended)
            probes = {t.pid: probe(out, t.pid, wall) for t, out, wall in watched[id(job)] if out is not None}
            steps, memory = look_into_files(job.request, watched[id(job)], probes, self._inspect, self._memory)
            looked = Looked(gone, reasons, probes, steps, memory)
            with self._lock:
                before = (job.state, job.detail)
                self._advance(job, now, looked)
                if (job.state, job.detail) != before:
                    changed.append(job.snapshot())
        return changed

    def _advance(self, job: Job, now: float, looked: Looked) -> None:
        """Settle each open task of ``job`` from what the tick saw (lock held)."""
        req = job.request
        for task in job.tasks.values():
            if task.finished:
                continue
            if task.queued_behind is not None:
                if start_missed(req):  # a job's rank still busy with another request's trace: not traced
                    task.error = missed_common_start(task, task.queued_behind)
                    self._release(task.pid, task, now)
                continue
            if task.handed_s is None:
                failure = pickup_failure(task, req, now, looked)
                if failure is not None:
                    task.error = str(failure)  # the task's sentence: what its snapshot and result carry
            else:
                settle_handed(job, task, now - task.handed_s, looked, self.ticks, self.stepped)
            if task.finished:
                self._release(task.pid, task, now)
        refresh(job, self.stepped)
        if all(t.finished for t in job.tasks.values()):
            finish(job, now)

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
            refresh(self._jobs[rid], self.stepped)
            break
        if not line:
            self._queued.pop(pid, None)

    def fail_all(self, reason: str) -> list[TraceJob]:
        with self._lock:
            out = []
            for job in self._jobs.values():
                if not job.future.done():
                    for t in job.tasks.values():
                        if not t.finished:
                            t.error = reason
                    finish(job, time.monotonic())
                    out.append(job.snapshot())
            self._pending.clear()
            self._running.clear()
            self._queued.clear()
            return out

    def notify(self, snap: TraceJob) -> None:
        for listener in list(self.listeners):
            call_isolated(log, "trace job listener", listener, snap)
