"""Per-host sparklines of GPU utilization and SM activity (overview)."""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style

from gpulens.core.units import pct
from gpulens.store.store import Store
from gpulens.tui.widgets._lines import LazyLines

BARS = "▁▂▃▄▅▆▇█"


def spark(values: Sequence[float], lo: float = 0.0, hi: float = 100.0) -> str:
    """One character per value; a gap (space) where the value is unknown.

    Never raises on inf or 1e308 (values or bounds): they clamp to the lowest or highest bar.
    """
    span = hi - lo
    if not span or span != span:
        span = 1.0
    out = []
    for v in values:
        x = (v - lo) / span * 7.999  # NaN for NaN (or inf - inf): never int() of inf
        if x != x:
            out.append(" ")
        else:
            out.append(BARS[0 if x <= 0 else 7 if x >= 7 else int(x)])
    return "".join(out)


class HostSparklines(LazyLines):
    """One line per host: ``name  util-spark  95%  SM sm-spark  80%``."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"sparklines--label", "sparklines--util", "sparklines--sm", "sparklines--na"}
    DEFAULT_CSS = """
    HostSparklines > .sparklines--label { color: $text; }
    HostSparklines > .sparklines--util { color: $success; }
    HostSparklines > .sparklines--sm { color: $accent; }
    HostSparklines > .sparklines--na { color: $text-muted; }
    """

    def __init__(self, store: Store, *, name: str | None = None, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.store = store
        self.window_s = 300.0
        self.header_lines = 1

    def header_line(self, y: int, width: int):  # type: ignore[no-untyped-def]
        from textual.strip import Strip

        st = self.get_component_rich_style("sparklines--na")
        body = width - 12
        cols = max(4, (body - 14) // 2 if body >= 40 else body - 6)
        util = f"{'GPU util':<{cols}} {'now':>4}"
        sm = f"  {'SM activity':<{cols}} {'now':>4}" if body >= 40 else ""
        text = f"{'host':<12}{util}{sm}"
        return Strip([Segment(text, st)]).crop_extend(
            0, width, self.rich_style)

    def make_line(self, key: Hashable, width: int) -> list[Segment]:
        host = str(key)
        label = self.get_component_rich_style("sparklines--label")
        na = self.get_component_rich_style("sparklines--na")
        name = host if len(host) <= 11 else host[:10] + "…"
        body = width - 12
        both = body >= 40
        cols = max(4, (body - 14) // 2 if both else body - 6)
        segs = [Segment(f"{name:<11} ", label)]
        segs += self._one(host, "gpu.utilization_percent", cols, self.get_component_rich_style("sparklines--util"), na)
        if both:
            segs.append(Segment("  ", na))
            segs += self._one(host, "gpu.sm_activity_percent", cols, self.get_component_rich_style("sparklines--sm"), na)
        return segs

    def _one(self, host: str, metric: str, cols: int, st: Style, na: Style) -> list[Segment]:
        values = self.store.series(host, metric, self.window_s, cols)
        if not any(math.isfinite(v) for v in values):
            return [Segment(f"{'n/a':<{cols}} {'':>4}", na)]
        now = next((v for v in reversed(values) if math.isfinite(v)), math.nan)
        return [Segment(spark(values), st), Segment(f" {pct(now):>4}", st)]
