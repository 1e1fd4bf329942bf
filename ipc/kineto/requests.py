"""Trace requests: what to trace, and what a trace job reports back.

A :class:`TraceRequest` is plain data (it may come from a remote viewer);
output paths are never part of it: where each pid's file lands, and how it
is read back, is :mod:`gpulens.ipc.kineto.outputs`. A :class:`TraceJob` is
one job's progress (its :class:`TraceState`), a :class:`TraceResult` what it
ended with. The Kineto config text (:func:`config_text`) and the
file-complete rule (:func:`trace_complete`) live in ``kconfig`` and
``tracefile``; they are re-exported here, where they lived first.
"""

from __future__ import annotations

import enum
import itertools
import os
import time
from dataclasses import dataclass, field

from gpulens.core.errors import ConfigError, ConfigProblem

# Re-exported: they lived here first (kconfig holds the config text and Kineto's timing).
from gpulens.ipc.kineto.kconfig import ITERATION_FALLBACK_MS as ITERATION_FALLBACK_MS
from gpulens.ipc.kineto.kconfig import config_text as config_text
from gpulens.ipc.kineto.tracefile import TAIL_BYTES as TAIL_BYTES
from gpulens.ipc.kineto.tracefile import trace_complete as trace_complete

MAX_DURATION_MS = 10 * 60 * 1000
MAX_ITERATIONS = 100_000
_ids = itertools.count(1)


class BadTraceRequest(ConfigError, ValueError):
    """A :class:`TraceRequest` out of range or in conflict: ``where`` is the field's name, ``problem``
    OUT_OF_RANGE or CONFLICT, and the message the sentence a viewer or the agent's reply carries."""


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """What to trace: pids or a job id, for a duration or N iterations, and options.

    Exactly one of ``pids`` / ``job_id`` and one of ``duration_ms`` /
    ``iterations``. ``warmup_s`` is Kineto's ``ACTIVITIES_WARMUP_PERIOD_SECS``
    (its default is 5 s; 0 suits CPU-only programs, GPU programs may want 1-2 s
    for CUPTI). ``timeout_s`` bounds the wait after the config is handed over.
    ``start_time_ms``: a wall-clock start (ms since the epoch, Kineto's
    ``PROFILE_START_TIME``) shared by every rank of a job so their windows
    line up; None starts at once. It must lie a little in the future (at
    least one poll interval) when the request is made.
    """

    pids: tuple[int, ...] = ()
    job_id: int | None = None
    duration_ms: int | None = 500
    iterations: int | None = None
    record_shapes: bool = False
    with_stack: bool = False
    with_flops: bool = False
    with_modules: bool = False
    profile_memory: bool = False
    warmup_s: float = 0.0
    timeout_s: float = 60.0
    start_time_ms: int | None = None

    def validate(self) -> None:
        """Raises BadTraceRequest (a ValueError) naming the field that is out of range or in conflict."""
        def bad(fld: str, message: str, problem: ConfigProblem = ConfigProblem.OUT_OF_RANGE) -> BadTraceRequest:
            return BadTraceRequest(message, where=fld, problem=problem)

        if bool(self.pids) == (self.job_id is not None):
            raise bad("pids", "give either pids or a job id", ConfigProblem.CONFLICT)
        if any(p <= 0 for p in self.pids) or len(self.pids) > 1024:
            raise bad("pids", "pids must be 1..1024 positive process ids")
        if (self.duration_ms is None) == (self.iterations is None):
            raise bad("duration_ms", "give either duration_ms or iterations", ConfigProblem.CONFLICT)
        if self.duration_ms is not None and not 1 <= self.duration_ms <= MAX_DURATION_MS:
            raise bad("duration_ms", f"duration_ms must be 1..{MAX_DURATION_MS}")
        if self.iterations is not None and not 1 <= self.iterations <= MAX_ITERATIONS:
            raise bad("iterations", f"iterations must be 1..{MAX_ITERATIONS}")
        if not 0 <= self.warmup_s <= 300:
            raise bad("warmup_s", "warmup_s must be 0..300")
        if not 0 < self.timeout_s <= 3600:
            raise bad("timeout_s", "timeout_s must be in (0, 3600]")
        if self.start_time_ms is not None:
            if self.iterations is not None:
                raise bad("start_time_ms", "start_time_ms goes with duration_ms, not iterations",
                          ConfigProblem.CONFLICT)
            if abs(self.start_time_ms / 1000 - time.time()) > 3600:
                raise bad("start_time_ms", "start_time_ms must be within an hour of now (ms since the epoch)")

    def describe(self) -> str:
        """Short human form, e.g. ``500 ms`` or ``3 iterations``."""
        if self.iterations is not None:
            return f"{self.iterations} iteration{'s' if self.iterations != 1 else ''}"
        return f"{self.duration_ms} ms"


class TraceState(enum.Enum):
    """Life of one trace job, in order; FAILED can follow any state.

    QUEUED: another trace of one of its processes is still running; this one
    is handed over when that trace's file has landed (never sent to Kineto,
    which would drop it while busy).
    """

    QUEUED = "queued"
    WAITING_FOR_POLL = "waiting for poll"
    TRACING = "tracing"
    WRITING = "writing"
    DONE = "done"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class TraceResult:
    """Where each traced pid's file landed (absolute paths), and how long it took.

    ``owners`` maps each pid of ``files`` to the uid its file must belong to
    (the target's, captured when the request was accepted): open the file
    with :func:`~gpulens.ipc.kineto.outputs.open_trace_file` and that owner. ``notes``: per pid, what the
    file holds when it is not what was asked (an iterations request that
    Kineto turned into a duration trace).
    """

    request_id: str
    files: dict[int, str]
    missing: dict[int, str] = field(default_factory=dict)
    elapsed_s: float = 0.0
    owners: dict[int, int] = field(default_factory=dict)
    notes: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TraceJob:
    """A snapshot of one trace job's progress, for UIs (immutable; a new one per change)."""

    request_id: str
    request: TraceRequest
    pids: tuple[int, ...]
    state: TraceState
    detail: str = ""
    started_s: float = 0.0
    files: dict[int, str] = field(default_factory=dict)


def new_request_id() -> str:
    """A request id unique on this host: ``<pid>-<counter>-<time>`` (REQUEST_TRACE_ID only:
    it never shapes a path, so knowing it tells nobody where a trace goes)."""
    return f"{os.getpid()}-{next(_ids)}-{int(time.time())}"
