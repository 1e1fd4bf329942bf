"""HTA's straggler method: ranks whose dominant collective starts late.

A restatement of HolisticTraceAnalysis 0.5's ``TraceAnalysis.get_potential_stragglers``
(``hta/analyzers/straggler_analysis.py``) with its default metric
``find_stragglers_with_late_start_comm_kernels`` (``hta/analyzers/straggler.py``),
over the per-rank reductions of :mod:`.arrival`:

1. Steps: every rank's ``ProfilerStep#N`` spans; without ``include_last_step``
   (HTA's ``include_last_profiler_step``) each rank's last-starting step is
   dropped (HTA's ``_filter_irrelevant_gpu_kernels``; only when the job has
   more than one step name). The iterations used are the union over ranks.
2. ``mean_iter`` = (latest end - earliest start of any event in those
   iterations, all ranks) / number of iterations.
3. Candidate kernels: NCCL kernels on a stream > 0, launched in an iteration
   > 0, lasting at least 1 % of ``mean_iter``; per (rank, stream, iteration,
   name) the last one in the file.
4. The collective: per (stream, iteration, name) the standard deviation
   across ranks (n - 1) of duration / ``mean_iter``; averaged over
   iterations; the (stream, name) with the largest average is chosen (HTA
   breaks ties in its symbol table's order, gpulens by stream then name).
5. Metric: its normalized start, (start - earliest start) / ``mean_iter``, per
   rank and iteration. In each iteration the ranks whose metric is at least
   the k-th largest are flagged (k = ``candidates``, HTA's
   ``num_candidates``, default 2); the ranks flagged most often, k of them
   (ties: lower rank first), are the potential stragglers.

HTA names k ranks whatever the gap; :class:`ArrivalRank` adds, per rank and
iteration, how much later than the earliest rank the collective started.
"""

from __future__ import annotations

import enum
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from gpulens.analysis.trace.arrival import CommKernel, NotPlaced, RankArrival
from gpulens.core.reasons import Reason, ReasonText

MIN_NORMALIZED_DURATION = 0.01
CANDIDATES = 2


@dataclass(frozen=True, slots=True)
class ArrivalRank:
    """One rank in the late-arrival result.

    ``starts`` and ``late_ms`` follow ``LateArrival.iterations`` (None where the
    rank has no such kernel in that iteration): the normalized start (HTA's
    metric) and the start minus the earliest rank's start that iteration.
    """

    rank: int
    flagged: int
    starts: tuple[float | None, ...]
    late_ms: tuple[float | None, ...]

    @property
    def mean_late_ms(self) -> float | None:
        """Mean lateness over the iterations it took part in."""
        xs = [x for x in self.late_ms if x is not None]
        return sum(xs) / len(xs) if xs else None


class NoLateArrivalKind(enum.Enum):
    """Why the method could not run; the comment says which fields of :class:`NoLateArrival` it fills."""

    RANK_NOT_PLACED = "rank-not-placed"  # rank, placed (why that rank's events were not placed in its steps)
    NO_STEPS = "no-steps"  # no rank has ProfilerStep#N spans
    NO_TIME_SPAN = "no-time-span"  # the steps hold no event with a usable duration
    NO_LONG_KERNEL = "no-long-kernel"  # no NCCL kernel of at least 1% of the mean step in a step > 0
    NO_SPREAD = "no-spread"  # no NCCL kernel seen on two ranks in one iteration


