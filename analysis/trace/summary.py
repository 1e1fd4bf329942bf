"""The result of analysing a trace: plain frozen records, one per process/rank.

Times are microseconds (``_us``), sizes bytes, bandwidth GB/s (10^9 B/s).
``to_dict`` gives the JSON form printed by ``gpulens analyze --json``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class OpRow:
    """One row of torch's key_averages table: totals over all calls of ``name``.

    torch keys a row by name and whether it is a user annotation (``record_function``,
    ``ProfilerStep*``), so an annotation and an op of one name are two rows; grouped by
    input shape, also by ``input_shapes`` (torch's ``str(input_shapes)``, else "").
    """

    name: str
    calls: int
    self_cpu_us: float
    cpu_total_us: float
    self_cuda_us: float = 0.0
    user_annotation: bool = False
    input_shapes: str = ""


@dataclass(frozen=True, slots=True)
class KernelRow:
    """GPU kernels of one name: calls, total and mean duration, share of GPU busy time."""

    name: str
    calls: int
    total_us: float
    mean_us: float
    pct_of_busy: float


@dataclass(frozen=True, slots=True)
class MemcpyRow:
    """Copies (or sets) of one kind, e.g. HtoD; ``gbps`` None when no byte counts."""

    kind: str
    count: int
    total_bytes: int
    total_us: float
    gbps: float | None


@dataclass(frozen=True, slots=True)
class Step:
    """A ProfilerStep#N span on the CPU."""

    name: str
    start_us: float
    dur_us: float


@dataclass(frozen=True, slots=True)
class GpuBreakdown:
    """Where GPU time went within the GPU window (first to last GPU activity).

    Each part is the union of its intervals over all streams of a device,
    summed over devices; ``window_us`` is summed the same way.
    """

    devices: int
    window_us: float
    busy_us: float
    compute_us: float
    comm_us: float
    memcpy_us: float

    def pct(self, part_us: float) -> float:
        """Share of the window in percent."""
        return 100.0 * part_us / self.window_us if self.window_us > 0 else 0.0

    @property
    def idle_us(self) -> float:
        """Window time with no kernel, copy or set running."""
        return max(self.window_us - self.busy_us, 0.0)


@dataclass(frozen=True, slots=True)
class LaunchStats:
    """Kernel-launch API calls on the CPU and how long kernels waited after them."""

    count: int
    total_cpu_us: float
    mean_cpu_us: float
    mean_delay_us: float | None
    max_delay_us: float | None


@dataclass(frozen=True, slots=True)
class MemoryPeak:
    """Peak memory per device from ``[memory]`` events.

    ``relative`` is True when the trace has no totals (older Kineto): the
    peak is then the running sum of allocations since the trace began.
    """

    device: str
    peak_allocated_bytes: int
    peak_reserved_bytes: int | None
    relative: bool


@dataclass(frozen=True, slots=True)
class ProcessSummary:
    """Everything ``gpulens analyze`` reports for one process (rank)."""

    pid: int | str
    name: str
    rank: int | None
    threads: int
    window_start_us: float
    window_us: float
    steps: tuple[Step, ...]
    cpu_ops: tuple[OpRow, ...]
    self_cpu_total_us: float
    gpu: GpuBreakdown | None
    kernels: tuple[KernelRow, ...]
    memcpy: tuple[MemcpyRow, ...]
    launch: LaunchStats | None
    memory: tuple[MemoryPeak, ...]
    findings: tuple[str, ...]

    @property
    def steps_note(self) -> str:
        """'no step markers' or a one-line step summary."""
        if not self.steps:
            return "no step markers"
        durs = [s.dur_us for s in self.steps]
        where = "" if self.steps[0].name.startswith("ProfilerStep") else " between Optimizer.step calls"
        return f"{len(durs)} steps{where}, mean {sum(durs) / len(durs) / 1000:.2f} ms"


@dataclass(frozen=True, slots=True)
class TraceSummary:
    """A whole trace file's analysis."""

    path: str
    size_bytes: int
    events: int
    devices: tuple[str, ...]
    processes: tuple[ProcessSummary, ...]


def to_dict(summary: TraceSummary) -> dict[str, Any]:
    """JSON-ready form; adds derived fields (percentages, idle, steps note)."""
    out = asdict(summary)
    for proc, pdict in zip(summary.processes, out["processes"], strict=True):
        pdict["steps_note"] = proc.steps_note
        if proc.gpu is not None:
            g = proc.gpu
            pdict["gpu"].update(
                idle_us=g.idle_us,
                busy_pct=g.pct(g.busy_us),
                idle_pct=g.pct(g.idle_us),
                compute_pct=g.pct(g.compute_us),
                comm_pct=g.pct(g.comm_us),
                memcpy_pct=g.pct(g.memcpy_us),
            )
    return out
