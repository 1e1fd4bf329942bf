"""Job table (overview and host screen): tree ID, user, hosts, GPUs, util, memory, runtime."""

from __future__ import annotations

import math
from typing import ClassVar

from gpulens.core.units import duration, pct, size
from gpulens.store.views import JobView
from gpulens.tui.widgets._table import IncrementalTable, SortKey


class JobTable(IncrementalTable):
    """Jobs; Enter opens the job. A shifted letter sorts by its column (again: reverse)."""

    # Each width leaves room for the sort arrow after the label.
    COLUMNS = (
        ("job", "Job", False, 16), ("where", "Runs in", False, 11), ("tree", "Tree ID", False, 12),
        ("user", "User", False, 6),
        ("hosts", "Hosts", True, 6), ("gpus", "GPUs", True, 5), ("util", "Util", True, 5),
        ("mem", "GPU mem", True, 8), ("runtime", "Runtime", True, 8),
    )
    SORT_KEYS: ClassVar[dict[str, str]] = {"job": "J", "where": "I", "tree": "T", "user": "U", "hosts": "H", "gpus": "G",
                                           "util": "L", "mem": "M", "runtime": "R"}
    FLEX = ("tree",)
    DROP = ("hosts", "where", "runtime", "tree")
    CUT_LEFT = frozenset({"tree"})

    @staticmethod
    def cells(j: JobView) -> tuple[str, ...]:
        """The texts of one row (cut to the column width when drawn)."""
        return (j.key, j.where, j.tree_id, j.user, str(len(j.hosts)), str(len(j.gpus)), pct(j.util_percent),
                size(j.gpu_mem_bytes), duration(j.runtime_s))

    @staticmethod
    def sort_value(j: JobView, index: int) -> SortKey:
        """The raw value column ``index`` sorts by (unknown last)."""
        vals = (j.key, j.where, j.tree_id, j.user, len(j.hosts), len(j.gpus), j.util_percent,
                j.gpu_mem_bytes, j.runtime_s)
        v = vals[index]
        return (0, v) if isinstance(v, str) or not math.isnan(v) else (1, 0)

    def show(self, jobs: list[JobView]) -> bool:
        """Show these jobs (already filtered), sorted; True if anything changed."""
        data = {j.key: self.cells(j) for j in jobs}
        kept = sorted(jobs, key=lambda j: self.sort_value(j, self.sort_index), reverse=self.sort_reverse)
        if self.sort_reverse:  # unknown values stay last
            kept.sort(key=lambda j: self.sort_value(j, self.sort_index)[0])
        return self.sync({j.key: data[j.key] for j in kept}, [j.key for j in kept])
