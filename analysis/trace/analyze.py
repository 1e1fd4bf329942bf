"""Analyse a trace: per process, torch-style op table, GPU breakdown, findings.

The op table reproduces torch's ``key_averages()`` from the exported trace
(rules and the torch source each follows: docs/analyze.md): on each thread,
every event torch makes a CPU FunctionEvent of (ops, annotations, Python
functions, runtime calls) nests by time; an only child named like its
parent merges into it; self time is duration minus direct children; rows
are keyed by name (ProfilerStep#N as ProfilerStep*) and annotation-ness.
GPU activity (kernels, copies, sets) belongs to the process whose runtime
call launched it (by correlation id), else to the main process; its time
counts as Self CUDA of the op that made that runtime call.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpulens.analysis.trace.compact import (
    ANNOTATION,
    SHAPES_SEP,
    CompactTrace,
    CpuEvent,
    load_compact,
)
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
from gpulens.analysis.trace.steps import OPTIMIZER_PREFIX, find_steps
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
    launcher: dict[int, tuple[str, bool, str]]  # runtime correlation id -> row key of the op that made the call
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
    group_by_input_shape: bool = False,
) -> TraceSummary:
    """Load and analyse a trace file (``.json`` / ``.json.gz``); ``limits`` bound the read.

    ``group_by_input_shape``: one op row per (name, input shapes), as torch's
    ``key_averages(group_by_input_shape=True)`` (shapes need ``record_shapes=True``).

    Raises:
        TraceFileError: missing, over a limit, truncated, not JSON, or not a trace.
    """
    trace = load_compact(path, max_bytes=max_bytes, limits=limits, progress=progress,
                         group_by_input_shape=group_by_input_shape)
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
    mem_ts: dict[Any, list[float]] = defaultdict(list)
    for mem in trace.memory:
        mem_ts[mem.pid if mem.pid in procs or not ordered else ordered[0].pid].append(mem.ts)
    tables = {}
    for i, p in enumerate(ordered):
        if progress is not None:
            progress(i / (2 * max(len(ordered), 1)), f"nesting ops of process {p.pid}")
        tables[p.pid] = op_table(p.threads, mem_ts.get(p.pid, ()), shapes=trace.group_by_input_shape)
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


# Names torch drops before building its tree (torch/autograd/profiler_util.py
# _filter_name): their time stays in their parent's self time.
FILTERED_NAMES = frozenset({
    "[memory]", "[OutOfMemory]", "profiler::_record_function_enter", "profiler::_record_function_enter_new",
    "profiler::_record_function_exit", "aten::is_leaf", "aten::output_nr", "aten::_version",
})
MEMORY_ROW = "[memory]"
STEP_ROW = "ProfilerStep*"

OpKey = tuple[str, bool, str]  # (name as torch's table shows it, is_user_annotation, input shapes or "")


def row_name(name: str) -> str:
    """The key_averages name of an event: ProfilerStep#N folds into ProfilerStep* (torch's _rewrite_name)."""
    return STEP_ROW if name.startswith("ProfilerStep#") else name


def _ns(us: float) -> int:
    # Kineto writes ts/dur as microseconds with three decimals, i.e. exact nanoseconds.
    return round(us * 1000.0)


def _inside(ts: float, dur: float, pts: float, pdur: float, slack_ns: int) -> bool:
    """torch's child test in integer nanoseconds: starts before the parent's end, ends by it.

    ``slack_ns`` lets a child end that much after its parent: 1 us in traces written in whole
    microseconds, where ts and dur are rounded apart and a child's end can overshoot by 1 us.
    """
    s, ps = _ns(ts), _ns(pts)
    pe = ps + _ns(pdur)
    return s < pe and s + _ns(dur) <= pe + slack_ns


