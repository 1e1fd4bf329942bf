"""What the profiler screen lists: one row per traced process (rank) of each trace, and its hints.

Pure functions over :class:`TraceJob` snapshots, tested without a UI:

- :func:`file_rows`: a trace job of N processes becomes N rows, each with the
  file it produced (or why there is none); a job still waiting behind an
  earlier trace of one of its processes reads "queued".
- :func:`member_names`: file names for exporting every rank of a trace.
- :func:`poll_hint` / :func:`common_start_ms`: the wait the targets' own poll
  intervals imply, and a start time every rank can meet.
- :func:`host_hint`: what ``o`` on a host screen should tell the user.
- :func:`job_hosts`: every host of a job with its traceable processes.
- :class:`LocalDiagnosis`: why none of a job's local processes can be traced (every 5 s at most).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.markup import escape

from gpulens.core.errors import GpulensError
from gpulens.ipc.kineto.kconfig import MIN_LEAD_S
from gpulens.ipc.kineto.protocol import TraceService
from gpulens.ipc.kineto.requests import TraceJob, TraceState
from gpulens.ipc.kineto.untraceable import Untraceable, UntraceableKind

FINISHED = frozenset({TraceState.DONE, TraceState.FAILED})
QUEUED = getattr(TraceState, "QUEUED", None)
START_MARGIN_S = MIN_LEAD_S + 0.3
"""Added to the slowest target's poll interval: the common start must come after every rank's next poll."""


@dataclass(frozen=True, slots=True)
class Target:
    """Processes on one host and the trace service that reaches them (None: none here)."""

    host: str
    service: TraceService | None
    pids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class FileRow:
    """One traced process of one trace: the table row, its file when finished."""

    key: str
    batch: int
    target: int
    host: str
    pid: int
    job: TraceJob
    state: str
    detail: str
    path: str | None

    @property
    def finished(self) -> bool:
        """The trace is over (done or failed)."""
        return self.job.state in FINISHED


def queued_behind(job: TraceJob, earlier: Iterable[TraceJob]) -> TraceJob | None:
    """An unfinished earlier trace sharing a process with ``job`` (which then waits for it), else None."""
    if job.state in FINISHED or (job.state is not TraceState.WAITING_FOR_POLL and job.state is not QUEUED):
        return None
    mine = set(job.pids)
    for other in earlier:
        if other.request_id != job.request_id and other.state not in FINISHED and mine & set(other.pids):
            return other
    return None


def file_rows(job: TraceJob, *, target: int, host: str, batch: int, earlier: Sequence[TraceJob],
              now_s: float) -> list[FileRow]:
    """The rows of ``job``: one per process, queued when an earlier unfinished trace holds one of them."""
    state, detail = job.state.value, job.detail
    behind = queued_behind(job, earlier)
    if behind is not None:
        state = "queued"
        if job.state is not QUEUED or not detail:
            detail = f"behind trace {behind.request_id} (one at a time per process)"
    elif job.state is TraceState.WAITING_FOR_POLL:
        detail = f"{detail} · {now_s - job.started_s:.0f} s"
    rows = []
    for pid in job.pids:
        path = job.files.get(pid)
        row_state, row_detail = state, detail
        if job.state is TraceState.DONE and path is None:
            row_state = "failed"
            row_detail = _reason_for(pid, detail) or "no file came back for this process"
        rows.append(FileRow(f"{target}:{job.request_id}:{pid}", batch, target, host, pid, job,
                            row_state, row_detail, None if path is None else str(path)))
    return rows


def _reason_for(pid: int, detail: str) -> str:
    """The ``pid N: why`` part of a job's detail that names ``pid``."""
    for part in detail.split("; "):
        if part.startswith(f"pid {pid}:"):
            return part
    return ""


def member_names(rows: Sequence[FileRow]) -> dict[str, str]:
    """File name -> source for exporting several ranks: ``HOST-pidPID.json[.gz]``, unique."""
    out: dict[str, str] = {}
    for row in rows:
        if row.path is None:
            continue
        suffix = ".json.gz" if row.path.endswith(".gz") else ".json"
        host = "".join(c if c.isalnum() or c in "-_." else "_" for c in row.host).strip(".") or "host"
        name = f"{host}-pid{row.pid}{suffix}"
        n = 2
        while name in out:
            name = f"{host}-pid{row.pid}-{n}{suffix}"
            n += 1
        out[name] = row.path
    return out


