"""A compact, analysis-ready form of a trace, built batch by batch while decoding.

CPU events are kept as small tuples per (pid, tid) with interned names;
GPU, memory and metadata events (far fewer in practice) keep their typed
records. Peak memory is the raw file plus these compact lists.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpulens.analysis.trace.events import Event, RawEvent, with_args
from gpulens.analysis.trace.load import DEFAULT_MAX_BYTES, Progress, TraceMeta, stream_events
from gpulens.core.limits import InputLimits

RUNTIME_CATS = frozenset({
    "cuda_runtime", "cuda_driver", "xpu_runtime", "privateuse1_runtime", "privateuse1_driver", "mtia_runtime",
    "Runtime", "Driver",
})
# The categories of the events torch turns into CPU FunctionEvents (device type CPU in
# torch/csrc/profiler/kineto_shim.cpp deviceTypeFromActivity), plus the old Kineto names
# and "" (Chrome traces from other tools). GPU-side kinds (kernels, copies, cuda_sync,
# gpu_user_annotation) are device events there, with no CPU time.
CPU_CATS = frozenset({"cpu_op", "user_annotation", "python_function", "overhead", "Operator", "", *RUNTIME_CATS})
ANNOTATION_CATS = frozenset({"user_annotation"})
GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"})

# One CPU event: (ts_us, -dur_us, name, correlation). The negated duration
# makes plain tuple order (start, then longest first) the nesting order, so
# sorting needs no key function. correlation is None for ops and Python
# functions, ANNOTATION (-2) for user annotations (record_function,
# ProfilerStep#N), and an int >= -1 (-1 when absent) for runtime/driver calls.
CpuEvent = tuple[float, float, str, "int | None"]
ANNOTATION = -2
SHAPES_SEP = "\x1f"
"""With ``group_by_input_shape``, a cpu_op's name is ``name + SHAPES_SEP + str(Input Dims)``."""
SHAPED_CATS = frozenset({"cpu_op", "Operator"})


@dataclass(slots=True)
class CompactTrace:
    """Everything analysis needs from a trace, without per-event objects for CPU ops."""

    meta: TraceMeta | None = None
    group_by_input_shape: bool = False
    cpu: dict[tuple[Any, Any], list[CpuEvent]] = field(default_factory=lambda: defaultdict(list))
    gpu: list[Event] = field(default_factory=list)
    memory: list[Event] = field(default_factory=list)
    process_names: dict[Any, str] = field(default_factory=dict)
    thread_names: dict[tuple[Any, Any], str] = field(default_factory=dict)
    _names: dict[str, str] = field(default_factory=dict)
    _open: dict[tuple[Any, Any], list[RawEvent]] = field(default_factory=lambda: defaultdict(list))

    def add_batch(self, batch: list[RawEvent]) -> None:
        """Fold one decoded batch in (the sink of :func:`stream_events`)."""
        cpu = self.cpu
        names = self._names
        cpu_cats, runtime_cats, gpu_cats, ann_cats = CPU_CATS, RUNTIME_CATS, GPU_CATS, ANNOTATION_CATS
        shaped = self.group_by_input_shape
        last_pid: Any = None
        last_tid: Any = None
        dest: list[CpuEvent] = []
        for item in batch:
            ev: RawEvent | None = item
            if item.ph != "X":
                if item.ph not in ("B", "E"):
                    self._other(item)
                    continue
                ev = self._pair(item)  # a closed B/E span becomes an X event
                if ev is None:
                    continue
            assert ev is not None
            cat = ev.cat
            if cat in cpu_cats:
                name = ev.name
                if shaped and cat in SHAPED_CATS:
                    name = _with_shapes(ev)
                name = names.setdefault(name, name)
                corr: int | None = None
                if cat in ann_cats:
                    corr = ANNOTATION
                elif cat in runtime_cats:
                    full = with_args(ev)
                    c = full.args.correlation if full.args is not None else None
                    corr = c if isinstance(c, int) and not isinstance(c, bool) and c >= 0 else -1
                if ev.tid != last_tid or ev.pid != last_pid:  # runs of one thread: skip the dict
                    last_pid, last_tid = ev.pid, ev.tid
                    dest = cpu[(last_pid, last_tid)]
                dest.append((ev.ts, -ev.dur, name, corr))
            elif cat in gpu_cats:
                self.gpu.append(with_args(ev))

    def _pair(self, ev: RawEvent) -> RawEvent | None:
        return pair_begin_end(self._open, ev)

    def _other(self, raw: RawEvent) -> None:
        if raw.ph in ("i", "I") and raw.name == "[memory]":
            self.memory.append(with_args(raw))
        elif raw.ph == "M" and raw.name in ("process_name", "thread_name"):
            ev = with_args(raw)
            if ev.args is None or ev.args.name is None:
                return
            if ev.name == "process_name":
                self.process_names[ev.pid] = str(ev.args.name)
            else:
                self.thread_names[(ev.pid, ev.tid)] = str(ev.args.name)


def _with_shapes(ev: RawEvent) -> str:
    """``name`` plus torch's shapes key (``str(input_shapes)``; ``[]`` when none were recorded).

    The trace writes a tensor list's shapes as a list of lists; torch's in-memory
    ``input_shapes`` (what key_averages groups by) has ``[]`` there.
    """
    full = with_args(ev)
    dims = full.args.input_dims if full.args is not None else None
    if not isinstance(dims, list):
        return f"{ev.name}{SHAPES_SEP}[]"
    flat = [[] if isinstance(d, list) and d and isinstance(d[0], list) else d for d in dims]
    return f"{ev.name}{SHAPES_SEP}{flat}"


def load_compact(
    path: str | Path,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    limits: InputLimits | None = None,
    progress: Progress | None = None,
    group_by_input_shape: bool = False,
) -> CompactTrace:
    """Read a trace file into a CompactTrace (``limits`` as for :func:`~.load.stream_events`).

    ``group_by_input_shape`` keys ops by their recorded input shapes too, as torch's
    ``key_averages(group_by_input_shape=True)``: each cpu_op's name then carries its shapes
    after :data:`SHAPES_SEP`.

    Raises:
        TraceFileError: missing, over a limit, truncated, not JSON, or not a trace.
    """
    out = CompactTrace(group_by_input_shape=group_by_input_shape)
    sink: Callable[[list[Any]], None] = out.add_batch
    out.meta = stream_events(path, sink, max_bytes=max_bytes, limits=limits, progress=progress)
    out._names.clear()
    out._open.clear()
    return out


def pair_begin_end(open_events: dict[tuple[Any, Any], list[RawEvent]], ev: RawEvent) -> RawEvent | None:
    """A ``B`` event is kept open per (pid, tid); its ``E`` closes it into one ``X`` event (else None)."""
    key = (ev.pid, ev.tid)
    if ev.ph == "B":
        open_events[key].append(ev)
        return None
    stack = open_events.get(key)
    if not stack:
        return None
    b = stack.pop()
    return RawEvent("X", b.cat, b.name, b.pid, b.tid, b.ts, max(ev.ts - b.ts, 0.0), b.args)
