"""Where each step of one rank went: compute, waiting in collectives, data loading, idle (the straggler rule's input).

Each step (the rank report's steps: ProfilerStep spans, else optimizer-step
or annotation boundaries) is cut into disjoint parts, each instant going to
the first part, in this order, that covers it:

* CPU basis (no GPU activity): data loading (a ``enumerate(DataLoader)#...``
  annotation, the ops inside it included), collective wait (a collective op
  runs: ``gloo:all_reduce`` on gloo's thread; a main-thread op that blocks
  on the result, such as DDP's last ``AccumulateGrad``, is waiting too),
  compute (another op runs), idle (nothing runs).
* GPU basis: compute (a kernel that is not a collective), collective wait
  (a collective kernel with no compute under it), other (copies and sets),
  data loading (the GPU is idle while the CPU is in the DataLoader), idle.

So ``compute + wait + data + other + idle`` = the step's length. In a
synchronous collective the rank that is late (by compute, by idle time or by
its data loader) has the least wait; the others wait for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpulens.analysis.trace.intervals import Interval, clip, length, merge
from gpulens.analysis.trace.rank_reduce import KERNEL_CATS, RankFold, is_comm_kernel
from gpulens.analysis.trace.steps import find_steps

DATA_PREFIX = "enumerate(DataLoader)#"
"""torch.utils.data's ``DataLoader`` iterators record ``enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__``
(``_MultiProcessingDataLoaderIter`` with workers) around each batch they hand out."""
PARTS = ("compute", "wait", "data", "other", "idle")


@dataclass(frozen=True, slots=True)
class StepProfile:
    """One rank's steps, each cut into parts (ms); every tuple follows ``step_ms``.

    ``data_marked`` says whether the trace has DataLoader annotations at all
    (without them data loading is idle or compute).
    """

    basis: str  # "GPU" or "CPU"
    source: str  # where the steps came from (StepTimes.source)
    step_ms: tuple[float, ...]
    compute_ms: tuple[float, ...]
    wait_ms: tuple[float, ...]
    data_ms: tuple[float, ...]
    other_ms: tuple[float, ...]
    idle_ms: tuple[float, ...]
    data_marked: bool

    @property
    def steps(self) -> int:
        """How many steps."""
        return len(self.step_ms)

    def part(self, name: str) -> tuple[float, ...]:
        """One part's per-step times by name (``PARTS``, or "step")."""
        values: tuple[float, ...] = getattr(self, f"{name}_ms")
        return values


def _exclusive(layers: Sequence[list[Interval]], start: float, end: float) -> list[float]:
    """Per layer, the time in ``[start, end]`` it covers and no earlier layer covers (lists merged)."""
    out: list[float] = []
    covered: list[Interval] = []
    before = 0.0
    for layer in layers:
        part = clip(layer, start, end)
        if part:
            covered = merge(covered + part)
        now = length(covered)
        out.append(max(now - before, 0.0))
        before = now
    return out


def _spans(spans: Iterable[tuple[str, float, float]], prefix: str) -> list[Interval]:
    return merge((ts, ts + dur) for name, ts, dur in spans if name.startswith(prefix) and dur > 0)


def step_profile(fold: RankFold) -> StepProfile | None:
    """The per-step parts of one folded trace; None when it has no steps."""
    found = find_steps(fold.profiler, fold.optimizer, fold.annotations)
    steps = found.steps
    if not steps:
        return None
    data = _spans(fold.annotations, DATA_PREFIX)
    if fold.gpu:
        basis = "GPU"
        kernels = [e for e in fold.gpu if e.cat in KERNEL_CATS]
        comm = merge((e.ts, e.ts + e.dur) for e in kernels if is_comm_kernel(e.name))
        compute = merge((e.ts, e.ts + e.dur) for e in kernels if not is_comm_kernel(e.name))
        other = merge((e.ts, e.ts + e.dur) for e in fold.gpu if e.cat not in KERNEL_CATS)
        order = (compute, comm, other, data)  # then idle
        index = (0, 1, 3, 2)  # compute, wait, other, data -> PARTS order
    else:
        basis = "CPU"
        comm = merge(fold.comm_ops)
        compute = merge(fold.cpu_intervals())
        order = (data, comm, compute, [])
        index = (2, 1, 0, 3)
    rows: list[list[float]] = [[], [], [], [], [], []]  # step, compute, wait, data, other, idle
    for st in steps:
        start, end = st.start_us, st.start_us + st.dur_us
        got = _exclusive(order, start, end)
        parts = [0.0] * 4
        for value, at in zip(got, index, strict=True):
            parts[at] = value
        rows[0].append(st.dur_us / 1000.0)
        for i, value in enumerate(parts):
            rows[i + 1].append(value / 1000.0)
        rows[5].append(max(st.dur_us - sum(got), 0.0) / 1000.0)
    step, comp, wait, dat, oth, idle = (tuple(r) for r in rows)
    return StepProfile(basis, found.source, step, comp, wait, dat, oth, idle, bool(data))