def rank_names(ranks: Sequence[int | None], fallback: Sequence[str]) -> list[str]:
    """``rank N`` from each trace's distributedInfo; ``fallback`` (with the rank) where none or shared."""
    seen = [r for r in ranks if r is not None]
    out = []
    for rank, other in zip(ranks, fallback, strict=True):
        if rank is not None and seen.count(rank) == 1:
            out.append(f"rank {rank}")
        elif rank is not None:
            out.append(f"rank {rank} {other}")
        else:
            out.append(other)
    return out


def rank_labels(ranks: Sequence[int | None], rows: Sequence[FileRow]) -> list[str]:
    """Lane labels of several ranks' traces: ``rank N``, else the host and pid."""
    return rank_names(ranks, [f"{row.host} pid {row.pid}" for row in rows])


def poll_interval(service: TraceService | None, pid: int) -> float | None:
    """The poll interval ``pid`` showed (its last two polls), when its service knows it."""
    if service is None:
        return None
    ask = getattr(service, "poll_interval_s", None)
    if callable(ask):
        value = ask(pid)
        return float(value) if isinstance(value, (int, float)) and value > 0 else None
    try:
        procs = service.processes()
    except (GpulensError, OSError):  # a broken service gives no hint rather than no screen
        return None
    for p in procs:
        if p.pid == pid and p.interval_s:
            return float(p.interval_s)
    return None


def reports_intervals(service: TraceService | None) -> bool:
    """Whether ``service`` can tell poll intervals (this host's registry can; another host's agent may not)."""
    if service is None:
        return False
    if callable(getattr(service, "poll_interval_s", None)):
        return True
    try:
        return bool(service.processes())
    except (GpulensError, OSError):  # a broken service reports nothing
        return False


def poll_hint(intervals: Mapping[int, float | None], *, reported: bool = True) -> str:
    """When a trace can start: at each target's next poll, at the interval it shows.

    ``reported``: False where the service cannot tell intervals at all (another host's agent).
    """
    known = {pid: v for pid, v in intervals.items() if v is not None}
    if not intervals:
        return ""
    if not known and not reported:
        return ("a trace starts at the target's next poll (its interval is not reported here: Kineto polls "
                "every ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS, 5 s unless the program sets it)")
    if not known:
        return ("a trace starts at the target's next poll (its poll interval is not known yet: "
                "it shows after two polls)")
    slowest = max(known.values())
    which = "" if len(known) == len(intervals) else f"; {len(intervals) - len(known)} not measured yet"
    if len(set(round(v, 1) for v in known.values())) == 1:
        return f"a trace starts at the target's next poll: within {slowest:.1f} s (it polls every {slowest:.1f} s{which})"
    return f"a trace starts at each target's next poll: within {slowest:.1f} s (the slowest polls every {slowest:.1f} s{which})"


def status_lines(targets: Sequence[Target], most: int) -> list[str]:
    """Markup lines: each process ready or why not (at most ``most``, then a count), then the poll hint."""
    lines: list[str] = []
    intervals: dict[int, float | None] = {}
    ready = total = 0
    for target in targets:
        svc = target.service
        diagnose = svc.diagnose if svc is not None else None
        for pid in target.pids:
            total += 1
            who = f"{target.host} pid {pid}" if len(targets) > 1 else f"pid {pid}"
            why = Untraceable(UntraceableKind.NO_SERVICE, pid) if diagnose is None else diagnose(pid)
            if why is None:
                ready += 1
                intervals[pid] = poll_interval(svc, pid)
            if len(lines) < most:  # escaped: a reason like "[Errno 2] ..." is text, not markup
                where = escape(str(getattr(svc, "address", "the endpoint")))
                lines.append(f"[green]{escape(who)}: ready[/] (polls {where})"
                             if why is None else f"[red]{escape(who)}: cannot be traced[/]: {escape(str(why))}")
    if total > len(lines):
        lines.append(f"… {total - len(lines)} more; {ready} of {total} processes ready")
    hint = poll_hint(intervals, reported=any(reports_intervals(t.service) for t in targets))
    if hint:
        lines.append(f"[dim]{hint}[/]")
    return lines


