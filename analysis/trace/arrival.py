"""One rank reduced to what HTA's late-arrival straggler method needs (see :mod:`.late_arrival`).

HTA (``hta/common/trace.py::add_iteration``) gives every CPU-side event
the number of the ``ProfilerStep#N`` span that contains its start
(``s.ts <= e.ts < s.ts + s.dur``; the last such span in file order), and
every GPU event on a stream > 0 the iteration of the CPU event that
launched it (same ``correlation`` id: the runtime or driver call). From
that, one rank keeps:

* its step spans in file order (``iteration``, start, duration);
* per iteration, the earliest start and the latest end of any event in it,
  CPU or GPU (HTA's mean iteration time is taken over these);
* its NCCL kernels (``ncclKernel*``, and ``ncclDevKernel*``: NCCL >= 2.19's
  name) on a stream > 0 launched in a step numbered > 0, in file order:
  stream, iteration, name, start, duration. A few hundred to a few thousand
  per rank (df_index_resolver: 2,020 of 19,370 kernels, 70 kB pickled).

With it, the rank's :class:`~.step_profile.StepProfile` (each step cut into
compute, collective wait, data loading and idle time), the input of the
straggler rule (:mod:`.stragglers`).

Everything else is dropped in the worker that read the file.
"""

from __future__ import annotations

import enum
import math
import re
from bisect import bisect_right
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import ClassVar

from gpulens.analysis.trace.events import Event
from gpulens.analysis.trace.intervals import Interval
from gpulens.analysis.trace.rank_reduce import KERNEL_CATS, RankFold
from gpulens.analysis.trace.step_profile import StepProfile, step_profile
from gpulens.core.reasons import Reason, ReasonText

STEP_NUMBER = re.compile(r"ProfilerStep\s*#\s*(\d+)")
"""HTA's ``get_iter_nbr`` / ``_extract_iter`` pattern."""
OVERLAP_BUDGET = 20_000_000
"""Most span-event tests when the step spans overlap (each event is then checked against every span)."""
COMM_PREFIXES = ("ncclKernel", "ncclDevKernel")
"""HTA 0.5 takes symbols starting with ``ncclKernel``; newer NCCL names its kernels ``ncclDevKernel_*``."""


@dataclass(frozen=True, slots=True)
class StepSpan:
    """A ``ProfilerStep#N`` span of one rank (us)."""

    iteration: int
    ts_us: float
    dur_us: float


@dataclass(frozen=True, slots=True)
class IterRange:
    """The earliest start and latest end of any event (CPU or GPU) HTA puts in this iteration."""

    iteration: int
    min_ts_us: float
    max_end_us: float


@dataclass(frozen=True, slots=True)
class CommKernel:
    """An NCCL kernel with the iteration of the call that launched it."""

    stream: int
    iteration: int
    name: str
    ts_us: float
    dur_us: float


class NotPlacedKind(enum.Enum):
    """Why a rank's events were not placed in its steps; the comment says which fields of :class:`NotPlaced` it fills."""

    SPANS_OVERLAP = "spans-overlap"  # spans (ProfilerStep#N spans, some overlapping), events (to place in them)


@dataclass(frozen=True, slots=True)
class NotPlaced(Reason):
    """Why a rank's events were not placed in its steps: ``kind`` and the facts its sentence names."""

    kind: NotPlacedKind
    spans: int = 0
    events: int = 0

    TEXT: ClassVar[ReasonText] = {
        NotPlacedKind.SPANS_OVERLAP: ("{0.spans} ProfilerStep#N spans that overlap: too many to place "
                                      "{0.events} events in them (HTA scans every span for every event)"),
    }


@dataclass(frozen=True, slots=True)
class RankArrival:
    """One rank's input to the late-arrival method; ``note`` says why it has none, ``refused`` why its events
    were not placed at all (the late-arrival method then refuses the job)."""

    steps: tuple[StepSpan, ...]
    ranges: tuple[IterRange, ...]
    kernels: tuple[CommKernel, ...]
    note: str = ""
    profile: StepProfile | None = None  # per-step parts for the straggler rule (any step markers, not only ProfilerStep)
    refused: NotPlaced | None = None


def _int(v: object) -> int | None:
    """HTA's ``int(stream)``: ints and integer strings, else None (HTA: -1)."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        try:
            return int(v)
        except ValueError:
            return None
    return None


def locator(steps: tuple[StepSpan, ...]) -> Callable[[float], int]:
    """``ts -> index`` of the last step (file order) whose ``[ts, ts + dur)`` holds it, else -1."""
    order, starts, ends = _sorted(steps)
    if _disjoint(starts, ends):
        def find(ts: float) -> int:
            j = bisect_right(starts, ts) - 1
            return order[j] if j >= 0 and ts < ends[j] else -1
        return find

    def scan(ts: float) -> int:
        for i in range(len(steps) - 1, -1, -1):
            s = steps[i]
            if s.ts_us <= ts < s.ts_us + s.dur_us:
                return i
        return -1
    return scan


def _sorted(steps: tuple[StepSpan, ...]) -> tuple[list[int], list[float], list[float]]:
    order = sorted(range(len(steps)), key=lambda i: steps[i].ts_us)
    return order, [steps[i].ts_us for i in order], [steps[i].ts_us + steps[i].dur_us for i in order]


def _disjoint(starts: list[float], ends: list[float]) -> bool:
    return all(ends[i] <= starts[i + 1] for i in range(len(starts) - 1))


def _fold_rows(steps: tuple[StepSpan, ...], groups: list[Iterable[Interval]], lo: list[float], hi: list[float]) -> None:
    """Widen each step's ``[lo, hi]`` by the rows that start in it (the hot loop: ~200k rows a trace)."""
    order, starts, ends = _sorted(steps)
    if not _disjoint(starts, ends):
        find = locator(steps)
        for rows in groups:
            for ts, end in rows:
                i = find(ts)
                if i >= 0:
                    lo[i], hi[i] = min(lo[i], ts), max(hi[i], end)
        return
    # Sorted and disjoint (the usual case): bisect inline, on the sorted copies.
    slo, shi = [lo[i] for i in order], [hi[i] for i in order]
    for rows in groups:
        for ts, end in rows:
            j = bisect_right(starts, ts) - 1
            if j >= 0 and ts < ends[j]:
                if end > shi[j]:
                    shi[j] = end
                if ts < slo[j]:
                    slo[j] = ts
    for j, i in enumerate(order):
        lo[i], hi[i] = slo[j], shi[j]


