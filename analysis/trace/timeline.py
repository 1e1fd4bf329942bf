"""Timeline data: one lane per CPU thread or GPU stream (per rank), nested events in depth rows.

Pure data (no UI): the TUI's timeline widget draws from :class:`Timeline`,
and tests call it directly. Times are microseconds.

- Lanes are titled by thread name and tid (``pt_main_thread 1102``; GPU
  streams ``GPU 0 stream 7``); no two lanes share a title (the pid, then a
  counter, is added where they would).
- Several ranks (:func:`build_rank_timeline`) are lanes of one timeline,
  titled ``rank N / thread name tid``, on one time axis.
- :func:`fold_rows` folds each lane's rows past a depth into one row that
  says how many deeper rows it holds; :func:`clamp_view` keeps a view inside
  the trace; :func:`axis_unit` and :func:`ticks` give one unit per axis.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset", "gpu_user_annotation"})
SKIP_CATS = frozenset({"Trace", "fwdbwd", "ac2g", "async"})
MAX_DEPTH = 64
"""Rows kept per lane; deeper events share the last row (which counts them in ``folded``)."""


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
    """Spans of one depth of one lane, sorted by start; ``max_dur_us`` bounds look-back.

    ``folded``: how many deeper rows this row also holds (0 for a plain row).
    """

    lane: int
    depth: int
    title: str
    gpu: bool
    spans: list[Span] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)
    max_dur_us: float = 0.0
    folded: int = 0

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


def _row(lane: int, depth: int, title: str, gpu: bool, spans: list[Span], folded: int = 0) -> Row:
    spans.sort(key=lambda s: (s.start_us, -s.dur_us))
    return Row(lane, depth, title, gpu, spans, [s.start_us for s in spans],
               max((s.dur_us for s in spans), default=0.0), folded)


@dataclass(slots=True)
class Timeline:
    """Rows (lane x depth) of a trace (or of several ranks) and its overall time range.

    ``lanes``: each lane's title, by lane number. ``note``: something the view
    must say (e.g. ranks aligned to their own starts).
    """

    rows: list[Row]
    start_us: float
    end_us: float
    events: list[Any]  # the loaded events (their args feed the detail view)
    lanes: list[str] = field(default_factory=list)
    note: str = ""

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


@dataclass(slots=True)
class _Lane:
    key: tuple[Any, Any]
    gpu: bool
    title: str
    items: list[tuple[float, float, str, str, int]]


def _lanes(events: Sequence[Any], offset: int, shift_us: float = 0.0) -> tuple[list[_Lane], float, float]:
    """The lanes of one trace's events (indices shifted by ``offset``), CPU threads first."""
    by_key: dict[tuple[Any, Any], list[tuple[float, float, str, str, int]]] = {}
    tnames: dict[tuple[Any, Any], str] = {}
    gpu_pids: set[Any] = set()
    lo, hi = math.inf, -math.inf
    for i, ev in enumerate(events):
        if ev.ph == "M":
            args = ev.args if isinstance(ev.args, dict) else {}
            if ev.name == "thread_name":
                tnames[(ev.pid, ev.tid)] = str(args.get("name", "")).strip()
            elif ev.name == "process_labels" and str(args.get("labels", "")).startswith("GPU"):
                gpu_pids.add(ev.pid)
            continue
        if ev.ph != "X" or ev.cat in SKIP_CATS:
            continue
        ts = ev.ts - shift_us
        by_key.setdefault((ev.pid, ev.tid), []).append((ts, ev.dur, ev.name, ev.cat, i + offset))
        lo = min(lo, ts)
        hi = max(hi, ts + ev.dur)
    lanes = []
    for key, items in by_key.items():
        gpu = items[0][3] in GPU_CATS or key[0] in gpu_pids
        lanes.append(_Lane(key, gpu, lane_title(key[0], key[1], tnames.get(key), gpu), items))
    lanes.sort(key=lambda ln: (ln.gpu, _num(ln.key[0]), _num(ln.key[1])))
    cpu_pids = {ln.key[0] for ln in lanes if not ln.gpu}
    _unique(lanes, len(cpu_pids) > 1)
    return lanes, lo, hi