def common_start_ms(intervals: Iterable[float | None], default_interval_s: float, now_s: float | None = None,
                    warmup_s: float = 0.0) -> int:
    """A wall-clock start (ms since the epoch) after every target's next poll (and its warm-up): the ranks'
    windows line up."""
    known = [v for v in intervals if v is not None]
    lead = (max(known) if known else default_interval_s) + START_MARGIN_S + max(0.0, warmup_s)
    return int(((time.time() if now_s is None else now_s) + lead) * 1000)


def host_hint(polling_jobs: int) -> str:
    """What ``o`` on a host screen says: open a job first, or that no job here polls Kineto."""
    if polling_jobs:
        return (f"open a job first (enter on it in the jobs table): {polling_jobs} job(s) on this host poll "
                "Kineto, and the job screen's o traces every process of the job")
    return ("no job on this host polls Kineto: start the program with KINETO_USE_DAEMON=1 "
            "(and the agent's KINETO_IPC_SOCKET_DIR), then open its job and press o")


def job_hosts(processes: Iterable[tuple[str, Any]], is_local: Callable[[str], bool], local_polling: Iterable[int],
              agents: bool) -> list[tuple[str, tuple[int, ...], bool]]:
    """Every host of a job with its traceable pids: ``(host, pids, through_agent)``, this host first.

    ``processes``: the job's ``(host, process)`` pairs (a process has ``pid`` and
    ``kineto_polling``); ``local_polling``: pids the local trace service sees
    polling; ``agents``: the source can send requests to other hosts' agents.
    """
    local = set(local_polling)
    mine: dict[str, set[int]] = {}
    remote: dict[str, set[int]] = {}
    for host, proc in processes:
        if is_local(host):
            if proc.pid in local:
                mine.setdefault(host, set()).add(proc.pid)
        elif agents and getattr(proc, "kineto_polling", False):
            remote.setdefault(host, set()).add(proc.pid)
    out = [(h, tuple(sorted(p)), False) for h, p in sorted(mine.items())]
    return out + [(h, tuple(sorted(p)), True) for h, p in sorted(remote.items())]


def short_paths(detail: str, paths: Iterable[object]) -> str:
    """``detail`` for a table cell: each trace file by its name, not its whole path (the line under the
    table gives the path); a 120-column table kept cutting the reason after a long download directory."""
    for path in map(str, paths):
        if "/" in path:
            detail = detail.replace(path, path.rsplit("/", 1)[1])
    return detail


def shown_path(path: str) -> str:
    """``path`` as the line under the profiler table gives it: relative to the working directory when inside
    it (where the user started gpulens), else whole."""
    here = os.getcwd().rstrip("/") + "/"
    return path[len(here):] if path.startswith(here) else path


class LocalDiagnosis:
    """The trace service's diagnosis of some of this machine's processes, asked every 5 s at most."""

    def __init__(self, every_s: float = 5.0) -> None:
        self.every_s = every_s
        self._last: tuple[float, str | None] | None = None

    def why(self, service: TraceService | None, trace_error: str | None, pids: Sequence[int]) -> str | None:
        """Why the first of ``pids`` (8 at most) that cannot be traced cannot, with the fix; None: all can."""
        now = time.monotonic()
        if self._last is not None and now - self._last[0] < self.every_s:
            return self._last[1]
        why: str | None
        if service is None:
            why = trace_error or "no trace service (it serves processes of this machine only)"
        else:
            reasons: list[tuple[int, Untraceable]] = []
            for pid in pids[:8]:
                try:
                    reason = service.diagnose(pid)
                except (GpulensError, OSError) as err:  # a diagnosis must not take the screen down
                    reason = Untraceable(UntraceableKind.CHECK_FAILED, pid, detail=str(err))
                if reason is not None:
                    reasons.append((pid, reason))
            # A job's shell or launcher never loads torch: say why its Python cannot be traced.
            best = sorted(reasons, key=lambda r: r[1].ranks_low)
            why = f"pid {best[0][0]}: {best[0][1]}" if best else None
        self._last = (now, why)
        return why