def _cpu_rows(fold: RankFold) -> list[Iterable[Interval]]:
    spans = [(ts, ts + dur) for group in (fold.profiler, fold.optimizer, fold.annotations) for _, ts, dur in group]
    return [zip(fold.cpu_starts, fold.cpu_ends, strict=True), fold.comm_ops,
            zip(fold.row_starts, fold.row_ends, strict=True), spans]


def _overlap_refusal(steps: tuple[StepSpan, ...], fold: RankFold) -> NotPlaced | None:
    """Why overlapping step spans are not scanned (too many events to place in them), or None."""
    _, starts, ends = _sorted(steps)
    rows = len(fold.cpu_starts) + len(fold.comm_ops) + len(fold.row_starts) + len(fold.gpu)
    if not _disjoint(starts, ends) and len(steps) * rows > OVERLAP_BUDGET:
        return NotPlaced(NotPlacedKind.SPANS_OVERLAP, len(steps), rows)
    return None


def _launch_link(e: Event) -> tuple[int, int] | None:
    """(correlation id, stream) of a GPU record with a correlation id on a stream > 0, else None."""
    a = e.args
    if a is None:
        return None
    corr, stream = a.correlation, a.stream
    if type(corr) is not int:  # exact type: JSON gives int; bool and the rest are no link
        return None
    if type(stream) is not int:
        stream = _int(stream)
        if stream is None:
            return None
    return (corr, stream) if stream > 0 else None


def _fold_gpu(fold: RankFold, steps: tuple[StepSpan, ...], lo: list[float], hi: list[float]) -> list[CommKernel]:
    """Widen each step's ``[lo, hi]`` by the GPU records launched in it; the NCCL kernels of steps > 0."""
    find = locator(steps)
    launch = dict(zip(fold.launch_corr, fold.launch_ts, strict=True))  # a repeated id: the last call wins, as in HTA
    kernels: list[CommKernel] = []
    names: dict[str, str] = {}  # one string object per name: the pickled summary stores each once
    launch_get = launch.get
    for e in fold.gpu:
        link = _launch_link(e)
        if link is None:
            continue
        corr, stream = link
        at = launch_get(corr)
        if at is None:
            continue
        i = find(at)
        if i < 0:
            continue
        end = e.ts + e.dur
        if e.ts < lo[i]:
            lo[i] = e.ts
        if end > hi[i]:
            hi[i] = end
        it = steps[i].iteration
        if it > 0 and e.cat in KERNEL_CATS and e.name.startswith(COMM_PREFIXES):  # HTA: iteration > 0
            kernels.append(CommKernel(stream, it, names.setdefault(e.name, e.name), e.ts, e.dur))
    return kernels


def _iteration_ranges(steps: tuple[StepSpan, ...], lo: list[float], hi: list[float]) -> tuple[IterRange, ...]:
    """Per iteration (steps of one number merged), the span of the events in it, if any."""
    by_iter: dict[int, tuple[float, float]] = {}
    for i, s in enumerate(steps):
        if lo[i] <= hi[i]:
            a0, b0 = by_iter.get(s.iteration, (math.inf, -math.inf))
            by_iter[s.iteration] = (min(a0, lo[i]), max(b0, hi[i]))
    return tuple(IterRange(k, a, b) for k, (a, b) in sorted(by_iter.items()))


def rank_arrival(fold: RankFold) -> RankArrival:
    """Reduce a folded trace to its :class:`RankArrival`."""
    profile = step_profile(fold)
    steps = tuple(StepSpan(int(m.group(1)), ts, dur) for name, ts, dur in fold.profiler
                  if (m := STEP_NUMBER.match(name)))
    if not steps:
        return RankArrival((), (), (), "no ProfilerStep#N spans", profile)
    refused = _overlap_refusal(steps, fold)
    if refused is not None:
        return RankArrival(steps, (), (), "", profile, refused)
    n = len(steps)
    lo, hi = [math.inf] * n, [-math.inf] * n
    _fold_rows(steps, _cpu_rows(fold), lo, hi)
    kernels = _fold_gpu(fold, steps, lo, hi)
    ranges = _iteration_ranges(steps, lo, hi)
    note = "" if kernels else "no NCCL kernels (ncclKernel*, ncclDevKernel*) launched inside a ProfilerStep"
    return RankArrival(steps, ranges, tuple(kernels), note, profile)
