"""Analyse every rank of a job together: step times, spread, stragglers, overlap.

Each rank's file is read and reduced to a :class:`RankReport` on its own
(a worker process per file with ``jobs > 1``), so at most ``jobs`` traces
are in memory at once and the parent only ever holds the small reports.

Stragglers (:mod:`.stragglers`): each rank's steps are cut into compute,
collective wait, data loading and idle time in its worker
(:mod:`.step_profile`); a rank is named when its per-step median of compute
("compute"), idle ("late": it arrives late at the collective) or data
loading ("data") is over the other ranks' by more than a threshold set by
the job's own step-to-step noise (never under ``threshold_pct`` % of the
median step), unless it waits at the collective longer than they do.

A second, independent answer is HTA's own method (:mod:`.late_arrival`):
the ranks whose dominant NCCL collective starts latest, step by step.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
import statistics
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace

from gpulens.analysis.trace.errors import TraceFileError, TraceProblem
from gpulens.analysis.trace.late_arrival import CANDIDATES, LateArrival, late_arrival
from gpulens.analysis.trace.load import DEFAULT_MAX_BYTES, stream_events, trace_limits
from gpulens.analysis.trace.rank_files import (
    assign_ranks,
    rank_from_info,
    rank_from_name,
    trace_files,
)
from gpulens.analysis.trace.rank_reduce import RankFold
from gpulens.analysis.trace.rank_report import RankReport, build_report
from gpulens.analysis.trace.sniff import what_it_is
from gpulens.analysis.trace.stragglers import Straggler, StragglerRule, judge
from gpulens.core.limits import InputLimits
from gpulens.core.sanitize import clean_text

Progress = Callable[[float, str], None]
THRESHOLD_PCT = 5.0
"""The straggler rule's floor: an excess under this share of the median step is never named."""
__all__ = ["RanksReport", "Spread", "Straggler", "StragglerRule", "analyze_ranks", "find_stragglers", "load_rank",
           "spread_of"]


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
class RanksReport:
    """The multi-rank analysis: one report per rank (sorted by rank), spread, stragglers and how they were found."""

    ranks: tuple[RankReport, ...]
    spread: Spread | None
    stragglers: tuple[Straggler, ...]
    threshold_pct: float
    late: LateArrival | None = None  # HTA's late-arrival stragglers
    rule: StragglerRule | None = None  # the straggler rule's noise and thresholds


def load_rank(path: str, limits: InputLimits) -> tuple[RankReport, int | None]:
    """One file reduced to its report (rank still unassigned: -1) and its distributedInfo rank.

    Raises:
        TraceFileError: unreadable, over a limit, or not a trace.
    """
    fold = RankFold()
    meta = stream_events(path, fold.add_batch, limits=limits)
    if not (fold.gpu or fold.cpu_starts or fold.comm_ops or fold.profiler or fold.optimizer or fold.annotations):
        raise TraceFileError(f"{clean_text(path)}: {what_it_is(fold, meta.events, path)}", problem=TraceProblem.NO_EVENTS)
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
        with (ProcessPoolExecutor(max_workers=min(jobs, len(files)), mp_context=ctx, initializer=_worker_init) as pool,
              contextlib.ExitStack() as undo):
            undo.callback(pool.shutdown, wait=False, cancel_futures=True)  # anything raised, Ctrl-C too: stop now
            for i, result in enumerate(pool.map(_load_star, work)):
                loaded.append(result)
                if progress is not None:
                    progress((i + 1) / len(files), f"read {result[0].path}")
            undo.pop_all()
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
    stragglers, rule = judge(reports, threshold_pct)
    return RanksReport(tuple(reports), spread, tuple(stragglers), threshold_pct, late, rule)


def spread_of(reports: Sequence[RankReport]) -> Spread | None:
    """Fastest/slowest/median mean step time over the ranks that have steps."""
    means = [(r.mean_step_ms, r.rank) for r in reports if r.mean_step_ms is not None]
    if not means:
        return None
    lo = min(means)
    hi = max(means, key=lambda m: (m[0], -m[1]))
    med = statistics.median(m for m, _ in means)
    return Spread(len(means), lo[0], lo[1], hi[0], hi[1], med)


def find_stragglers(reports: Sequence[RankReport], threshold_pct: float = THRESHOLD_PCT) -> list[Straggler]:
    """The ranks that hold the others back, largest excess first (:func:`.stragglers.judge`)."""
    return judge(reports, threshold_pct)[0]
