"""Trace requests: what to trace, the Kineto config text, where the file lands.

A :class:`TraceRequest` is plain data (it may come from a remote viewer);
output paths are never part of it. gpulens picks a fresh directory under
/tmp (Kineto refuses on-demand log files elsewhere), or under the target's
``KINETO_ONDEMAND_TRACE_DIR`` when the program sets one. libkineto inserts
``_<pid>`` before ``.json`` and renames the finished file into place, so the
final name appearing means the trace is complete.
"""

from __future__ import annotations

import enum
import itertools
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

MAX_DURATION_MS = 10 * 60 * 1000
MAX_ITERATIONS = 100_000
TRACE_ROOT = Path("/tmp")
_ids = itertools.count(1)


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """What to trace: pids or a job id, for a duration or N iterations, and options.

    Exactly one of ``pids`` / ``job_id`` and one of ``duration_ms`` /
    ``iterations``. ``warmup_s`` is Kineto's ``ACTIVITIES_WARMUP_PERIOD_SECS``
    (its default is 5 s; 0 suits CPU-only programs, GPU programs may want 1-2 s
    for CUPTI). ``timeout_s`` bounds the wait after the config is handed over.
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

    def validate(self) -> None:
        """Raises ValueError naming the field that is out of range."""
        if bool(self.pids) == (self.job_id is not None):
            raise ValueError("give either pids or a job id")
        if any(p <= 0 for p in self.pids) or len(self.pids) > 1024:
            raise ValueError("pids must be 1..1024 positive process ids")
        if (self.duration_ms is None) == (self.iterations is None):
            raise ValueError("give either duration_ms or iterations")
        if self.duration_ms is not None and not 1 <= self.duration_ms <= MAX_DURATION_MS:
            raise ValueError(f"duration_ms must be 1..{MAX_DURATION_MS}")
        if self.iterations is not None and not 1 <= self.iterations <= MAX_ITERATIONS:
            raise ValueError(f"iterations must be 1..{MAX_ITERATIONS}")
        if not 0 <= self.warmup_s <= 300:
            raise ValueError("warmup_s must be 0..300")
        if not 0 < self.timeout_s <= 3600:
            raise ValueError("timeout_s must be in (0, 3600]")

    def describe(self) -> str:
        """Short human form, e.g. ``500 ms`` or ``3 iterations``."""
        if self.iterations is not None:
            return f"{self.iterations} iteration{'s' if self.iterations != 1 else ''}"
        return f"{self.duration_ms} ms"


class TraceState(enum.Enum):
    """Life of one trace job, in order; FAILED can follow any state."""

    WAITING_FOR_POLL = "waiting for poll"
    TRACING = "tracing"
    WRITING = "writing"
    DONE = "done"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class TraceResult:
    """Where each traced pid's file landed (absolute paths), and how long it took."""

    request_id: str
    files: dict[int, str]
    missing: dict[int, str] = field(default_factory=dict)
    elapsed_s: float = 0.0


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
    """A request id unique on this host: ``<pid>-<counter>-<time>``."""
    return f"{os.getpid()}-{next(_ids)}-{int(time.time())}"


def output_dir(request_id: str, pid: int, target_env: dict[str, str] | None) -> Path:
    """The directory one pid's trace goes to (created by the caller)."""
    base = TRACE_ROOT
    if target_env and target_env.get("KINETO_ONDEMAND_TRACE_DIR"):
        # Newer Kineto only accepts on-demand paths under this directory.
        base = Path(target_env["KINETO_ONDEMAND_TRACE_DIR"])
    return base / f"gpulens-{os.geteuid()}" / request_id / str(pid)


def log_file(directory: Path) -> Path:
    """The ACTIVITIES_LOG_FILE value handed to Kineto."""
    return directory / "trace.json"


def final_paths(log: Path, pid: int) -> list[Path]:
    """Where libkineto may write the finished trace for ``pid``, preferred first.

    The asked path with ``_<pid>`` inserted before ``.json``, then Kineto's
    default path (used when it refuses ours), with and without a second pid.
    """
    asked = log.with_name(f"{log.stem}_{pid}{log.suffix}")
    default = Path(f"/tmp/libkineto_activities_{pid}.json")
    return [asked, default, default.with_name(f"libkineto_activities_{pid}_{pid}.json")]


def config_text(req: TraceRequest, log: Path, request_id: str) -> str:
    """The Kineto on-demand config for ``req`` (the same keys as ``dyno gputrace``)."""
    lines = [f"ACTIVITIES_LOG_FILE={log}"]
    if req.iterations is not None:
        lines += [
            "PROFILE_START_ITERATION=0",
            "PROFILE_START_ITERATION_ROUNDUP=1",
            f"ACTIVITIES_ITERATIONS={req.iterations}",
        ]
    else:
        lines += ["PROFILE_START_TIME=0", f"ACTIVITIES_DURATION_MSECS={req.duration_ms}"]
    lines.append(f"ACTIVITIES_WARMUP_PERIOD_SECS={round(req.warmup_s)}")

    def flag(v: bool) -> str:
        return "true" if v else "false"

    lines += [
        f"PROFILE_REPORT_INPUT_SHAPES={flag(req.record_shapes)}",
        f"PROFILE_PROFILE_MEMORY={flag(req.profile_memory)}",
        f"PROFILE_WITH_STACK={flag(req.with_stack)}",
        f"PROFILE_WITH_FLOPS={flag(req.with_flops)}",
        f"PROFILE_WITH_MODULES={flag(req.with_modules)}",
    ]
    if req.profile_memory:
        lines += ["PROFILE_MEMORY=true", f"PROFILE_MEMORY_DURATION_MSECS={req.duration_ms or 1000}"]
    lines.append(f"REQUEST_TRACE_ID={request_id}")
    return "\n".join(lines)


_BOOL_FIELDS = ("record_shapes", "with_stack", "with_flops", "with_modules", "profile_memory")


def request_to_dict(req: TraceRequest) -> dict[str, Any]:
    """Plain data for the agent stream (pids as a list)."""
    d = {f.name: getattr(req, f.name) for f in fields(req)}
    d["pids"] = list(req.pids)
    return d


def request_from_dict(d: Mapping[str, Any]) -> TraceRequest:
    """Build and validate a TraceRequest from plain data (e.g. a remote viewer's request).

    Unknown keys (an output path, say) are refused: gpulens chooses where
    traces go. Raises ValueError naming the offending field.
    """
    known = {f.name for f in fields(TraceRequest)}
    extra = set(d) - known
    if extra:
        raise ValueError(f"unknown trace request field(s): {', '.join(sorted(map(str, extra)))}")
    kw: dict[str, Any] = {}
    pids = d.get("pids", ())
    if not isinstance(pids, (list, tuple)) or not all(isinstance(p, int) and not isinstance(p, bool) for p in pids):
        raise ValueError("pids: expected a list of integers")
    kw["pids"] = tuple(pids)
    for key in ("job_id", "duration_ms", "iterations"):
        if key in d:
            v = d[key]
            if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
                raise ValueError(f"{key}: expected an integer or null, got {v!r}")
            kw[key] = v
    for key in ("warmup_s", "timeout_s"):
        if key in d:
            v = d[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ValueError(f"{key}: expected a number, got {v!r}")
            kw[key] = float(v)
    for key in _BOOL_FIELDS:
        if key in d:
            if not isinstance(d[key], bool):
                raise ValueError(f"{key}: expected true or false, got {d[key]!r}")
            kw[key] = d[key]
    req = TraceRequest(**kw)
    req.validate()
    return req