def op_table(threads: Iterable[list[CpuEvent]], memory_ts: Iterable[float] = (), *, shapes: bool = False) -> OpTable:
    """torch key_averages rows (unsorted), Self CPU time total (us) and launch attribution.

    Follows EventList._build_tree: per thread, an event is a child of the innermost open event
    whose span contains it (_populate_cpu_children); a child with the same name as a parent
    whose only child it is disappears into it (_remove_dup_nodes); self = duration minus the
    (remaining) direct children. ``memory_ts`` are the ``[memory]`` instants of the process:
    those outside every CPU event become ``[memory]`` rows, as torch's top-level memory events.
    ``shapes``: names carry input shapes (``load_compact(group_by_input_shape=True)``).
    """
    nest = _Nesting(shapes)
    for evs in threads:
        if evs:
            nest.thread(evs)
    roots = nest.roots
    end_all = max((e for _s, e in roots), default=float("-inf"))
    outside = _outside(sorted(_ns(t) for t in memory_ts), roots)
    rows = [OpRow(r[0], r[1], r[3], r[2], user_annotation=r[4][1], input_shapes=r[4][2])
            for r in nest.by_key.values() if r[1] > 0]
    if outside:
        rows.append(OpRow(MEMORY_ROW, outside, 0.0, 0.0, input_shapes="[]" if shapes else ""))
    steps = nest.steps
    if not steps:  # on-demand traces carry no ProfilerStep: the steps the rank report and the TUI find
        steps = _optimizer_steps(threads, [*nest.op_rows, *nest.ann_rows])
    steps.sort(key=lambda st: st.start_us)
    return OpTable(rows, sum(r.self_cpu_us for r in rows), nest.launcher, runtime=nest.runtime, steps=steps,
                   start_us=nest.start, end_us=end_all)


_UNSEEN: list[Any] = []
"""A sentinel for dict.get: no row is this list."""


class _Nesting:
    """The accumulators of :func:`op_table`, filled one thread at a time."""

    __slots__ = ("ann_rows", "by_key", "launcher", "op_rows", "roots", "runtime", "shapes", "start", "steps")

    def __init__(self, shapes: bool) -> None:
        self.shapes = shapes
        # one accumulator per row: [name, calls, total_us, self_us, key]
        self.op_rows: dict[str, list[Any] | None] = {}
        self.ann_rows: dict[str, list[Any] | None] = {}
        self.by_key: dict[OpKey, list[Any]] = {}
        self.launcher: dict[int, OpKey] = {}
        self.runtime: list[CpuEvent] = []
        self.steps: list[Step] = []
        self.roots: list[tuple[float, float]] = []
        self.start = float("inf")

    def thread(self, evs: list[CpuEvent]) -> None:
        """Nest one thread's events (not empty) and count each into its row as it closes."""
        _sort_parents_first(evs)
        self.start = min(self.start, evs[0][0])
        tol, slack = _tolerance(evs)
        op_rows, ann_rows, by_key, shapes = self.op_rows, self.ann_rows, self.by_key, self.shapes
        launcher, runtime, steps, roots = self.launcher, self.runtime, self.steps, self.roots
        annotation, step_row, unseen = ANNOTATION, STEP_ROW, _UNSEEN
        # a frame: [end + tol, end - tol, ts, dur, row, n_children, children_us (final once closed),
        #           the frame of its first child when that child has its name, else None]
        stack: list[list[Any]] = []
        push, pop = stack.append, stack.pop
        for ev in evs:
            ts, negdur, name, corr = ev
            table = ann_rows if corr == annotation else op_rows
            row = table.get(name, unseen)
            if row is unseen:
                row = table[name] = _new_row(name, corr == annotation, by_key, shapes)
            if corr is not None and corr >= -1:
                runtime.append(ev)
            if row is None:
                continue  # a name torch filters out
            if row[0] is step_row:  # ProfilerStep#N: an annotation, or an "Operator" in old Kineto traces
                steps.append(Step(name, ts, -negdur))
            dur = -negdur
            end = ts + dur
            twin = None
            while stack:
                top = stack[-1]
                hi = top[0]
                if ts < hi and end <= hi and (end <= top[1] or _inside(ts, dur, top[2], top[3], slack)):
                    top[6] += dur
                    n = top[5] = top[5] + 1
                    if n == 1 and top[4][0] == row[0]:
                        twin = top
                    if corr is not None and corr >= 0:
                        launcher[corr] = top[4][4]
                    break
                _count(pop(), stack, roots)  # the top has ended
            frame = [end + tol, end - tol, ts, dur, row, 0, 0.0, None]
            if twin is not None:
                twin[7] = frame
            push(frame)
        _drain(stack, roots)


