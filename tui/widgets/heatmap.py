"""Per-GPU heatmap: one row per host/GPU, one column per time bucket, legend on top."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, cast

from rich.color import Color
from rich.segment import Segment
from rich.style import Style
from textual.binding import BindingType
from textual.geometry import Size
from textual.strip import Strip

from gpulens.store.store import Store
from gpulens.store.views import HOST_METRICS
from gpulens.tui.widgets._braille import time_axis
from gpulens.tui.widgets._columns import ColumnCache, nice_columns, span_text
from gpulens.tui.widgets._cursor_lines import CursorLines
from gpulens.tui.widgets._keys import cursor_bindings
from gpulens.tui.widgets.heat_holder import HOLDER_CELLS, fit, holders

GLYPHS = "▁░▒▓█"
"""One per level, low to high: a 0 % cell is ``▁``, never blank (blank: no sample yet), also under NO_COLOR."""
PALETTE = ("#30123b", "#4662d7", "#1ae4b6", "#a2fc3c", "#fabb39", "#e4460a")
"""Turbo-like scale (low -> high); glyph density also encodes the level, for NO_COLOR."""


@dataclass(frozen=True, slots=True)
class HeatMetric:
    """A metric the heatmap can show, with its key and scale."""

    key: str
    metric: str
    label: str
    lo: float
    hi: float
    unit: str


HEAT_METRICS: tuple[HeatMetric, ...] = (
    HeatMetric("u", "gpu.utilization_percent", "GPU util", 0, 100, "%"),
    HeatMetric("a", "gpu.sm_activity_percent", "SM activity", 0, 100, "%"),
    HeatMetric("m", "gpu.mem_used_percent", "GPU memory", 0, 100, "%"),  # m: memory (g is per-GPU, top)
    HeatMetric("w", "gpu.power_w", "power", 0, 700, "W"),
    HeatMetric("t", "gpu.temperature_c", "temperature", 20, 95, "°C"),
)


NO_DATA = -2
"""The level of a column from before the host's first sample (blank); -1 is n/a (``·``)."""


def level(v: float, lo: float, hi: float) -> int:
    """0..4 (glyph) for a value on the scale."""
    x = int((v - lo) / ((hi - lo) or 1) * 4.999) if -1e300 < v < 1e300 else (0 if v < 0 else 4)
    return 0 if x < 0 else 4 if x > 4 else x


