"""Fold one rank's trace, batch by batch as it decodes, into what the rank report needs.

Kept per rank: the GPU activity records (kernels, copies, sets; a tenth of
a typical trace's events), the step markers, the CPU collective calls and
the CPU op intervals (only used when the trace has no GPU activity), and,
for HTA's late-arrival method (:mod:`.arrival`), the start and end of every
other CPU-side complete event (16 bytes each) and the correlation id and
start of each launch (runtime/driver call); the raw file and every other
event are dropped as decoding moves on.
"""

from __future__ import annotations

import functools
import re
from array import array
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import msgspec

from gpulens.analysis.trace.compact import pair_begin_end
from gpulens.analysis.trace.events import Event, RawEvent, with_args
from gpulens.analysis.trace.intervals import Interval
from gpulens.analysis.trace.steps import OPTIMIZER_PREFIX, PROFILER_PREFIX, Span

GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"})
KERNEL_CATS = frozenset({"kernel", "Kernel"})
OP_CATS = frozenset({"cpu_op", "Operator"})

COMM_KERNEL = re.compile(r"nccl|rccl|gloo|c10d", re.IGNORECASE)
"""GPU kernels that are collectives (``ncclKernel_*``, ``ncclDevKernel_*``, RCCL)."""
COMM_OP = re.compile(
    r"^(nccl|rccl|gloo|mpi|ucc):|^_?c10d(_functional)?::|^record_param_comms$|wait_tensor", re.IGNORECASE
)
"""CPU ops of collectives: ``nccl:all_reduce``, ``gloo:broadcast``, ``c10d::allreduce_``,
``record_param_comms``, ``_c10d_functional::wait_tensor``."""


C10D_PREFIXES = ("c10d::", "_c10d_functional::")
NOT_ROWS = frozenset({"Trace", "gpu_user_annotation"})
"""Complete events HTA's late-arrival method does not count as CPU rows (Kineto's own span; GPU-side
annotations, which carry no correlation id and so get no iteration in HTA)."""


def is_launch_cat(cat: str) -> bool:
    """True for the categories of launch calls, which carry the kernel's correlation id."""
    return "runtime" in cat or "driver" in cat or cat in ("Runtime", "Driver")


class _Link(msgspec.Struct, gc=False):
    correlation: object = None


_LINK = msgspec.json.Decoder(_Link)  # only the one field: msgspec skips the rest without building them


@functools.lru_cache(maxsize=8192)
def is_comm_kernel(name: str) -> bool:
    """True for a collective's GPU kernel (cached: kernel names are long and repeat)."""
    return COMM_KERNEL.search(name) is not None


def is_comm_op(name: str) -> bool:
    """True for a CPU op that runs or waits on a collective."""
    return COMM_OP.search(name) is not None


@dataclass(slots=True)
class RankFold:
    """What one rank's trace reduces to while it decodes (the sink of ``stream_events``)."""

    gpu: list[Event] = field(default_factory=list)
    profiler: list[Span] = field(default_factory=list)
    optimizer: list[Span] = field(default_factory=list)
    annotations: list[Span] = field(default_factory=list)
    comm_ops: list[Interval] = field(default_factory=list)
    cpu_starts: array[float] = field(default_factory=lambda: array("d"))  # non-collective CPU ops, 16 B each
    cpu_ends: array[float] = field(default_factory=lambda: array("d"))
    row_starts: array[float] = field(default_factory=lambda: array("d"))  # other CPU-side events
    row_ends: array[float] = field(default_factory=lambda: array("d"))
    launch_corr: array[int] = field(default_factory=lambda: array("q"))  # launch calls: correlation id, start
    launch_ts: array[float] = field(default_factory=lambda: array("d"))
    c10d_calls: int = 0  # c10d:: ops: one per collective a rank issues, whatever the backend
    cats: Counter[str] = field(default_factory=Counter)  # events of every other category
    _open: dict[tuple[Any, Any], list[RawEvent]] = field(default_factory=lambda: defaultdict(list))
    _comm_names: dict[str, bool] = field(default_factory=dict)
    _launch_cats: dict[str, bool] = field(default_factory=dict)

    def add_batch(self, batch: list[RawEvent]) -> None:
        """Fold one decoded batch in."""
        other = self.cats
        gpu_cats, op_cats = GPU_CATS, OP_CATS
        gpu_append = self.gpu.append
        add_op, add_annotation, add_row = self._add_op, self._add_annotation, self._add_row
        for item in batch:
            ev: RawEvent | None = item
            if item.ph != "X":
                if item.ph not in ("B", "E"):
                    other[item.cat or item.ph] += 1
                    continue
                ev = self._pair(item)
                if ev is None:
                    continue
            assert ev is not None
            cat = ev.cat
            if cat in gpu_cats:
                gpu_append(with_args(ev))
            elif cat in op_cats:
                add_op(ev)
            elif cat == "user_annotation":
                add_annotation(ev)
            else:
                add_row(ev, cat)

    def _add_op(self, ev: RawEvent) -> None:
        """A CPU op: a step marker, a collective call, or work (an optimizer step is work too)."""
        name = ev.name
        ts = ev.ts
        if name[:1] in "PO":
            if name.startswith(PROFILER_PREFIX):
                self.profiler.append((name, ts, ev.dur))
                return  # a step marker is not work
            if name.startswith(OPTIMIZER_PREFIX):
                self.optimizer.append((name, ts, ev.dur))
        end = ts + ev.dur
        comm = self._comm_names.get(name)
        if comm is None:
            comm = self._comm_names[name] = is_comm_op(name)
        if comm:
            self.comm_ops.append((ts, end))
            if name.startswith(C10D_PREFIXES):
                self.c10d_calls += 1
        else:
            self.cpu_starts.append(ts)
            self.cpu_ends.append(end)

    def _add_annotation(self, ev: RawEvent) -> None:
        """A ``user_annotation``: a step marker, an optimizer step, a collective, or a plain annotation."""
        name = ev.name
        span = (name, ev.ts, ev.dur)
        if name.startswith(PROFILER_PREFIX):
            self.profiler.append(span)
        elif name.startswith(OPTIMIZER_PREFIX):
            self.optimizer.append(span)
        elif is_comm_op(name):  # gloo:all_reduce and friends, on gloo's own threads
            self.comm_ops.append((ev.ts, ev.ts + ev.dur))
        else:
            self.annotations.append(span)

    def _add_row(self, ev: RawEvent, cat: str) -> None:
        """Any other complete event: counted by category, kept as a CPU row, its correlation id kept when a launch."""
        self.cats[cat] += 1
        if cat in NOT_ROWS:
            return
        ts = ev.ts
        self.row_starts.append(ts)
        self.row_ends.append(ts + ev.dur)
        launch = self._launch_cats.get(cat)
        if launch is None:
            launch = self._launch_cats[cat] = is_launch_cat(cat)
        if launch and len(ev.args):
            self._launch(ev)

    def _launch(self, ev: RawEvent) -> None:
        try:
            corr = _LINK.decode(ev.args).correlation
        except ValueError:  # msgspec's errors derive from it: malformed args are no link
            return
        if isinstance(corr, int) and not isinstance(corr, bool) and 0 <= corr < 2**63:
            self.launch_corr.append(corr)
            self.launch_ts.append(ev.ts)

    def cpu_intervals(self) -> list[Interval]:
        """Every CPU op that is not a collective, as ``(start_us, end_us)``."""
        return list(zip(self.cpu_starts, self.cpu_ends, strict=True))

    def _pair(self, ev: RawEvent) -> RawEvent | None:
        return pair_begin_end(self._open, ev)
