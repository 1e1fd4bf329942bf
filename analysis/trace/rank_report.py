"""One rank's report: step times, where its time went, comm/compute overlap, collectives.

Times are microseconds unless the name says ``_ms``. The time split is
taken on the GPU streams when the trace has GPU activity (all devices of the
rank merged, as HTA does), else on the CPU threads:

* GPU: ``compute`` = kernels that are not collectives, ``comm`` =
  collective kernels (NCCL/RCCL), ``other`` = copies and sets not under a
  kernel; ``overlap_pct`` is HTA's communication/computation overlap: the
  time collective kernels run while a compute kernel runs, over the
  collectives' time.
* CPU (no GPU activity): ``compute`` = time some op that is not a
  collective runs, ``comm`` = time a collective op runs (``gloo:``,
  ``nccl:``, ``c10d::``, ``record_param_comms``; gloo runs them on its own
  threads), ``overlap_pct`` the same ratio as on the GPU. The short
  ``c10d::`` calls nested in the ops that issue them count as overlapped.

In both, ``window = compute + exposed_comm + other + idle``.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpulens.analysis.trace.arrival import RankArrival, rank_arrival
from gpulens.analysis.trace.gpu import gpu_breakdown, kernel_rows
from gpulens.analysis.trace.intervals import Interval, clip, length, merge, overlap
from gpulens.analysis.trace.load import TraceMeta
from gpulens.analysis.trace.rank_reduce import KERNEL_CATS, RankFold, is_comm_kernel
from gpulens.analysis.trace.steps import StepTimes, find_steps
from gpulens.analysis.trace.summary import GpuBreakdown, KernelRow

TOP_KERNELS = 5


@dataclass(frozen=True, slots=True)
class TimeSplit:
    """Where a window's time went (us); compute + exposed_comm + other + idle = window."""

    window_us: float
    busy_us: float
    compute_us: float
    comm_us: float
    exposed_comm_us: float
    other_us: float
    idle_us: float

    def scaled(self, factor: float) -> TimeSplit:
        """Every field times ``factor`` (per-step figures)."""
        return TimeSplit(*(getattr(self, f) * factor for f in TimeSplit.__slots__))

    def pct(self, part_us: float) -> float:
        """Share of the window in percent (0 for an empty window)."""
        return 100.0 * part_us / self.window_us if self.window_us > 0 else 0.0


@dataclass(frozen=True, slots=True)
class RankReport:
    """Everything the multi-rank view shows for one rank; small and picklable.

    ``step_times_ms`` is what a chart of step time per rank draws;
    ``per_step`` is the split within the steps' window divided by the number
    of steps (None without steps); ``overlap_pct`` is None with
    ``overlap_note`` saying why.
    """

    rank: int
    rank_source: str  # "distributedInfo", "file name" or "order"
    path: str
    events: int
    size_bytes: int
    basis: str  # "GPU" or "CPU"
    steps: StepTimes
    step_times_ms: tuple[float, ...]
    split: TimeSplit
    per_step: TimeSplit | None
    overlap_pct: float | None
    overlap_note: str
    collective_cpu_us: float
    collective_cpu_calls: int
    comm_kernels: int
    gpu: GpuBreakdown | None
    top_kernels: tuple[KernelRow, ...]
    devices: tuple[str, ...]
    arrival: RankArrival | None = None  # the input of HTA's late-arrival method (.arrival)

    @property
    def mean_step_ms(self) -> float | None:
        """Mean step time, None without steps."""
        return sum(self.step_times_ms) / len(self.step_times_ms) if self.step_times_ms else None


def _split(window: Interval, busy: list[Interval], compute: list[Interval], comm: list[Interval]) -> TimeSplit:
    w = max(window[1] - window[0], 0.0)
    busy_us, compute_us, comm_us = length(busy), length(compute), length(comm)
    exposed = comm_us - overlap(comm, compute)
    other = max(busy_us - compute_us - exposed, 0.0)
    return TimeSplit(w, busy_us, compute_us, comm_us, exposed, other, max(w - busy_us, 0.0))


def _overlap(comm: list[Interval], compute: list[Interval], none: str) -> tuple[float | None, str]:
    comm_us = length(comm)
    if comm_us <= 0:
        return None, none if not comm else "collectives of zero length"
    return 100.0 * overlap(comm, compute) / comm_us, ""


def build_report(fold: RankFold, meta: TraceMeta, rank: int, rank_source: str) -> RankReport:
    """Reduce a folded trace to its :class:`RankReport`."""
    steps = find_steps(fold.profiler, fold.optimizer, fold.annotations)
    if fold.gpu:
        basis = "GPU"
        busy = merge((e.ts, e.ts + e.dur) for e in fold.gpu)
        kernels = [e for e in fold.gpu if e.cat in KERNEL_CATS]
        comm_mask = [is_comm_kernel(e.name) for e in kernels]
        comm = merge((e.ts, e.ts + e.dur) for e, c in zip(kernels, comm_mask, strict=True) if c)
        compute = merge((e.ts, e.ts + e.dur) for e, c in zip(kernels, comm_mask, strict=True) if not c)
        comm_kernels = sum(comm_mask)
        overlap_pct, note = _overlap(comm, compute, "no collective kernels on the GPU streams")
    else:
        basis = "CPU"
        compute = merge(fold.cpu_intervals())
        comm = merge(fold.comm_ops)
        busy = merge(compute + comm)
        comm_kernels = 0
        overlap_pct, note = _overlap(comm, compute, "no collective ops on the CPU threads")
    window = (busy[0][0], busy[-1][1]) if busy else (0.0, 0.0)
    split = _split(window, busy, compute, comm)
    per_step = None
    if steps.steps:
        s0, s1 = steps.steps[0].start_us, steps.steps[-1].start_us + steps.steps[-1].dur_us
        within = _split((s0, s1), clip(busy, s0, s1), clip(compute, s0, s1), clip(comm, s0, s1))
        per_step = within.scaled(1.0 / len(steps.steps))
    collectives = merge(fold.comm_ops)
    gpu = gpu_breakdown(fold.gpu) if fold.gpu else None
    return RankReport(
        rank=rank,
        rank_source=rank_source,
        path=meta.path,
        events=meta.events,
        size_bytes=meta.size_bytes,
        basis=basis,
        steps=steps,
        step_times_ms=tuple(d / 1000.0 for d in steps.durations_us),
        split=split,
        per_step=per_step,
        overlap_pct=overlap_pct,
        overlap_note=note,
        collective_cpu_us=length(collectives),
        collective_cpu_calls=fold.c10d_calls or _outermost_count(fold.comm_ops),
        comm_kernels=comm_kernels,
        gpu=gpu,
        top_kernels=tuple(kernel_rows(fold.gpu, gpu.busy_us if gpu else 0.0)[:TOP_KERNELS]),
        devices=tuple(str(d.get("name", "?")) for d in meta.device_properties),
        arrival=rank_arrival(fold),
    )


def _outermost_count(spans: list[Interval]) -> int:
    """Collective calls, counting a call nested in another (``record_param_comms`` around
    ``c10d::allreduce_`` around ``nccl:all_reduce``) once."""
    count, end = 0, float("-inf")
    for s, e in sorted(spans, key=lambda iv: (iv[0], -iv[1])):
        if s >= end:
            count += 1
            end = e
        elif e > end:
            end = e
    return count
