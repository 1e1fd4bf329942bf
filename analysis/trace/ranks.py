"""Analyse every rank of a job together: step times, spread, stragglers, overlap.

Each rank's file is read and reduced to a :class:`RankReport` on its own
(a worker process per file with ``jobs > 1``), so at most ``jobs`` traces
are in memory at once and the parent only ever holds the small reports.

Stragglers: the median rank is the yardstick. A rank whose mean step time
is more than ``threshold_pct`` above the median is a straggler "by its step
time"; when step times are equal (synchronous data parallel: everyone waits
for the slowest), a rank whose compute per step is more than
``threshold_pct`` above the median while the others spend more time in
exposed communication is a straggler "by compute: the others wait for it in
collectives". Its extra time is split into compute, communication, idle and
other (copies) against the median rank's per-step split.

A second, independent answer is HTA's own method (:mod:`.late_arrival`):
the ranks whose dominant NCCL collective starts latest, step by step.
"""

from __future__ import annotations

import multiprocessing
import signal
import statistics
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace

from gpulens.analysis.trace.errors import TraceFileError
from gpulens.analysis.trace.late_arrival import CANDIDATES, LateArrival, late_arrival
from gpulens.analysis.trace.load import DEFAULT_MAX_BYTES, stream_events, trace_limits
from gpulens.analysis.trace.rank_files import (
    assign_ranks,
    rank_from_info,
    rank_from_name,
    trace_files,
)
from gpulens.analysis.trace.rank_reduce import RankFold
from gpulens.analysis.trace.rank_report import RankReport, TimeSplit, build_report
from gpulens.analysis.trace.sniff import what_it_is
from gpulens.core.limits import InputLimits
from gpulens.core.sanitize import clean_text

Progress = Callable[[float, str], None]
THRESHOLD_PCT = 5.0
PARTS = ("compute", "communication", "idle", "other")


@dataclass(frozen=True, slots=True)
class Spread:
    """Mean step time across ranks (ms): fastest, slowest, median and their gap."""

    ranks_with_steps: int
    min_ms: float
    min_rank: int
    max_ms: float
    max_rank: int
    median_ms: float

    @property
    def spread_ms(self) -> float:
        """Slowest minus fastest rank's mean step time."""
        return self.max_ms - self.min_ms

    @property
    def spread_pct(self) -> float:
        """The spread as a share of the median step time."""
        return 100.0 * self.spread_ms / self.median_ms if self.median_ms > 0 else 0.0


@dataclass(frozen=True, slots=True)
class Straggler:
    """A rank that holds the others back, by how much, and where its extra time goes.

    ``by`` is "step time" or "compute"; ``excess_ms`` is its mean step time
    (or compute per step) minus the median rank's; the ``*_delta_ms``
    fields split its per-step time against the median rank's; ``cause`` is
    the part with the largest increase.
    """

    rank: int
    by: str
    value_ms: float
    median_ms: float
    excess_ms: float
    excess_pct: float
    compute_delta_ms: float
    comm_delta_ms: float
    idle_delta_ms: float
    other_delta_ms: float
    cause: str


@dataclass(frozen=True, slots=True)
class RanksReport:
    """The multi-rank analysis: one report per rank (sorted by rank), spread, stragglers."""

    ranks: tuple[RankReport, ...]
    spread: Spread | None
    stragglers: tuple[Straggler, ...]
    threshold_pct: float
    late: LateArrival | None = None  # HTA's late-arrival stragglers


def load_rank(path: str, limits: InputLimits) -> tuple[RankReport, int | None]:
    """One file reduced to its report (rank still unassigned: -1) and its distributedInfo rank.

    Raises:
        TraceFileError: unreadable, over a limit, or not a trace.
    """
    fold = RankFold()
    meta = stream_events(path, fold.add_batch, limits=limits)
    if not (fold.gpu or fold.cpu_starts or fold.comm_ops or fold.profiler or fold.optimizer or fold.annotations):
        raise TraceFileError(f"{clean_text(path)}: {what_it_is(fold, meta.events, path)}")
    return build_report(fold, meta, -1, ""), rank_from_info(meta.distributed_info)


