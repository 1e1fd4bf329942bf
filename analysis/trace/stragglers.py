"""The straggler rule: which rank holds the others back, by what, measured against the job's own noise.

Input: every rank's steps cut into compute, collective wait, data loading,
other and idle time (:class:`~.step_profile.StepProfile`; a rank without one
gives its per-step averages as a single step). For each part, each rank's
median over its steps is compared with the median of the *other* ranks'
medians. A rank is named when that excess is over the threshold

    max(K x noise x se(n, R), threshold_pct % of the median step, ABS_FLOOR_MS)

and when the excess also holds in more than two thirds of its steps (its
value there: :func:`_most_steps`), so that a few steps hit by preemption do
not name a rank. ``noise`` is the part's step-to-step spread within ranks:
the median absolute difference between two steps of one rank, over every
such pair of every rank, / (0.6745 sqrt 2) (for normal jitter its standard
deviation, like 1.4826 x a median absolute deviation, but without the low
bias of centring on a handful of steps). ``se(n, R) = sqrt(pi/2) x
sqrt(1/n + (pi/2)/(n (R - 1)))`` makes it the standard error of a rank's
median minus the median of R - 1 others' (n steps each). Identical ranks with
jittery steps stay within it; the floor keeps real but negligible
differences (under 5 % of a step) unnamed.

Three parts name a straggler, each as its own kind:

* ``compute``: more compute per step;
* ``late``: more idle time (nothing runs on it, outside the DataLoader): it arrives late at the collective;
* ``data``: more time in the DataLoader.

A rank whose collective wait is over the others' by more than the wait
threshold is not named: it waits for someone else (in a synchronous
collective the rank that holds the others back waits least; ``held_back``
says the others' extra wait is at least half its excess). With fewer than
``MIN_STEPS`` steps on some rank the noise cannot be measured and only an
excess over ``LARGE_PCT`` % of the median step is named. Ranks slow against
the majority are found: with half the ranks or more slow alike, the fast
ones are the odd ones out and nobody is named.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from gpulens.analysis.trace.rank_report import RankReport
from gpulens.analysis.trace.step_profile import StepProfile

K = 3.5
"""Standard errors over the others' median a rank's median must be (3.5: at most 0.8 % of simulated jobs of
identical ranks named anyone, 4 to 10 steps, 2 to 8 ranks; tests/unit/analysis/test_stragglers.py)."""
MIN_STEPS = 3
LARGE_PCT = 50.0
ABS_FLOOR_MS = 0.02
PAIR_SCALE = 0.6745 * math.sqrt(2.0)
NOISE_STEPS = 64
"""Steps per rank the noise is measured on (evenly spaced; medians use every step)."""
NOISE_WINDOW = 16
"""Pairs of steps at most this far apart (all pairs on up to 17 steps): slow drift is not step-to-step noise."""
NOISE_RANKS = 64
"""Ranks the noise is pooled over (evenly spaced), so that a 4096-rank job costs about what a 64-rank one does."""
KINDS = (("compute", "compute", "compute"), ("late", "idle", "late arrival"), ("data", "data", "data loading"))
"""(kind, the part it is measured by, ``by``)."""
METRICS = ("compute", "wait", "data", "idle", "other")


@dataclass(frozen=True, slots=True)
class Straggler:
    """A rank that holds the others back, by what, and by how much per step (ms).

    ``value_ms`` is its per-step median of the part that names it (``kind``),
    ``median_ms`` the median of the other ranks' medians; the ``*_delta_ms``
    fields compare every part the same way; ``others_wait_ms`` is how much
    longer the others wait at the collective per step than it does.
    """

    rank: int
    by: str  # "compute", "late arrival", "data loading"
    value_ms: float
    median_ms: float
    excess_ms: float
    excess_pct: float  # of median_ms (inf when the others' figure is 0)
    compute_delta_ms: float
    comm_delta_ms: float  # collective wait
    idle_delta_ms: float
    other_delta_ms: float
    cause: str  # the part that names it: "compute", "idle", "data"
    kind: str = "compute"  # "compute", "late", "data"
    data_delta_ms: float = 0.0
    others_wait_ms: float = 0.0
    threshold_ms: float = 0.0
    noise_ms: float | None = None
    step_pct: float = 0.0  # excess_ms as a share of the others' median step
    steps: int = 0
    held_back: bool = False  # the others wait for it: others_wait_ms over half its excess (and the floor)

    @property
    def ratio(self) -> float | None:
        """``value_ms / median_ms``; None when the others' figure is 0."""
        return self.value_ms / self.median_ms if self.median_ms > 0 else None


