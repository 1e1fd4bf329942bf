"""The overview's host table: one row per host, window means, alerts."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from gpulens.core.units import num, pct, rate
from gpulens.store.views import HostRow
from gpulens.tui.widgets._table import IncrementalTable


class HostTable(IncrementalTable):
    """Hosts; Enter opens the host. ``s`` sorts by the next column, ``r`` reverses."""

    COLUMNS = (
        ("host", "Host", False, 14), ("gpus", "GPUs", True, 4), ("util", "Util", True, 5),
        ("sm", "SM", True, 5), ("mem", "GPU mem", True, 7), ("power", "Power", True, 6),
        ("cpu", "CPU", True, 5), ("net", "Net", True, 9), ("alerts", "Alerts", False, 14),
    )
    FLEX = ("alerts", "host")
    DROP = ("power", "sm", "net", "gpus", "cpu")

    def __init__(self, *, name: str | None = None, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._rows: dict[str, HostRow] = {}
        self.down_at: dict[str, str] = {}
        """host -> HH:MM:SS it went down, shown after its DOWN alert."""

    @staticmethod
    def cells(r: HostRow) -> tuple[str, ...]:
        """The texts of one row."""
        return (r.host, str(r.gpus), pct(r.util_percent), pct(r.sm_percent),
                pct(r.gpu_mem_percent), num(r.power_w, "W"), pct(r.cpu_percent),
                rate(r.net_bytes_per_s), " ".join(r.alerts))

    def _with_down_time(self, cells: tuple[str, ...]) -> tuple[str, ...]:
        at = self.down_at.get(cells[0])
        if at is None or "DOWN" not in cells[-1]:
            return cells
        return (*cells[:-1], cells[-1].replace("DOWN", f"DOWN {at}", 1))

    @staticmethod
    def sort_value(r: HostRow, index: int) -> Any:
        """The raw value column ``index`` sorts by (unknown last)."""
        vals = (r.host, r.gpus, r.util_percent, r.sm_percent, r.gpu_mem_percent, r.power_w,
                r.cpu_percent, r.net_bytes_per_s, len(r.alerts))
        v = vals[index]
        return (0, v) if isinstance(v, str) or not math.isnan(v) else (1, 0)

    def show(self, hosts: list[str], row_of: Callable[[str], HostRow]) -> bool:
        """Show these hosts, filtered and sorted; True if anything changed.

        Sorted by name and unfiltered, only the rows on screen are computed
        (the others keep their last figures until scrolled to): with 256
        hosts that halves the cost of an update.
        """
        lazy = self.sort_index == 0 and not self.filter_text and not self.sort_reverse
        if lazy:
            top = int(self.scroll_offset.y)
            wanted = set(hosts[max(0, top - 2): top + self.size.height + 2])
            rows = [row_of(h) if h in wanted or h not in self._rows else self._rows[h] for h in hosts]
        else:
            rows = [row_of(h) for h in hosts]
        self._rows = {r.host: r for r in rows}
        data = {r.host: self._with_down_time(self.cells(r)) for r in rows}
        kept = [r for r in rows if self.matches(data[r.host])]
        kept.sort(key=lambda r: self.sort_value(r, self.sort_index), reverse=self.sort_reverse)
        if self.sort_reverse:  # unknown values stay last
            kept.sort(key=lambda r: self.sort_value(r, self.sort_index)[0])
        return self.sync({r.host: data[r.host] for r in kept}, [r.host for r in kept])
