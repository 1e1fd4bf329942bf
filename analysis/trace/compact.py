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

CPU_CATS = frozenset(
    {"cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "Operator", "Runtime", "Driver", ""}
)
RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver", "Runtime", "Driver"})
GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"})

# One CPU event: (ts_us, -dur_us, name, correlation). The negated duration
# makes plain tuple order (start, then longest first) the nesting order, so
# sorting needs no key function. correlation is None for ops and
# annotations, an int (-1 when absent) for runtime/driver calls.
CpuEvent = tuple[float, float, str, "int | None"]


@dataclass(slots=True)
class CompactTrace:
    """Everything analysis needs from a trace, without per-event objects for CPU ops."""

    meta: TraceMeta | None = None
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
        cpu_cats, runtime_cats, gpu_cats = CPU_CATS, RUNTIME_CATS, GPU_CATS
        for item in batch:
            ev: RawEvent | None = item
            ph = item.ph
            if ph != "X":
                if ph not in ("B", "E"):
                    self._other(item)
                    continue
                ev = self._pair(item)  # a closed B/E span becomes an X event
                if ev is None:
                    continue
            assert ev is not None
            cat = ev.cat
            if cat in cpu_cats:
                name = ev.name
                name = names.setdefault(name, name)
                corr = None
                if cat in runtime_cats:
                    full = with_args(ev)
                    c = full.args.correlation if full.args is not None else None
                    corr = c if isinstance(c, int) and not isinstance(c, bool) else -1
                cpu[(ev.pid, ev.tid)].append((ev.ts, -ev.dur, name, corr))
            elif cat in gpu_cats:
                self.gpu.append(with_args(ev))

    def _pair(self, ev: RawEvent) -> RawEvent | None:
        key = (ev.pid, ev.tid)
        if ev.ph == "B":
            self._open[key].append(ev)
            return None
        stack = self._open.get(key)
        if not stack:
            return None
        b = stack.pop()
        return RawEvent("X", b.cat, b.name, b.pid, b.tid, b.ts, max(ev.ts - b.ts, 0.0), b.args)

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


def load_compact(
    path: str | Path,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    limits: InputLimits | None = None,
    progress: Progress | None = None,
) -> CompactTrace:
    """Read a trace file into a CompactTrace (``limits`` as for :func:`~.load.stream_events`).

    Raises:
        TraceFileError: missing, over a limit, truncated, not JSON, or not a trace.
    """
    out = CompactTrace()
    sink: Callable[[list[Any]], None] = out.add_batch
    out.meta = stream_events(path, sink, max_bytes=max_bytes, limits=limits, progress=progress)
    out._names.clear()
    out._open.clear()
    return out