class GpuHeatmap(CursorLines, can_focus=True):
    """Rows ``host:gpu``; columns are time buckets of the window; keys switch the metric.

    It fills its height; while rows are hidden the last line says how many
    (``rows 1–24 of 128 · 104 more ↓``). Focused (tab) it shows a row cursor:

    | key | action |
    | --- | --- |
    | ↑ k ↓ j pgup pgdn home end | move the cursor (the rows scroll with it) |
    | enter | open the GPU under the cursor |

    Each column is a fixed span of absolute time (``1 col = 5s`` in the
    legend): a tick reads only the newest column of a row, and repaints a row
    only when its glyphs changed. The spans are round, so the columns may not
    fill the width the widget is given: with ``width: auto`` it is as wide as
    its labels and columns (:meth:`get_content_width`); the overview gives it its
    box's width, and blank cells after the labels put "now" at the right edge; :meth:`axis_text` is the time
    axis under the columns. Columns from before a host's first sample in the
    window are blank (no data yet); ``·`` is a GPU that reported no value.
    """

    COMPONENT_CLASSES: ClassVar[set[str]] = {"heatmap--label", "heatmap--na", "heatmap--cursor"}
    DEFAULT_CSS = """
    GpuHeatmap > .heatmap--label { color: $text; }
    GpuHeatmap > .heatmap--na { color: $text-muted; }
    GpuHeatmap > .heatmap--cursor { background: $accent; color: $text; text-style: bold; }
    """
    BINDINGS: ClassVar[list[BindingType]] = cursor_bindings("choose", "Open GPU")

    def __init__(self, store: Store, *, name: str | None = None, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.store = store
        self.window_s = 300.0
        self.metric = HEAT_METRICS[0]
        self.header_lines = 1
        self.more_line = True
        self._styles = [Style(color=Color.parse(PALETTE[i + 1]), bgcolor=Color.parse(PALETTE[0]))
                        for i in range(5)]
        self._columns: ColumnCache[list[tuple[int, int]]] = ColumnCache(self._runs)
        self._memo: dict[Hashable, tuple[tuple[object, ...], list[Segment]]] = {}
        self._grid: tuple[tuple[float, ...], tuple[int, float]] | None = None
        self._starts: dict[str, tuple[tuple[object, ...], int | None, object]] = {}
        """Host -> (grid, absolute column of its first sample in the window or None, the stamp it was read at)."""
        self._fit: tuple[object, ...] = ()
        """What the width laid out last depends on (:meth:`get_content_width`)."""
        self._holders: dict[str, tuple[float, dict[int, str]]] = {}
        """Host -> (its latest sample's time, GPU index -> who holds it): read once per sample."""
        self._holder_cells = 0
        self._axis: tuple[tuple[object, ...], str] = ((), "")
        """(window, grid, widths, rows shown) -> the time axis under the columns."""

    @property
    def label_cells(self) -> int:  # type: ignore[override]
        """``host:gpu`` and, when any GPU shown is held by a pod, Slurm job or container, who holds it."""
        return 11 + self._holder_cells

    def _read_holders(self, hosts: Sequence[str]) -> None:
        """Who holds each GPU of ``hosts``, read again for a host with a new sample."""
        for host in hosts:
            latest = self.store.latest(host)
            at = latest.time if latest is not None else -1.0
            seen = self._holders.get(host)
            if seen is None or seen[0] != at:
                self._holders[host] = (at, holders(latest))
        for host in [h for h in self._holders if h not in hosts]:
            del self._holders[host]
        self._holder_cells = HOLDER_CELLS if any(h[1] for h in self._holders.values()) else 0

    def set_metric(self, key: str) -> bool:
        """Switch to the metric bound to ``key``; False if none is."""
        for m in HEAT_METRICS:
            if m.key == key:
                self.metric = m
                self.invalidate()
                return True
        return False

    def invalidate(self) -> None:
        """Drop every cached row and column (the metric, window or store changed)."""
        self._columns.clear()
        self._memo.clear()
        self._starts.clear()
        super().invalidate()

    def get_content_width(self, container: Size, viewport: Size) -> int:
        """``width: auto``: the labels and the columns that fit the box (all of it for the placeholder)."""
        room = container.width - self.styles.scrollbar_size_vertical
        if not self.rows:
            return room
        return min(room, self.label_cells + nice_columns(self.store, self.window_s, room - self.label_cells)[0])

    def _fit_width(self) -> None:
        """Lay the widget out again when its width would change (window, store resolution, rows or none)."""
        shape = (self.window_s, self.store.resolution_s, self.store.fine_slots, bool(self.rows), self.label_cells)
        if shape != self._fit:
            self._fit = shape
            self.refresh(layout=True)

    def axis_text(self) -> str:
        """``-5m … now`` under the columns, as wide as the widget (blank without rows).

        Worked out again only when the window, the grid or the width changes:
        the labels are relative, so a new sample or a new column leaves them as they are.
        """
        width, full = self.row_width, self.size.width
        grid = self.grid(width)
        key = (self.window_s, grid, width, full, bool(self.rows))
        if self._axis[0] != key:
            points = grid[0]
            line = " " * self.first_cell(width) + f"{time_axis(self.window_s, points):<{points}}"
            self._axis = (key, line.ljust(full) if self.rows else "")
        return self._axis[1]

    def grid(self, width: int) -> tuple[int, float]:
        """(columns, seconds per column) at ``width``."""
        key = (width, self.window_s, self.store.resolution_s, self.store.fine_slots, self.label_cells)
        if self._grid is None or self._grid[0] != key:
            self._grid = (key, nice_columns(self.store, self.window_s, width - self.label_cells))
        return self._grid[1]

    def first_cell(self, width: int) -> int:
        """Where the columns start in a row ``width`` cells wide: the round-span columns end at the right
        edge ("now"), the labels stay at the left whatever the window, blank cells between."""
        return max(self.label_cells, width - self.grid(width)[0])

    def set_rows(self, rows: Sequence[Hashable], versions: Mapping[Any, object]) -> None:
        """As :meth:`CursorLines.set_rows`; a row also changes when its host's closed columns may have."""
        points = self.grid(self.row_width)[0]
        store, w, stamp, mk = self.store, self.window_s, self._columns.stamp, self.metric.key
        rows = rows if isinstance(rows, list) else list(rows)
        self._read_holders(list(dict.fromkeys(str(cast("tuple[str, int]", k)[0]) for k in rows)))
        if rows == self.rows:
            # Only the rows on screen are drawn: a row scrolled to later has no version, so it is built then.
            top = int(self.scroll_offset.y)
            shown = rows[max(0, top - 1): top + self.size.height + 1]
            self._cache.versions.clear()
            for key in shown:
                ver = versions.get(key)
                if ver is not None:
                    host = cast("tuple[str, int]", key)[0]
                    self._cache.versions[key] = (ver, stamp(store, host, w, points), w, mk, self._holder_cells)
            super().set_rows(rows, {})
            self._fit_width()
            return
        for key, ver in versions.items():
            self._cache.versions[key] = (ver, stamp(store, key[0], w, points), w, mk, self._holder_cells)
        self._columns.keep(rows)  # the rows changed
        self._memo = {k: v for k, v in self._memo.items() if k in versions}
        hosts = {str(k[0]) for k in versions}
        self._starts = {h: v for h, v in self._starts.items() if h in hosts}
        super().set_rows(rows, {})
        self._fit_width()

    def header_key(self) -> Hashable:
        """The legend shows the metric and the column span (window, store resolution)."""
        return self.metric.key, self.window_s, self.store.resolution_s, self.store.fine_slots

    def header_line(self, y: int, width: int) -> Strip:
        m = self.metric
        na = self.component_style("heatmap--na")
        segs = [Segment(f"{m.label} {m.lo:g}", na)]
        segs += [Segment(GLYPHS[i] * 2, self._styles[i]) for i in range(5)]
        span = span_text(self.grid(width)[1])
        # One wording at every width (it read "keys u:util a:activity …" wide, "col 4s" narrow): what does not
        # fit is cut from the end, the key letters first (? lists them).
        tail = f"{m.hi:g}{m.unit}  ·=n/a  1 col = {span}  "
        keys = "keys " + " ".join(h.key for h in HEAT_METRICS)
        segs.append(Segment(tail + keys, na))
        return Strip(segs).crop_extend(0, width, self.base_style)

    def cursor_style(self) -> Style:
        """The theme's accent (reverse too, so it shows under NO_COLOR)."""
        return self.component_style("heatmap--cursor") + Style(reverse=True)

    def _runs(self, values: list[float]) -> list[tuple[int, int]]:
        """(level, count) runs of the closed columns (-1: n/a)."""
        m = self.metric
        runs: list[tuple[int, int]] = []
        for v in values:
            lv = -1 if v != v else level(v, m.lo, m.hi)
            if runs and runs[-1][0] == lv:
                runs[-1] = (lv, runs[-1][1] + 1)
            else:
                runs.append((lv, 1))
        return runs

    def make_line(self, key: Hashable, width: int) -> list[Segment]:
        host, gpu = cast("tuple[str, int]", key)
        points = self.grid(width)[0]
        stamp, runs, last = self._columns.read(self.store, key, host, self.metric.metric, self.window_s,
                                               points, gpu)
        lv = -1 if last != last else level(last, self.metric.lo, self.metric.hi)
        blank = self._blank_columns(host, points)
        memo = self._memo.get(key)
        held = fit(self._holders.get(host, (0.0, {}))[1].get(gpu, "")) if self._holder_cells else ""
        if memo is not None and memo[0] == (stamp, lv, width, blank, held):
            return memo[1]  # same glyphs: the row is not repainted
        label = f"{host.removeprefix('gpu-')[-7:]}:{gpu}"
        segs = [Segment(f"{label:<10} {held}".ljust(self.first_cell(width)), self.component_style("heatmap--label"))]
        na = self.component_style("heatmap--na")
        runs = [*runs[:-1], (lv, runs[-1][1] + 1)] if runs and runs[-1][0] == lv else [*runs, (lv, 1)]
        for run_level, run in _blanked(runs, blank):  # run-length: fewer segments to paint
            if run_level == NO_DATA:
                segs.append(Segment(" " * run, self.base_style))
            elif run_level < 0:
                segs.append(Segment("·" * run, na))
            else:
                segs.append(Segment(GLYPHS[run_level] * run, self._styles[run_level]))
        self._memo[key] = ((stamp, lv, width, blank, held), segs)
        return segs

    def _blank_columns(self, host: str, points: int) -> int:
        """How many of the oldest columns come before ``host``'s first sample in the window (no data yet).

        The first sample's column is found once per window and grid (it does not
        move as columns shift) and again after a backfilled sample (which can be
        older); a host without one in the window is looked at again when its columns change.
        """
        store, w = self.store, self.window_s
        grid = (id(store), w, points, store.late_writes(host))
        stamp = self._columns.stamp(store, host, w, points)
        oldest = store.newest_column(w, points) - points + 1  # the absolute index of the window's first column
        hit = self._starts.get(host)
        if hit is None or hit[0] != grid or (hit[1] is None and hit[2] != stamp):
            first = first_column(store, host, w, points)
            hit = self._starts[host] = (grid, None if first is None else oldest + first, stamp)
        return points if hit[1] is None else max(0, min(points, hit[1] - oldest))

    def styles_changed(self) -> None:
        """Theme or focus: the memoised rows carry the old styles."""
        self._memo.clear()

    def action_cursor(self, delta: int) -> None:
        """Move the cursor by ``delta`` rows."""
        self.move_cursor(delta)

    def action_page(self, pages: int) -> None:
        """Move the cursor (and the rows) by a page."""
        room = self._room()
        top = int(self.scroll_offset.y)
        self.scroll_to(y=top + pages * room, animate=False, immediate=True)
        self.move_cursor(pages * room)

    def action_choose(self) -> None:
        """Enter: open the GPU under the cursor."""
        self.choose()


def first_column(store: Store, host: str, window_s: float, points: int) -> int | None:
    """The oldest of the ``points`` aligned columns over the window holding any of ``host``'s series (None: none).

    Every sample writes the host's series, so this is the column of its first sample in the window.
    """
    first: int | None = None
    for metric in HOST_METRICS:
        values = store.series(host, metric, window_s, points, aligned=True)
        i = next((i for i, v in enumerate(values[: first]) if v == v), None)
        if i is not None:
            first = i
            if i == 0:
                break
    return first


def _blanked(runs: list[tuple[int, int]], n: int) -> list[tuple[int, int]]:
    """``runs`` of (level, count) with their first ``n`` columns at :data:`NO_DATA`."""
    if n <= 0:
        return runs
    out = [(NO_DATA, n)]
    for lv, count in runs:
        if n >= count:
            n -= count
        else:
            out.append((lv, count - n))
            n = 0
    return out
