"""The overview's host table: one row per host, window means, alerts."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import ClassVar

from gpulens.core.config import Thresholds
from gpulens.core.units import num, pct, rate
from gpulens.store.views import HostRow
from gpulens.tui.widgets._table import IncrementalTable, SortKey
from gpulens.tui.widgets.thresholds import (
    DEFAULT,
    MARKS,
    OK,
    alert_level,
    alert_text,
    level,
    level_of_text,
    marked,
)


class HostTable(IncrementalTable):
    """Hosts; Enter opens the host. A shifted letter sorts by its column (again: reverse)."""

    # Each width leaves room for the sort arrow after the label ("GPUs↑", not "GPU↑").
    COLUMNS = (
        ("host", "Host", False, 14), ("gpus", "GPUs", True, 5), ("util", "Util", True, 5),
        ("sm", "SM", True, 5), ("mem", "GPU mem", True, 8), ("power", "Power", True, 6),
        ("cpu", "CPU", True, 5), ("net", "Net", True, 9), ("alerts", "Alerts", False, 14),
    )
    SORT_KEYS: ClassVar[dict[str, str]] = {"host": "H", "gpus": "G", "util": "U", "sm": "S", "mem": "M", "power": "P",
                 "cpu": "C", "net": "N", "alerts": "A"}
    FLEX = ("alerts", "host")
    MARKED = True
    DROP = ("power", "sm", "net", "gpus", "cpu")

    def __init__(self, *, name: str | None = None, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._rows: dict[str, HostRow] = {}
        self.down_at: dict[str, str] = {}
        """host -> HH:MM:SS it went down, shown after its DOWN alert."""
        self._made: dict[str, tuple[HostRow, Thresholds, str | None, tuple[str, ...]]] = {}
        """host -> the row (the store's, cached per host version), thresholds and down time its texts came from."""

    thresholds: Thresholds = DEFAULT
    """Where GPU memory turns warning or critical (the config's ``[thresholds]``)."""

    @staticmethod
    def cells(r: HostRow, t: Thresholds = DEFAULT) -> tuple[str, ...]:
        """The texts of one row; GPU memory marked past its threshold, alerts with their markers."""
        mem = marked(pct(r.gpu_mem_percent), level("mem", r.gpu_mem_percent, t))
        return (r.host, str(r.gpus), pct(r.util_percent), pct(r.sm_percent), mem, num(r.power_w, "W"),
                pct(r.cpu_percent), rate(r.net_bytes_per_s), " ".join(alert_text(a) for a in r.alerts))

    def cell_level(self, column: str, text: str) -> int:
        """The alerts cell takes the level of its loudest alert (``! XID 79``); others their marker."""
        if column != "alerts":
            return level_of_text(text)
        marks = set(text.split())
        return max((lvl for lvl, mark in MARKS.items() if mark and mark in marks), default=OK)

    def _with_down_time(self, cells: tuple[str, ...]) -> tuple[str, ...]:
        at = self.down_at.get(cells[0])
        if at is None or "DOWN" not in cells[-1]:
            return cells
        return (*cells[:-1], cells[-1].replace("DOWN", f"DOWN {at}", 1))

    @staticmethod
    def sort_value(r: HostRow, index: int) -> SortKey:
        """The raw value column ``index`` sorts by (unknown last)."""
        vals = (r.host, r.gpus, r.util_percent, r.sm_percent, r.gpu_mem_percent, r.power_w,
                r.cpu_percent, r.net_bytes_per_s, (max(map(alert_level, r.alerts), default=OK), len(r.alerts)))
        v = vals[index]
        return (0, v) if isinstance(v, (str, tuple)) or not math.isnan(v) else (1, 0)  # alerts: loudest, then most

    def show(self, hosts: list[str], row_of: Callable[[str], HostRow]) -> bool:
        """Show these hosts (already filtered), sorted; True if anything changed.

        Sorted by name, only the rows on screen are computed
        (the others keep their last figures until scrolled to): with 256
        hosts that halves the cost of an update.
        """
        lazy = self.sort_index == 0 and not self.sort_reverse
        if lazy:
            top = int(self.scroll_offset.y)
            wanted = set(hosts[max(0, top - 2): top + self.size.height + 2])
            rows = [row_of(h) if h in wanted or h not in self._rows else self._rows[h] for h in hosts]
        else:
            rows = [row_of(h) for h in hosts]
        self._rows = {r.host: r for r in rows}
        t, made = self.thresholds, self._made
        data: dict[str, tuple[str, ...]] = {}
        for r in rows:
            at = self.down_at.get(r.host)
            hit = made.get(r.host)
            if hit is None or hit[0] is not r or hit[1] is not t or hit[2] != at:
                hit = made[r.host] = (r, t, at, self._with_down_time(self.cells(r, t)))
            data[r.host] = hit[3]
        if len(made) > len(rows):  # hosts gone or filtered out
            for gone in made.keys() - data.keys():
                del made[gone]
        kept = list(rows)
        kept.sort(key=lambda r: self.sort_value(r, self.sort_index), reverse=self.sort_reverse)
        if self.sort_reverse:  # unknown values stay last
            kept.sort(key=lambda r: self.sort_value(r, self.sort_index)[0])
        return self.sync({r.host: data[r.host] for r in kept}, [r.host for r in kept])
