"""The profiler screen's record of its traces: each target's jobs, the trace each belongs to, the rows.

One ``t`` asks every target at once: the requests it sent form one trace (a batch), and a job a
service reports is matched to the request it answers, else gets a batch of its own (one taken
before the screen opened). Pure bookkeeping, no widget: the screen draws from it.
"""

from __future__ import annotations

from gpulens.ipc.kineto.requests import TraceJob, TraceRequest
from gpulens.tui.screens.profiler_rows import FileRow

WAITING = ("waiting for poll", "queued")
"""Job states whose waiting time the table keeps counting."""


class TraceBook:
    """Every trace job of each target (by index), its batch, and the table's rows by key."""

    def __init__(self) -> None:
        self.jobs: dict[tuple[int, str], TraceJob] = {}
        self.batches: dict[tuple[int, str], int] = {}
        self.asked: list[tuple[int, int, TraceRequest]] = []
        """(batch, target, request) sent, whose job no service has reported yet."""
        self.next_batch = 1
        self.rows: dict[str, FileRow] = {}

    def add(self, target: int, job: TraceJob) -> None:
        """A job of ``target`` was reported (new, or in a new state)."""
        self.batch_for(target, job)
        self.jobs[(target, job.request_id)] = job

    def batch_for(self, target: int, job: TraceJob) -> int:
        """The trace (one ``t``) a job belongs to: the request we sent, else a batch of its own."""
        key = (target, job.request_id)
        if key not in self.batches:
            for i, (batch, t, req) in enumerate(self.asked):
                if t == target and (job.request is req or job.request == req):
                    del self.asked[i]
                    self.batches[key] = batch
                    break
            else:
                self.batches[key] = self.new_batch()
        return self.batches[key]

    def new_batch(self) -> int:
        """The number of a new trace."""
        batch, self.next_batch = self.next_batch, self.next_batch + 1
        return batch

    def jobs_of(self, target: int) -> list[TraceJob]:
        """``target``'s jobs, oldest first."""
        return [j for (t, _), j in self.jobs.items() if t == target]

    def waiting(self) -> list[int]:
        """The targets with a job still waiting (for a poll, or behind another trace)."""
        return sorted({t for (t, _rid), job in self.jobs.items() if job.state.value in WAITING})

    def refused(self, req: TraceRequest) -> bool:
        """``req`` failed before any job showed for it: forget it; False when its job is known."""
        pending = [a for a in self.asked if a[2] is req]
        if pending:
            self.asked.remove(pending[0])
        return bool(pending)

    def batch_rows(self, batch: int) -> list[FileRow]:
        """The rows of one trace (a row per traced process)."""
        return [r for r in self.rows.values() if r.batch == batch]

    def last_rows(self) -> list[FileRow]:
        """The rows of the newest trace."""
        last = max((r.batch for r in self.rows.values()), default=None)
        return [r for r in self.rows.values() if r.batch == last]