def _num(v: object) -> tuple[int, str]:
    """Sort numbers as numbers and anything else after them, as text."""
    return (0, f"{int(v):020d}") if isinstance(v, int) and v >= 0 else (1, str(v))


def lane_title(pid: object, tid: object, tname: str | None, gpu: bool) -> str:
    """Thread name and tid: Kineto's "thread 1102 (pt_main_thread)" becomes "pt_main_thread 1102".

    GPU lanes are "GPU <device> stream <n>" (or the device's own lane name and id).
    """
    name = tname or ""
    if "(" in name and name.endswith(")"):
        name = name[name.find("(") + 1 : -1].strip()
    if gpu:
        name = name or f"stream {tid}"
        words = name.split()
        base = name if words and words[-1] == str(tid) else f"{name} {tid}"
        return f"GPU {pid} {base}"
    return f"{name or 'thread'} {tid}"


def _unique(lanes: list[_Lane], several_processes: bool) -> None:
    """Make titles unique: add the pid where several processes share a title, then a counter."""
    counts = Counter(ln.title for ln in lanes)
    for ln in lanes:
        if counts[ln.title] > 1 or (several_processes and not ln.gpu):
            ln.title = f"{ln.title} [{ln.key[0]}]"
    seen: Counter[str] = Counter()
    counts = Counter(ln.title for ln in lanes)
    for ln in lanes:
        if counts[ln.title] > 1:
            seen[ln.title] += 1
            ln.title = f"{ln.title} #{seen[ln.title]}"


def _depth_rows(lane_no: int, lane: _Lane, max_depth: int) -> list[Row]:
    """The lane's events nested into depth rows (deeper than ``max_depth`` share the last row)."""
    items = sorted(lane.items, key=lambda e: (e[0], -e[1]))
    by_depth: dict[int, list[Span]] = {}
    deepest = 0
    stack: list[float] = []
    for ts, dur, name, cat, idx in items:
        end = ts + dur
        while stack and (ts >= stack[-1] or end > stack[-1]):
            stack.pop()
        deepest = max(deepest, len(stack))
        depth = min(len(stack), max_depth - 1)
        stack.append(end)
        by_depth.setdefault(depth, []).append(Span(ts, dur, name, cat, depth, idx))
    last = max(by_depth, default=0)
    return [_row(lane_no, d, lane.title if d == 0 else "", lane.gpu, by_depth[d],
                 deepest - last if d == last and deepest > last else 0) for d in sorted(by_depth)]


def build_timeline(events: list[Any], *, max_depth: int = MAX_DEPTH) -> Timeline:
    """Group complete (``X``) events into lanes (CPU threads first, then GPU streams).

    Nested CPU events go one row deeper than their parent, up to ``max_depth``
    rows per lane (deeper ones share the last row, whose ``folded`` counts them).
    """
    lanes, lo, hi = _lanes(events, 0)
    rows = [r for no, lane in enumerate(lanes) for r in _depth_rows(no, lane, max_depth)]
    if lo > hi:
        lo = hi = 0.0
    return Timeline(rows, lo, hi, events, [ln.title for ln in lanes])


def build_rank_timeline(ranks: Sequence[tuple[str, list[Any]]], *, max_depth: int = MAX_DEPTH) -> Timeline:
    """Several ranks' traces as lanes of one timeline: ``(label, events)`` each, label like ``rank 1``.

    Ranks are drawn on their common clock (traces started together line up).
    When no two ranks' windows overlap (clocks far apart), each rank is
    drawn from its own start instead, and ``note`` says so.
    """
    windows = [_window(events) for _label, events in ranks]
    present = [w for w in windows if w[0] <= w[1]]
    overlap = len(present) < 2 or max(w[0] for w in present) < min(w[1] for w in present)
    note = "" if overlap else "the ranks' windows do not overlap: each rank is drawn from its own start"
    all_events: list[Any] = []
    rows: list[Row] = []
    titles: list[str] = []
    lo_all, hi_all = math.inf, -math.inf
    for (label, events), (lo, _hi) in zip(ranks, windows, strict=True):
        shift = 0.0 if overlap or lo > _hi else lo
        lanes, lo2, hi2 = _lanes(events, len(all_events), shift)
        all_events.extend(events)
        lo_all, hi_all = min(lo_all, lo2), max(hi_all, hi2)
        for lane in lanes:
            lane.title = f"{label} / {lane.title}"
            rows.extend(_depth_rows(len(titles), lane, max_depth))
            titles.append(lane.title)
    if lo_all > hi_all:
        lo_all = hi_all = 0.0
    return Timeline(rows, lo_all, hi_all, all_events, titles, note)