@dataclass(frozen=True, slots=True)
class RuleMetric:
    """One part's noise (None: not measured) and the excess a rank needs in it to be named (ms)."""

    metric: str
    noise_ms: float | None
    threshold_ms: float


@dataclass(frozen=True, slots=True)
class StragglerRule:
    """How the rule ran: ranks and steps it compared, the noise it measured, the thresholds it used."""

    ranks: int
    steps: int  # the fewest steps of any rank compared
    noise_measured: bool
    median_step_ms: float
    floor_ms: float
    threshold_pct: float
    metrics: tuple[RuleMetric, ...]
    note: str = ""

    def metric(self, name: str) -> RuleMetric | None:
        """The row of one part."""
        return next((m for m in self.metrics if m.metric == name), None)


@dataclass(frozen=True, slots=True)
class _Rank:
    rank: int
    cells: dict[str, tuple[float, ...]]
    medians: dict[str, float]

    @property
    def steps(self) -> int:
        return len(self.cells["step"])


def _from_profile(rank: int, p: StepProfile) -> _Rank:
    cells = {name: p.part(name) for name in ("step", *METRICS)}
    return _Rank(rank, cells, {k: statistics.median(v) for k, v in cells.items()})


def _from_report(r: RankReport) -> _Rank | None:
    prof = r.arrival.profile if r.arrival is not None else None
    if prof is not None and prof.steps:
        return _from_profile(r.rank, prof)
    ps = r.per_step
    if ps is None or r.mean_step_ms is None:
        return None
    one = {"step": r.mean_step_ms, "compute": ps.compute_us / 1000.0, "wait": ps.exposed_comm_us / 1000.0,
           "data": 0.0, "idle": ps.idle_us / 1000.0, "other": ps.other_us / 1000.0}
    return _Rank(r.rank, {k: (v,) for k, v in one.items()}, one)


