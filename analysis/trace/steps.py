"""Training steps of one rank, from whichever markers the trace has.

In order of preference:

1. ``ProfilerStep#N`` spans (``torch.profiler.profile(schedule=...)`` and
   ``prof.step()``): a step is one span.
2. ``Optimizer.step#...`` spans (every ``torch.optim`` optimizer records one
   per call; on-demand Kineto traces carry no ProfilerStep): a step runs from
   the end of one optimizer step to the end of the next, so N optimizer
   calls give N - 1 step times, over N iterations (:attr:`StepTimes.count`,
   what whole-trace figures are divided by "per step").
3. ``user_annotation`` spans (``record_function``): the repeated annotation
   with the largest total time; a step runs from the start of one to the
   start of the next (N spans, N - 1 steps).

Spans nested inside an earlier span of the same kind (a marker recorded
twice) are dropped. :class:`StepTimes` says which source was used.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from gpulens.analysis.trace.summary import Step

PROFILER_PREFIX = "ProfilerStep#"
OPTIMIZER_PREFIX = "Optimizer.step#"
SOURCES = ("ProfilerStep", "optimizer step", "user annotation", "none")

Span = tuple[str, float, float]  # (name, start_us, dur_us)


@dataclass(frozen=True, slots=True)
class StepTimes:
    """The steps found and where they came from.

    ``source`` is one of :data:`SOURCES`; ``marker`` names the annotation
    used (``source == "user annotation"``), else "".
    """

    source: str
    marker: str
    steps: tuple[Step, ...]
    iterations: int = -1
    """How many iterations the trace holds: one per ProfilerStep span, per optimizer call, per
    annotation span (N markers: N iterations but N - 1 step intervals). -1: as many as ``steps``."""

    @property
    def count(self) -> int:
        """Iterations, for dividing whole-trace counts and times "per step" (never the N - 1 intervals)."""
        return len(self.steps) if self.iterations < 0 else self.iterations

    @property
    def durations_us(self) -> tuple[float, ...]:
        """Each step's length in microseconds."""
        return tuple(s.dur_us for s in self.steps)

    @property
    def describe(self) -> str:
        """One phrase: 'ProfilerStep spans', 'optimizer-step boundaries', ..."""
        if self.source == "ProfilerStep":
            return "ProfilerStep spans"
        if self.source == "optimizer step":
            return "Optimizer.step boundaries (no ProfilerStep in the trace)"
        if self.source == "user annotation":
            return f"boundaries of user annotation {self.marker!r} (no ProfilerStep or optimizer step)"
        return "no step markers (no ProfilerStep, optimizer step or repeated user annotation)"


def _outermost(spans: Iterable[Span]) -> list[Span]:
    out: list[Span] = []
    for span in sorted(spans, key=lambda s: (s[1], -s[2])):
        if out and span[1] < out[-1][1] + out[-1][2]:
            continue  # inside (or overlapping) the previous one: the same step recorded twice
        out.append(span)
    return out


def find_steps(profiler: Iterable[Span], optimizer: Iterable[Span], annotations: Iterable[Span]) -> StepTimes:
    """The steps of one rank from its ProfilerStep, Optimizer.step and user-annotation spans."""
    prof = _outermost(profiler)
    if prof:
        return StepTimes("ProfilerStep", "", tuple(Step(n, ts, dur) for n, ts, dur in prof))
    opt = _outermost(optimizer)
    if len(opt) >= 2:
        ends = [ts + dur for _n, ts, dur in opt]
        steps = tuple(Step(f"step {i + 1}", ends[i], ends[i + 1] - ends[i]) for i in range(len(ends) - 1))
        return StepTimes("optimizer step", "", steps, len(opt))
    by_name: dict[str, list[Span]] = defaultdict(list)
    for span in annotations:
        if not span[0].startswith((PROFILER_PREFIX, "Optimizer.")):
            by_name[span[0]].append(span)
    best, best_total = "", 0.0
    for name, spans in by_name.items():
        kept = _outermost(spans)
        total = sum(s[2] for s in kept)
        if len(kept) >= 2 and (total > best_total or (total == best_total and name < best)):
            best, best_total = name, total
    if best:
        starts = [ts for _n, ts, _d in _outermost(by_name[best])]
        steps = tuple(Step(f"{best} {i + 1}", starts[i], starts[i + 1] - starts[i]) for i in range(len(starts) - 1))
        return StepTimes("user annotation", best, steps, len(starts))
    return StepTimes("none", "", ())