def _window(events: Sequence[Any]) -> tuple[float, float]:
    """First start and last end of the drawn events (inf, -inf when there are none)."""
    lo, hi = math.inf, -math.inf
    for ev in events:
        if ev.ph == "X" and ev.cat not in SKIP_CATS:
            lo, hi = min(lo, ev.ts), max(hi, ev.ts + ev.dur)
    return lo, hi


def fold_rows(rows: list[Row], keep: int) -> list[Row]:
    """Each lane's first ``keep`` rows; the rest of a lane share its ``keep``-th row (``folded`` > 0).

    ``keep`` <= 0 keeps every row.
    """
    if keep <= 0:
        return rows
    out: list[Row] = []
    i = 0
    while i < len(rows):
        j = i
        while j < len(rows) and rows[j].lane == rows[i].lane:
            j += 1
        lane = rows[i:j]
        if len(lane) <= keep:
            out.extend(lane)
        else:
            out.extend(lane[: keep - 1])
            rest = lane[keep - 1 :]
            merged = [s for r in rest for s in r.spans]
            hidden = len(rest) - 1 + sum(r.folded for r in rest)
            out.append(_row(rest[0].lane, rest[0].depth, rest[0].title, rest[0].gpu, merged, hidden))
        i = j
    return out


def clamp_view(t0: float, t1: float, start_us: float, end_us: float, min_width_us: float = 1.0) -> tuple[float, float]:
    """``[t0, t1]`` moved (and narrowed) so it lies inside ``[start_us, end_us]``; at least ``min_width_us`` wide."""
    full = max(end_us - start_us, min_width_us)
    width = min(max(t1 - t0, min_width_us), full)
    t0 = min(max(t0, start_us), start_us + full - width)
    return t0, t0 + width


UNITS = (("s", 1e6), ("ms", 1e3), ("us", 1.0))


def axis_unit(span_us: float) -> tuple[str, float]:
    """The one unit an axis of ``span_us`` uses (s from 2 s, ms from 2 ms, else us) and its size in us."""
    for name, size in UNITS:
        if span_us >= 2 * size:
            return name, size
    return "us", 1.0


def ticks(t0: float, t1: float, origin_us: float, width: int, min_gap: int = 10) -> tuple[str, list[tuple[int, str]]]:
    """Tick marks for a ``width``-column axis over ``[t0, t1]``: the unit and ``(column, label)`` pairs.

    Labels are times since ``origin_us`` in the axis's one unit, on a 1-2-5
    step, at least ``min_gap`` columns apart.
    """
    unit, size = axis_unit(t1 - t0)
    if width <= 0 or t1 <= t0:
        return unit, []
    most = max(1, width // max(min_gap, 1))
    raw = (t1 - t0) / size / most
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    step = next((m * mag for m in (1, 2, 5, 10) if m * mag >= raw), 10 * mag)
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    first = math.ceil((t0 - origin_us) / size / step - 1e-9) * step
    out: list[tuple[int, str]] = []
    v = first
    while (origin_us + v * size) <= t1 + 1e-9 and len(out) <= most + 1:
        col = round((origin_us + v * size - t0) * width / (t1 - t0))
        if 0 <= col < width:
            out.append((col, f"{v:.{decimals}f}"))
        v += step
    return unit, out


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