def noise(ranks: Sequence[_Rank], metric: str) -> float:
    """The per-step noise of one part: the median, over pairs of steps of one rank (all ranks pooled), of
    their absolute difference, divided by ``PAIR_SCALE``.

    For normal jitter that is its standard deviation (the difference of two steps has sqrt(2) times it, and
    0.6745 times that is its median absolute value); a few outlying steps barely move it; and unlike the
    deviation from each rank's own median it is not biased low on a handful of steps. Bounded work: at most
    ``NOISE_RANKS`` ranks, ``NOISE_STEPS`` steps each, pairs ``NOISE_WINDOW`` steps apart or closer.
    """
    diffs: list[float] = []
    for r in ranks[:: max(1, len(ranks) // NOISE_RANKS)]:
        xs = r.cells[metric]
        xs = xs[:: max(1, len(xs) // NOISE_STEPS)]
        n = len(xs)
        diffs += [abs(xs[i] - xs[j]) for i in range(n) for j in range(i + 1, min(n, i + 1 + NOISE_WINDOW))]
    return statistics.median(diffs) / PAIR_SCALE if diffs else 0.0


def se_factor(steps: int, ranks: int) -> float:
    """Standard error of (a rank's median - the median of the other ranks' medians), per unit of per-step noise."""
    half_pi = math.pi / 2
    return math.sqrt(half_pi) * math.sqrt(1.0 / steps + half_pi / (steps * max(ranks - 1, 1)))


def _most_steps(r: _Rank, metric: str) -> float:
    """The largest value more than two thirds of the rank's steps reach (all 3 of 3, 3 of 4, 5 of 6, 7 of 10):
    a few steps hit by preemption or a page-cache miss do not name a rank."""
    xs = sorted(r.cells[metric])
    return xs[(len(xs) - 1) // 3]


def _median_without(ordered: Sequence[float], value: float) -> float:
    """The median of ``ordered`` (sorted, two or more) with one ``value`` taken out: O(log n), not O(n)."""
    skip = bisect.bisect_left(ordered, value)
    n = len(ordered) - 1

    def at(k: int) -> float:
        return ordered[k] if k < skip else ordered[k + 1]

    return (at((n - 1) // 2) + at(n // 2)) / 2.0


def judge(reports: Sequence[RankReport], threshold_pct: float = 5.0) -> tuple[list[Straggler], StragglerRule]:
    """The stragglers (largest excess first) and how the rule ran (see the module docstring)."""
    ranks = [x for x in (_from_report(r) for r in reports) if x is not None]
    return judge_ranks(ranks, threshold_pct)


def judge_ranks(ranks: Sequence[_Rank], threshold_pct: float) -> tuple[list[Straggler], StragglerRule]:
    """The rule on reduced ranks."""
    if len(ranks) < 2:
        return [], StragglerRule(len(ranks), min((r.steps for r in ranks), default=0), False, 0.0, 0.0,
                                 threshold_pct, (), "needs two or more ranks with steps")
    rule = _rule(ranks, threshold_pct)
    thr = {row.metric: row for row in rule.metrics}
    ordered = {m: sorted(r.medians[m] for r in ranks) for m in ("step", *METRICS)}
    out = [s for s in (_straggler(r, ordered, thr, rule.floor_ms) for r in ranks) if s is not None]
    return sorted(out, key=lambda s: (-s.excess_ms, s.rank)), rule


def _rule(ranks: Sequence[_Rank], threshold_pct: float) -> StragglerRule:
    """The floor, and per part the noise and the excess that names a rank (two or more ranks)."""
    steps = min(r.steps for r in ranks)
    median_step = statistics.median(r.medians["step"] for r in ranks)
    floor = max(ABS_FLOOR_MS, threshold_pct / 100.0 * median_step)
    measured = steps >= MIN_STEPS
    note = ""
    if not measured:
        floor = max(floor, LARGE_PCT / 100.0 * median_step)
        note = (f"noise not measured: {steps} step{'s' if steps != 1 else ''} on some rank ({MIN_STEPS} needed); "
                f"only an excess over {LARGE_PCT:g}% of the median step is named")
    rows = []
    for m in METRICS:
        sigma = noise(ranks, m) if measured else None
        limit = max(K * sigma * se_factor(steps, len(ranks)), floor) if sigma is not None else floor
        rows.append(RuleMetric(m, sigma, limit))
    return StragglerRule(len(ranks), steps, measured, median_step, floor, threshold_pct, tuple(rows), note)


def _straggler(r: _Rank, ordered: dict[str, list[float]], thr: dict[str, RuleMetric],
               floor: float) -> Straggler | None:
    """Rank ``r`` against the median of the other ranks' medians (``ordered``: every rank's, sorted), or None
    when no part names it."""
    others = {m: _median_without(ordered[m], r.medians[m]) for m in ordered}
    delta = {m: r.medians[m] - others[m] for m in METRICS}
    if delta["wait"] > thr["wait"].threshold_ms:
        return None  # it waits for another rank: not the one holding them back
    named = [(delta[part], kind, part, by) for kind, part, by in KINDS
             if delta[part] > thr[part].threshold_ms
             and _most_steps(r, part) - others[part] > thr[part].threshold_ms]
    if not named:
        return None
    excess, kind, part, by = max(named)
    other, other_step = others[part], others["step"]
    return Straggler(
        r.rank, by, r.medians[part], other, excess, 100.0 * excess / other if other > 0 else math.inf,
        delta["compute"], delta["wait"], delta["idle"], delta["other"], part, kind, delta["data"],
        -delta["wait"], thr[part].threshold_ms, thr[part].noise_ms,
        100.0 * excess / other_step if other_step > 0 else math.inf, r.steps,
        -delta["wait"] > max(floor, 0.5 * excess))
