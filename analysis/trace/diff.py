"""Compare two traces (HTA's ``TraceDiff``, in the terminal): ops, kernels, steps.

A is the baseline, B the trace compared with it; every delta is B - A.
Ops are the op table of :func:`~.analyze.analyze_file` (torch's
``key_averages``), summed over a trace's processes by name; kernels are
GPU kernels by name (calls, total time). When both traces have steps the
numbers are divided by each trace's step count ("per step"), so traces of
different lengths compare; otherwise they are whole-trace totals. An op or
kernel in only one trace is "new" (only in B) or "vanished" (only in A).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from gpulens.analysis.trace.analyze import analyze_file
from gpulens.analysis.trace.load import trace_limits
from gpulens.analysis.trace.rank_report import RankReport
from gpulens.analysis.trace.ranks import load_rank
from gpulens.analysis.trace.summary import TraceSummary
from gpulens.core.limits import InputLimits

ALL_ROWS = 10**9


@dataclass(frozen=True, slots=True)
class Delta:
    """One op or kernel name in both traces; ``time`` is Self CPU for ops, total for kernels."""

    name: str
    calls_a: float
    calls_b: float
    time_a_us: float
    time_b_us: float
    total_a_us: float  # CPU total for ops, = time for kernels
    total_b_us: float

    @property
    def status(self) -> str:
        """'new', 'vanished' or 'both'."""
        if self.calls_a == 0:
            return "new"
        if self.calls_b == 0:
            return "vanished"
        return "both"

    @property
    def time_delta_us(self) -> float:
        """B - A."""
        return self.time_b_us - self.time_a_us

    @property
    def calls_delta(self) -> float:
        """B - A."""
        return self.calls_b - self.calls_a

    @property
    def time_delta_pct(self) -> float | None:
        """Change relative to A (None for a new name)."""
        return 100.0 * self.time_delta_us / self.time_a_us if self.time_a_us > 0 else None


@dataclass(frozen=True, slots=True)
class TraceDiff:
    """The comparison of two traces; ``scale`` is "per step" or "whole trace"."""

    a: RankReport
    b: RankReport
    scale: str
    self_cpu_total_a_us: float
    self_cpu_total_b_us: float
    ops: tuple[Delta, ...]  # largest |time delta| first
    kernels: tuple[Delta, ...]

    @property
    def mean_step_delta_ms(self) -> float | None:
        """B's mean step time minus A's (None unless both have steps)."""
        a, b = self.a.mean_step_ms, self.b.mean_step_ms
        return b - a if a is not None and b is not None else None

    def new(self, kind: str) -> tuple[str, ...]:
        """Names only in B (``kind``: "ops" or "kernels")."""
        return tuple(d.name for d in getattr(self, kind) if d.status == "new")

    def vanished(self, kind: str) -> tuple[str, ...]:
        """Names only in A."""
        return tuple(d.name for d in getattr(self, kind) if d.status == "vanished")


def _ops(summary: TraceSummary, k: float) -> dict[str, tuple[float, float, float]]:
    out: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for p in summary.processes:
        for op in p.cpu_ops:
            row = out[op.name]
            row[0] += op.calls * k
            row[1] += op.self_cpu_us * k
            row[2] += op.cpu_total_us * k
    return {n: (c, s, t) for n, (c, s, t) in out.items()}


def _kernels(summary: TraceSummary, k: float) -> dict[str, tuple[float, float, float]]:
    out: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for p in summary.processes:
        for kr in p.kernels:
            row = out[kr.name]
            row[0] += kr.calls * k
            row[1] += kr.total_us * k
    return {n: (c, t, t) for n, (c, t) in out.items()}


def _deltas(a: dict[str, tuple[float, float, float]], b: dict[str, tuple[float, float, float]]) -> tuple[Delta, ...]:
    zero = (0.0, 0.0, 0.0)
    rows = [Delta(n, *_pair(a.get(n, zero), b.get(n, zero))) for n in a.keys() | b.keys()]
    rows.sort(key=lambda d: (-abs(d.time_delta_us), d.name))
    return tuple(rows)


def _pair(x: tuple[float, float, float], y: tuple[float, float, float]) -> tuple[float, ...]:
    return (x[0], y[0], x[1], y[1], x[2], y[2])


def diff_files(path_a: str, path_b: str, *, limits: InputLimits | None = None) -> TraceDiff:
    """Analyse both traces and compare them.

    Raises:
        TraceFileError: either file unreadable or not a trace.
    """
    limits = limits or trace_limits()
    ra, _ = load_rank(path_a, limits)
    rb, _ = load_rank(path_b, limits)
    sa = analyze_file(path_a, top=ALL_ROWS, limits=limits)
    sb = analyze_file(path_b, top=ALL_ROWS, limits=limits)
    na, nb = ra.steps.count, rb.steps.count  # iterations, not the N - 1 intervals between optimizer steps
    per_step = na > 0 and nb > 0
    ka, kb = (1.0 / na, 1.0 / nb) if per_step else (1.0, 1.0)
    return TraceDiff(
        a=ra,
        b=rb,
        scale="per step" if per_step else "whole trace",
        self_cpu_total_a_us=sum(p.self_cpu_total_us for p in sa.processes) * ka,
        self_cpu_total_b_us=sum(p.self_cpu_total_us for p in sb.processes) * kb,
        ops=_deltas(_ops(sa, ka), _ops(sb, kb)),
        kernels=_deltas(_kernels(sa, ka), _kernels(sb, kb)),
    )