def _sort_parents_first(evs: list[CpuEvent]) -> None:
    """Sort by (start, -duration, ...): parents before their children."""
    try:
        evs.sort()
    except TypeError:  # a full tie between an op and an annotation of one name
        evs.sort(key=lambda e: (e[0], e[1], e[2], -9 if e[3] is None else e[3]))


def _tolerance(evs: list[CpuEvent]) -> tuple[float, int]:
    """(tol, slack) for one thread's span tests.

    Float ends are exact to about 2 ulp; spans whose ends are closer than tol are decided in
    integer nanoseconds (_inside), so "child ends exactly at its parent's end" is exact.
    """
    if all(ev[0].is_integer() and ev[1].is_integer() for ev in evs[:64]):
        return 1.0, 1000  # whole microseconds: see _inside
    return max(abs(evs[0][0]), abs(evs[-1][0]), 1.0) * 2.0**-48, 0


def _optimizer_steps(threads: Iterable[list[Any]], names: Iterable[str]) -> list[Step]:
    """Steps between ``Optimizer.step#…`` spans (:func:`~gpulens.analysis.trace.steps.find_steps`), when any ran."""
    wanted = {n for n in names if n.startswith(OPTIMIZER_PREFIX)}
    if not wanted:
        return []
    spans = [(ev[2], ev[0], -ev[1]) for evs in threads for ev in evs if ev[2] in wanted]
    found = find_steps((), spans, ())
    return list(found.steps) if found.source == "optimizer step" else []


def _new_row(name: str, annotation: bool, by_key: dict[OpKey, list[Any]], shapes: bool) -> list[Any] | None:
    """The accumulator of the row ``name`` counts into (None: torch drops the name)."""
    dims = "[]" if shapes else ""
    if shapes and SHAPES_SEP in name:
        name, dims = name.split(SHAPES_SEP, 1)
    if name in FILTERED_NAMES:
        return None
    key = (row_name(name), annotation, dims)
    row = by_key.get(key)
    if row is None:
        row = by_key[key] = [key[0], 0, 0.0, 0.0, key]
    return row


def _count(frame: list[Any], stack: list[list[Any]], roots: list[tuple[float, float]]) -> None:
    """Count a closed event into its row, as torch does after its duplicate merge."""
    kids = frame[6]
    if frame[5] == 1 and frame[7] is not None:
        # its only child has its name: torch deletes the child (_remove_dup_nodes) and adopts
        # the child's children, so the child's own counts come back out
        child = frame[7]
        crow, cdur, ckids = child[4], child[3], child[6]
        crow[1] -= 1
        crow[2] -= cdur
        crow[3] -= cdur - ckids
        kids = frame[6] = ckids
    row, dur = frame[4], frame[3]
    row[1] += 1
    row[2] += dur
    row[3] += dur - kids
    if not stack:
        roots.append((frame[2], frame[2] + dur))


def _drain(stack: list[list[Any]], roots: list[tuple[float, float]]) -> None:
    """Count the events still open at the end of a thread."""
    while stack:
        _count(stack.pop(), stack, roots)


def _outside(mem_ns: list[int], roots: list[tuple[float, float]]) -> int:
    """How many instants lie outside every [start, end] of the given spans (torch's MemRecordsAcc)."""
    if not mem_ns:
        return 0
    merged: list[list[int]] = []
    for s, e in sorted((_ns(a), _ns(b)) for a, b in roots):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    starts = [m[0] for m in merged]
    out = 0
    for t in mem_ns:
        i = bisect_right(starts, t) - 1
        if i < 0 or t > merged[i][1]:
            out += 1
    return out


def _self_cuda(gpu: list[Event], launcher: dict[int, OpKey]) -> dict[OpKey, float]:
    out: dict[OpKey, float] = defaultdict(float)
    for ev in gpu:
        corr = ev.args.correlation if ev.args is not None else None
        key = launcher.get(corr) if isinstance(corr, int) else None
        if key is not None:
            out[key] += ev.dur
    return out


def _summarise(p: _Proc, t: OpTable, name: str, rank: int | None, top: int) -> ProcessSummary:
    cuda = _self_cuda(p.gpu, t.launcher)
    rows = [replace(r, self_cuda_us=cuda.get((r.name, r.user_annotation, r.input_shapes), 0.0)) for r in t.rows]
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