def _worker_init() -> None:
    """Ctrl-C and SIGTERM are the parent's to handle: it stops the pool and reports once."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _load_star(args: tuple[str, InputLimits]) -> tuple[RankReport, int | None]:
    return load_rank(*args)


def analyze_ranks(
    paths: Sequence[str],
    *,
    limits: InputLimits | None = None,
    jobs: int = 1,
    threshold_pct: float = THRESHOLD_PCT,
    progress: Progress | None = None,
    candidates: int = CANDIDATES,
) -> RanksReport:
    """Read every file (directories expand to their trace files) and compare the ranks.

    ``jobs`` worker processes (forked; only when the caller runs a single thread, else
    the files are read here in turn) read files in parallel.

    Raises:
        TraceFileError: a missing path, an unreadable file, or two files of one rank.
    """
    files = trace_files(paths)
    limits = limits or trace_limits(DEFAULT_MAX_BYTES)
    work = [(f, limits) for f in files]
    loaded: list[tuple[RankReport, int | None]] = []
    if jobs > 1 and len(files) > 1 and threading.active_count() == 1:
        # Forked workers: cheap, and safe only from a single-threaded caller (the command
        # line). A threaded caller (the TUI's worker) reads the files in turn instead.
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=min(jobs, len(files)), mp_context=ctx, initializer=_worker_init) as pool:
            try:
                for i, result in enumerate(pool.map(_load_star, work)):
                    loaded.append(result)
                    if progress is not None:
                        progress((i + 1) / len(files), f"read {result[0].path}")
            except BaseException:
                pool.shutdown(wait=False, cancel_futures=True)
                raise
    else:
        for i, item in enumerate(work):
            loaded.append(load_rank(*item))
            if progress is not None:
                progress((i + 1) / len(files), f"read {item[0]}")
    ranks = assign_ranks([(r.path, info, rank_from_name(r.path)) for r, info in loaded])
    reports = sorted((replace(r, rank=rank, rank_source=src) for (r, _), (rank, src) in zip(loaded, ranks, strict=True)),
                     key=lambda r: r.rank)
    spread = spread_of(reports)
    late = late_arrival([(r.rank, r.arrival) for r in reports if r.arrival is not None], candidates=candidates)
    return RanksReport(tuple(reports), spread, tuple(find_stragglers(reports, threshold_pct)), threshold_pct, late)


def spread_of(reports: Sequence[RankReport]) -> Spread | None:
    """Fastest/slowest/median mean step time over the ranks that have steps."""
    means = [(r.mean_step_ms, r.rank) for r in reports if r.mean_step_ms is not None]
    if not means:
        return None
    lo = min(means)
    hi = max(means, key=lambda m: (m[0], -m[1]))
    med = statistics.median(m for m, _ in means)
    return Spread(len(means), lo[0], lo[1], hi[0], hi[1], med)


def _median_split(reports: Sequence[RankReport]) -> TimeSplit:
    splits = [r.per_step for r in reports if r.per_step is not None]
    return TimeSplit(*(statistics.median(getattr(s, f) for s in splits) for f in TimeSplit.__slots__))


def _straggler(r: RankReport, by: str, value: float, median: float, med: TimeSplit) -> Straggler:
    ps = r.per_step
    assert ps is not None
    deltas = (
        (ps.compute_us - med.compute_us) / 1000.0,
        (ps.exposed_comm_us - med.exposed_comm_us) / 1000.0,
        (ps.idle_us - med.idle_us) / 1000.0,
        (ps.other_us - med.other_us) / 1000.0,
    )
    cause = PARTS[max(range(4), key=lambda i: deltas[i])] if max(deltas) > 0 else "none"
    excess = value - median
    return Straggler(r.rank, by, value, median, excess, 100.0 * excess / median if median > 0 else 0.0,
                     *deltas, cause)


def find_stragglers(reports: Sequence[RankReport], threshold_pct: float = THRESHOLD_PCT) -> list[Straggler]:
    """Ranks slower than the median by more than ``threshold_pct`` (see the module docstring)."""
    stepped = [r for r in reports if r.mean_step_ms is not None and r.per_step is not None]
    if len(stepped) < 2:
        return []
    med = _median_split(stepped)
    median_step = statistics.median(r.mean_step_ms for r in stepped if r.mean_step_ms is not None)
    factor = 1.0 + threshold_pct / 100.0
    out = [
        _straggler(r, "step time", r.mean_step_ms, median_step, med)
        for r in stepped
        if r.mean_step_ms is not None and r.mean_step_ms > median_step * factor
    ]
    if out:
        return sorted(out, key=lambda s: -s.excess_ms)
    for r in stepped:
        ps = r.per_step
        assert ps is not None
        if ps.compute_us > med.compute_us * factor and ps.exposed_comm_us < med.exposed_comm_us:
            out.append(_straggler(r, "compute", ps.compute_us / 1000.0, med.compute_us / 1000.0, med))
    return sorted(out, key=lambda s: -s.excess_ms)
