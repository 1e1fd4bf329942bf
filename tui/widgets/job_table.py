"""Job table (overview and host screen): tree ID, user, hosts, GPUs, util, memory, runtime."""

from __future__ import annotations

import math
from typing import Any

from gpulens.core.units import duration, pct, size
from gpulens.store.views import JobView
from gpulens.tui.widgets._table import IncrementalTable


class JobTable(IncrementalTable):
    """Jobs; Enter opens the job. ``s`` sorts by the next column, ``r`` reverses."""

    COLUMNS = (
        ("job", "Job", False, 16), ("tree", "Tree ID", False, 12), ("user", "User", False, 6),
        ("hosts", "Hosts", True, 5), ("gpus", "GPUs", True, 4), ("util", "Util", True, 5),
        ("mem", "GPU mem", True, 8), ("runtime", "Runtime", True, 7),
    )
    FLEX = ("tree",)
    DROP = ("hosts", "runtime", "tree")
    CUT_LEFT = frozenset({"tree"})

    @staticmethod
    def cells(j: JobView) -> tuple[str, ...]:
        """The texts of one row (cut to the column width when drawn)."""
        return (j.key, j.tree_id, j.user, str(len(j.hosts)), str(len(j.gpus)), pct(j.util_percent),
                size(j.gpu_mem_bytes), duration(j.runtime_s))

    @staticmethod
    def sort_value(j: JobView, index: int) -> Any:
        """The raw value column ``index`` sorts by (unknown last)."""
        vals = (j.key, j.tree_id, j.user, len(j.hosts), len(j.gpus), j.util_percent,
                j.gpu_mem_bytes, j.runtime_s)
        v = vals[index]
        return (0, v) if isinstance(v, str) or not math.isnan(v) else (1, 0)

    def show(self, jobs: list[JobView]) -> bool:
        """Show these jobs, filtered and sorted; True if anything changed."""
        data = {j.key: self.cells(j) for j in jobs}
        kept = [j for j in jobs if self.matches(data[j.key])]
        kept.sort(key=lambda j: self.sort_value(j, self.sort_index), reverse=self.sort_reverse)
        return self.sync({j.key: data[j.key] for j in kept}, [j.key for j in kept])
