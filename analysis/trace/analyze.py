"""Analyse a trace: per process, torch-style op table, GPU breakdown, findings.

Self CPU time follows torch's ``key_averages``: on each thread, CPU events
nest by time (a child starts at or after its parent and ends at or before
it); an event's self time is its duration minus its direct children's.
GPU activity (kernels, copies, sets) belongs to the process whose runtime
call launched it (by correlation id), else to the main process; its time
counts as Self CUDA of the op that made that runtime call.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpulens.analysis.trace.compact import CompactTrace, CpuEvent, load_compact
from gpulens.analysis.trace.events import Event
from gpulens.analysis.trace.findings import findings_for
from gpulens.analysis.trace.gpu import (
    gpu_breakdown,
    kernel_rows,
    launch_stats,
    memcpy_rows,
    memory_peaks,
)
from gpulens.analysis.trace.load import DEFAULT_MAX_BYTES
from gpulens.analysis.trace.summary import OpRow, ProcessSummary, Step, TraceSummary
from gpulens.core.limits import InputLimits

Progress = Callable[[float, str], None]


@dataclass(slots=True)
class _Proc:
    pid: Any
    threads: list[list[CpuEvent]] = field(default_factory=list)
    gpu: list[Event] = field(default_factory=list)
    memory: list[Event] = field(default_factory=list)
    cpu_events: int = 0


@dataclass(slots=True)
class OpTable:
    """Result of the nesting pass over one process's CPU events."""

    rows: list[OpRow]
    self_total_us: float
    launcher: dict[int, str]  # runtime correlation id -> name of the op that made the call
    runtime: list[CpuEvent]
    steps: list[Step]
    start_us: float
    end_us: float


def analyze_file(
    path: str | Path,
    *,
    top: int = 30,
    max_bytes: int = DEFAULT_MAX_BYTES,
    limits: InputLimits | None = None,
    progress: Progress | None = None,
) -> TraceSummary:
    """Load and analyse a trace file (``.json`` / ``.json.gz``); ``limits`` bound the read.

    Raises:
        TraceFileError: missing, over a limit, truncated, not JSON, or not a trace.
    """
    trace = load_compact(path, max_bytes=max_bytes, limits=limits, progress=progress)
    return analyze(trace, top=top, progress=progress)


def analyze(trace: CompactTrace, *, top: int = 30, progress: Progress | None = None) -> TraceSummary:
    """Summarise a compact trace per process; ``top`` bounds the op and kernel tables."""
    procs: dict[Any, _Proc] = {}
    for (pid, _tid), evs in trace.cpu.items():
        p = procs.setdefault(pid, _Proc(pid))
        p.threads.append(evs)
        p.cpu_events += len(evs)
    if not procs and trace.gpu:
        procs[-1] = _Proc(-1)  # GPU-only trace: one pseudo process
    ordered = sorted(procs.values(), key=lambda p: -p.cpu_events)
    tables = {}
    for i, p in enumerate(ordered):
        if progress is not None:
            progress(i / (2 * max(len(ordered), 1)), f"nesting ops of process {p.pid}")
        tables[p.pid] = op_table(p.threads)
    _attach(ordered, tables, trace.gpu, trace.memory)
    meta = trace.meta
    rank = _rank(meta.distributed_info if meta else None)
    out = []
    for i, p in enumerate(ordered):
        if progress is not None:
            progress(0.5 + i / (2 * max(len(ordered), 1)), f"summarising process {p.pid}")
        name = trace.process_names.get(p.pid, "")
        out.append(_summarise(p, tables[p.pid], name, rank if i == 0 else None, top))
    devices = tuple(str(d.get("name", "?")) for d in (meta.device_properties if meta else []))
    return TraceSummary(
        path=meta.path if meta else "",
        size_bytes=meta.size_bytes if meta else 0,
        events=meta.events if meta else 0,
        devices=devices,
        processes=tuple(out),
    )