@dataclass(frozen=True, slots=True)
class NoLateArrival(Reason):
    """Why HTA's late-arrival method could not run: ``kind`` and the facts its sentence names; ``str()`` is the
    one line the report (text, JSON) and the profiler screen give after ``n/a``."""

    kind: NoLateArrivalKind
    rank: int = -1
    placed: NotPlaced | None = None

    TEXT: ClassVar[ReasonText] = {
        NoLateArrivalKind.RANK_NOT_PLACED: "rank {0.rank}: {0.placed}",
        NoLateArrivalKind.NO_STEPS: "no ProfilerStep#N spans (HTA's method needs them)",
        NoLateArrivalKind.NO_TIME_SPAN: ("the ProfilerStep#N spans have no usable time span "
                                         "(no events with a duration, or timestamps out of range)"),
        NoLateArrivalKind.NO_LONG_KERNEL: ("no NCCL kernel (ncclKernel*, ncclDevKernel*) of at least 1% of the "
                                           "mean step launched in a ProfilerStep > 0 (HTA's method needs one)"),
        NoLateArrivalKind.NO_SPREAD: ("no NCCL kernel seen on two ranks in one iteration "
                                      "(the spread across ranks is undefined)"),
    }


@dataclass(frozen=True, slots=True)
class LateArrival:
    """The result; with ``why`` set (it could not run) the other fields are empty."""

    why: NoLateArrival | None
    candidates: int
    include_last_step: bool
    stragglers: tuple[int, ...] = ()
    kernel: str = ""
    stream: int = -1
    iterations: tuple[int, ...] = ()
    mean_iter_us: float = 0.0
    min_duration_us: float = 0.0
    ranks: tuple[ArrivalRank, ...] = ()

    @property
    def note(self) -> str:
        """Why it could not run, in words ('' when it ran): what the report and the screen show."""
        return "" if self.why is None else self.why.render()


def _kept_steps(r: RankArrival, drop_last: bool) -> set[int]:
    if not r.steps:
        return set()
    if not drop_last:
        return {s.iteration for s in r.steps}
    last = max(s.ts_us for s in r.steps)
    return {s.iteration for s in r.steps if s.ts_us < last}


def _refusal(ranks: Sequence[tuple[int, RankArrival]]) -> NoLateArrival | None:
    """Why a rank's reduction cannot be used (its events were not placed: step spans that overlap), or None."""
    return next((NoLateArrival(NoLateArrivalKind.RANK_NOT_PLACED, rank, r.refused)
                 for rank, r in ranks if r.refused is not None), None)


def _steps_used(ranks: Sequence[tuple[int, RankArrival]], include_last_step: bool) -> dict[int, set[int]]:
    """Step 1: per rank, the iterations it keeps."""
    names = {s.iteration for _, r in ranks for s in r.steps}
    drop_last = not include_last_step and len(names) > 1
    return {rank: _kept_steps(r, drop_last) for rank, r in ranks}


def _time_span(ranks: Sequence[tuple[int, RankArrival]], kept: dict[int, set[int]]) -> tuple[float, float]:
    """Step 2: the earliest start and latest end of any event in the kept iterations."""
    lo, hi = math.inf, -math.inf
    for rank, r in ranks:
        for g in r.ranges:
            if g.iteration in kept[rank]:
                lo, hi = min(lo, g.min_ts_us), max(hi, g.max_end_us)
    return lo, hi


def _candidate_kernels(ranks: Sequence[tuple[int, RankArrival]], kept: dict[int, set[int]],
                       min_dur: float) -> dict[tuple[int, int, int, str], CommKernel]:
    """Step 3: per (rank, stream, iteration, name), the last long-enough NCCL kernel."""
    last: dict[tuple[int, int, int, str], CommKernel] = {}
    for rank, r in ranks:
        for c in r.kernels:
            if c.iteration > 0 and c.iteration in kept[rank] and c.dur_us >= min_dur:
                last[(rank, c.stream, c.iteration, c.name)] = c  # the last in the file wins
    return last


def _dominant_collective(last: dict[tuple[int, int, int, str], CommKernel],
                         mean_iter: float) -> tuple[int, str] | None:
    """Step 4: the (stream, name) whose normalized duration varies most across ranks, or None."""
    durs: dict[tuple[int, int, str], list[float]] = {}
    for (_, stream, it, name), c in last.items():
        durs.setdefault((stream, it, name), []).append(c.dur_us / mean_iter)
    spread: dict[tuple[int, str], list[float]] = {}
    for (stream, _it, name), xs in durs.items():
        if len(xs) > 1:
            spread.setdefault((stream, name), []).append(statistics.stdev(xs))
    if not spread:
        return None
    return min(spread, key=lambda sn: (-statistics.fmean(spread[sn]), sn))


