"""Timeline data: one lane per CPU thread or GPU stream, nested events in depth rows.

Pure data (no UI): the TUI's timeline widget draws from :class:`Timeline`,
and tests call it directly. Times are microseconds.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset", "gpu_user_annotation"})
SKIP_CATS = frozenset({"Trace", "fwdbwd", "ac2g", "async"})


@dataclass(frozen=True, slots=True)
class Span:
    """One drawn event: start, duration, name, category, nesting depth, index in the event list."""

    start_us: float
    dur_us: float
    name: str
    cat: str
    depth: int
    index: int

    @property
    def end_us(self) -> float:
        """Start plus duration."""
        return self.start_us + self.dur_us


@dataclass(slots=True)
class Row:
    """Spans of one depth of one lane, sorted by start; ``max_dur_us`` bounds look-back."""

    lane: int
    depth: int
    title: str
    gpu: bool
    spans: list[Span] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)
    max_dur_us: float = 0.0

    def visible(self, t0: float, t1: float) -> list[Span]:
        """Spans overlapping [t0, t1), in start order."""
        lo = bisect.bisect_left(self.starts, t0 - self.max_dur_us)
        hi = bisect.bisect_left(self.starts, t1)
        return [s for s in self.spans[lo:hi] if s.end_us > t0 or s.start_us >= t0]

    def index_at(self, t: float) -> int | None:
        """The span covering ``t``, else the nearest one starting after it, else the last."""
        if not self.spans:
            return None
        i = bisect.bisect_right(self.starts, t) - 1
        if i >= 0 and self.spans[i].end_us >= t:
            return i
        return min(i + 1, len(self.spans) - 1)


@dataclass(slots=True)
class Timeline:
    """Rows (lane x depth) of a trace and its overall time range."""

    rows: list[Row]
    start_us: float
    end_us: float
    events: list[Any]  # the loaded events (their args feed the detail view)

    def details(self, span: Span) -> dict[str, Any]:
        """Name, category, start (from trace start), duration and args of ``span``."""
        ev = self.events[span.index]
        args = getattr(ev, "args", None)
        return {
            "name": span.name,
            "category": span.cat,
            "start_us": span.start_us - self.start_us,
            "dur_us": span.dur_us,
            "args": dict(args) if isinstance(args, dict) else {},
        }


def build_timeline(events: list[Any], *, max_depth: int = 6) -> Timeline:
    """Group complete (``X``) events into lanes (CPU threads first, then GPU streams).

    Nested CPU events go one row deeper than their parent, up to ``max_depth``
    rows per lane (deeper ones are folded into the last row).
    """
    lanes: dict[tuple[Any, Any], list[tuple[float, float, str, str, int]]] = {}
    pnames: dict[Any, str] = {}
    tnames: dict[tuple[Any, Any], str] = {}
    lo, hi = float("inf"), float("-inf")
    for i, ev in enumerate(events):
        if ev.ph == "M":
            args = ev.args if isinstance(ev.args, dict) else {}
            if ev.name == "process_name":
                pnames[ev.pid] = str(args.get("name", ""))
            elif ev.name == "thread_name":
                tnames[(ev.pid, ev.tid)] = str(args.get("name", ""))
            continue
        if ev.ph != "X" or ev.cat in SKIP_CATS:
            continue
        lanes.setdefault((ev.pid, ev.tid), []).append((ev.ts, ev.dur, ev.name, ev.cat, i))
        lo = min(lo, ev.ts)
        hi = max(hi, ev.ts + ev.dur)
    keys = sorted(lanes, key=lambda k: (lanes[k][0][3] in GPU_CATS, str(k[0]), str(k[1])))
    rows: list[Row] = []
    for lane_no, key in enumerate(keys):
        items = sorted(lanes[key], key=lambda e: (e[0], -e[1]))
        gpu = items[0][3] in GPU_CATS
        pid, tid = key
        title = f"GPU {pid} stream {tid}" if gpu else _cpu_title(pid, tid, tnames.get(key))
        by_depth: dict[int, list[Span]] = {}
        stack: list[float] = []
        for ts, dur, name, cat, idx in items:
            end = ts + dur
            while stack and (ts >= stack[-1] or end > stack[-1]):
                stack.pop()
            depth = min(len(stack), max_depth - 1)
            stack.append(end)
            by_depth.setdefault(depth, []).append(Span(ts, dur, name, cat, depth, idx))
        for depth in sorted(by_depth):
            spans = by_depth[depth]
            rows.append(Row(lane_no, depth, title if depth == 0 else "", gpu, spans,
                            [s.start_us for s in spans], max(s.dur_us for s in spans)))
    if lo > hi:
        lo = hi = 0.0
    return Timeline(rows, lo, hi, events)


def _cpu_title(pid: Any, tid: Any, tname: str | None) -> str:
    """Short lane title: Kineto's "thread N (pt_main_thread)" becomes "pt_main_thread [pid]"."""
    short = f"tid {tid}"
    if tname:
        inner = tname[tname.find("(") + 1 : tname.rfind(")")] if "(" in tname and tname.endswith(")") else tname
        short = inner or short
    return f"{short} [{pid}]"


def paint_row(row: Row, t0: float, t1: float, width: int) -> list[Span | None]:
    """Which span each of ``width`` columns shows (the longest one touching the column)."""
    cells: list[Span | None] = [None] * width
    if width <= 0 or t1 <= t0:
        return cells
    scale = width / (t1 - t0)
    for span in row.visible(t0, t1):
        c0 = max(int((span.start_us - t0) * scale), 0)
        c1 = min(max(int((span.end_us - t0) * scale), c0 + 1), width)
        for c in range(c0, c1):
            cur = cells[c]
            if cur is None or span.dur_us > cur.dur_us:
                cells[c] = span
    return cells