def _attach(ordered: list[_Proc], tables: dict[Any, OpTable], gpu: list[Event], memory: list[Event]) -> None:
    if not ordered:
        return
    main = ordered[0]
    owner: dict[int, _Proc] = {}
    if len(ordered) > 1:
        for p in ordered:
            for rt in tables[p.pid].runtime:
                if rt[3] is not None and rt[3] >= 0:
                    owner[rt[3]] = p
    for ev in gpu:
        corr = ev.args.correlation if ev.args is not None else None
        (owner.get(corr, main) if isinstance(corr, int) else main).gpu.append(ev)
    by_pid = {p.pid: p for p in ordered}
    for mem in memory:
        by_pid.get(mem.pid, main).memory.append(mem)


def _rank(info: dict[str, Any] | None) -> int | None:
    r = info.get("rank") if info else None
    return r if isinstance(r, int) and not isinstance(r, bool) else None


def op_table(threads: Iterable[list[CpuEvent]]) -> OpTable:
    """torch key_averages rows (unsorted), Self CPU time total (us) and launch attribution."""
    calls: dict[str, int] = defaultdict(int)
    total: dict[str, float] = defaultdict(float)
    children: dict[str, float] = defaultdict(float)
    launcher: dict[int, str] = {}
    runtime: list[CpuEvent] = []
    steps: list[Step] = []
    start, end_all = float("inf"), float("-inf")
    for evs in threads:
        evs.sort()  # (start, -duration, ...): parents before their children
        if evs:
            start = min(start, evs[0][0])
        stack: list[tuple[float, str]] = []
        for ev in evs:
            ts, negdur, name, corr = ev
            dur = -negdur
            end = ts + dur
            while stack:
                top_end, top_name = stack[-1]
                if ts >= top_end or end > top_end:
                    stack.pop()
                else:
                    children[top_name] += dur
                    if corr is not None and corr >= 0:
                        launcher[corr] = top_name
                    break
            stack.append((end, name))
            calls[name] += 1
            total[name] += dur
            if end > end_all:
                end_all = end
            if corr is not None:
                runtime.append(ev)
            elif name.startswith("ProfilerStep#"):
                steps.append(Step(name, ts, dur))
    rows = [OpRow(n, calls[n], total[n] - children[n], total[n]) for n in calls]
    steps.sort(key=lambda s: s.start_us)
    return OpTable(rows, sum(r.self_cpu_us for r in rows), launcher, runtime, steps, start, end_all)


def _self_cuda(gpu: list[Event], launcher: dict[int, str]) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for ev in gpu:
        corr = ev.args.correlation if ev.args is not None else None
        name = launcher.get(corr) if isinstance(corr, int) else None
        if name is not None:
            out[name] += ev.dur
    return out


def _summarise(p: _Proc, t: OpTable, name: str, rank: int | None, top: int) -> ProcessSummary:
    cuda = _self_cuda(p.gpu, t.launcher)
    rows = [OpRow(r.name, r.calls, r.self_cpu_us, r.cpu_total_us, cuda.get(r.name, 0.0)) for r in t.rows]
    rows.sort(key=lambda r: -r.self_cpu_us)
    start, end = t.start_us, t.end_us
    for ev in p.gpu:
        start = min(start, ev.ts)
        end = max(end, ev.ts + ev.dur)
    window = end - start if end >= start else 0.0
    gpu = gpu_breakdown(p.gpu) if p.gpu else None
    summary = ProcessSummary(
        pid=p.pid,
        name=name,
        rank=rank,
        threads=len(p.threads),
        window_start_us=start if window else 0.0,
        window_us=window,
        steps=tuple(t.steps),
        cpu_ops=tuple(rows[:top]),
        self_cpu_total_us=t.self_total_us,
        gpu=gpu,
        kernels=tuple(kernel_rows(p.gpu, gpu.busy_us if gpu else 0.0)[:top]),
        memcpy=tuple(memcpy_rows(p.gpu)),
        launch=launch_stats(t.runtime, p.gpu),
        memory=tuple(memory_peaks(p.memory)),
        findings=(),
    )
    return replace(summary, findings=tuple(findings_for(summary)))