def _normalized_starts(last: dict[tuple[int, int, int, str], CommKernel], best: tuple[int, str], lo: float,
                       mean_iter: float) -> dict[int, dict[int, float]]:
    """Step 5's metric: iteration -> rank -> the collective's normalized start."""
    metric: dict[int, dict[int, float]] = {}
    for (rank, st, it, nm), c in last.items():
        if (st, nm) == best:
            metric.setdefault(it, {})[rank] = (c.ts_us - lo) / mean_iter
    return metric


def _flag_counts(metric: dict[int, dict[int, float]], its: list[int], k: int) -> dict[int, int]:
    """Step 5's vote: per rank, in how many iterations it was among the k latest."""
    flagged: dict[int, int] = {}
    for it in its:
        vals = sorted(metric[it].values(), reverse=True)
        threshold = vals[min(k, len(vals)) - 1]
        for rank, v in metric[it].items():
            flagged[rank] = flagged.get(rank, 0) + (1 if v >= threshold else 0)
    return flagged


def _arrival_rows(metric: dict[int, dict[int, float]], its: list[int], flagged: dict[int, int],
                  mean_iter: float) -> list[ArrivalRank]:
    """Per rank: its normalized starts and its lateness behind the earliest rank, per iteration."""
    earliest = {it: min(metric[it].values()) for it in its}
    rows = []
    for rank in sorted(flagged):
        starts = tuple(metric[it].get(rank) for it in its)
        late = tuple(None if s is None else (s - earliest[it]) * mean_iter / 1000.0
                     for s, it in zip(starts, its, strict=True))
        rows.append(ArrivalRank(rank, flagged[rank], starts, late))
    return rows


def late_arrival(
    ranks: Sequence[tuple[int, RankArrival]], *, candidates: int = CANDIDATES, include_last_step: bool = True
) -> LateArrival:
    """HTA's potential stragglers for ranks ``(rank, reduction)`` (see the module docstring)."""
    k = max(1, candidates)
    fail = LateArrival(None, k, include_last_step)
    refused = _refusal(ranks)
    if refused is not None:
        return _with(fail, refused)
    kept = _steps_used(ranks, include_last_step)
    iterations = sorted(set().union(*kept.values())) if kept else []
    if not iterations:
        return _with(fail, NoLateArrival(NoLateArrivalKind.NO_STEPS))
    lo, hi = _time_span(ranks, kept)
    mean_iter = (hi - lo) / len(iterations)
    if not (math.isfinite(mean_iter) and mean_iter > 0):
        return _with(fail, NoLateArrival(NoLateArrivalKind.NO_TIME_SPAN))
    min_dur = mean_iter * MIN_NORMALIZED_DURATION
    last = _candidate_kernels(ranks, kept, min_dur)
    if not last:
        return _with(fail, NoLateArrival(NoLateArrivalKind.NO_LONG_KERNEL))
    best = _dominant_collective(last, mean_iter)
    if best is None:
        return _with(fail, NoLateArrival(NoLateArrivalKind.NO_SPREAD))
    stream, name = best
    metric = _normalized_starts(last, best, lo, mean_iter)
    its = sorted(metric)
    flagged = _flag_counts(metric, its, k)
    order = sorted(flagged, key=lambda rk: (-flagged[rk], rk))
    rows = _arrival_rows(metric, its, flagged, mean_iter)
    return LateArrival(None, k, include_last_step, tuple(order[:k]), name, stream, tuple(its), mean_iter, min_dur,
                       tuple(rows))


def _with(base: LateArrival, why: NoLateArrival) -> LateArrival:
    return LateArrival(why, base.candidates, base.include_last_step)
