"""Per-GPU heatmap: one row per host/GPU, one column per time bucket, legend on top."""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass
from typing import ClassVar, cast

from rich.color import Color
from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip

from gpulens.store.store import Store
from gpulens.tui.widgets._lines import LazyLines

GLYPHS = " ░▒▓█"
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
    HeatMetric("g", "gpu.mem_used_percent", "GPU memory", 0, 100, "%"),
    HeatMetric("w", "gpu.power_w", "power", 0, 700, "W"),
    HeatMetric("t", "gpu.temperature_c", "temperature", 20, 95, "°C"),
)


def level(v: float, lo: float, hi: float) -> int:
    """0..4 (glyph) for a value on the scale."""
    return max(0, min(4, int((v - lo) / ((hi - lo) or 1) * 4.999)))


class GpuHeatmap(LazyLines, can_focus=True):
    """Rows ``host:gpu``; columns are time buckets of the window; keys switch the metric.

    It fills its height; while rows are hidden the last line says how many
    (``rows 1–24 of 128 · 104 more ↓``); focused (tab) it scrolls with the arrow keys.
    """

    COMPONENT_CLASSES: ClassVar[set[str]] = {"heatmap--label", "heatmap--na"}
    DEFAULT_CSS = """
    GpuHeatmap > .heatmap--label { color: $text; }
    GpuHeatmap > .heatmap--na { color: $text-muted; }
    """

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

    def set_metric(self, key: str) -> bool:
        """Switch to the metric bound to ``key``; False if none is."""
        for m in HEAT_METRICS:
            if m.key == key:
                self.metric = m
                self.invalidate()
                return True
        return False

    def header_line(self, y: int, width: int) -> Strip:
        m = self.metric
        na = self.get_component_rich_style("heatmap--na")
        segs = [Segment(f"{m.label} {m.lo:g}", na)]
        segs += [Segment(GLYPHS[i] * 2, self._styles[i]) for i in range(5)]
        keys = " ".join(f"{h.key}:{h.label.split()[-1]}" for h in HEAT_METRICS)
        used = sum(len(x.text) for x in segs)
        tail = f"{m.hi:g}{m.unit}  ·=n/a  keys "
        if used + len(tail) + len(keys) > width:  # every key letter stays readable
            keys = " ".join(h.key for h in HEAT_METRICS)
        segs.append(Segment(tail + keys, na))
        return Strip(segs).crop_extend(0, width, self.base_style)

    def make_line(self, key: Hashable, width: int) -> list[Segment]:
        host, gpu = cast("tuple[str, int]", key)
        label = f"{host.removeprefix('gpu-')[-7:]}:{gpu}"
        cols = max(1, width - 11)
        values = self.store.series(host, self.metric.metric, self.window_s, cols, gpu=gpu)
        segs = [Segment(f"{label:<10} ", self.get_component_rich_style("heatmap--label"))]
        na = self.get_component_rich_style("heatmap--na")
        m = self.metric
        run_level, run = -2, 0
        for v in [*values, math.inf]:  # run-length: fewer segments to paint
            lv = -1 if math.isnan(v) else (9 if math.isinf(v) else level(v, m.lo, m.hi))
            if lv != run_level and run:
                if run_level < 0:
                    segs.append(Segment("·" * run, na))
                else:
                    segs.append(Segment(GLYPHS[run_level] * run, self._styles[run_level]))
                run = 0
            run_level = lv
            run += 1
        return segs
