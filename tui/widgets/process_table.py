"""A job's processes (job screen): host, pid, tree ID, user, CPU, RSS, GPU memory, command."""

from __future__ import annotations

from gpulens.core.model import JobInfo
from gpulens.core.units import pct, size
from gpulens.tui.widgets._table import IncrementalTable


class ProcessTable(IncrementalTable):
    """One row per process of the job, on every host."""

    COLUMNS = (
        ("pid", "Host:PID", False, 18), ("tree", "Tree ID", False, 24), ("user", "User", False, 8),
        ("cpu", "CPU", True, 5), ("rss", "RSS", True, 8), ("gpus", "GPUs", True, 5),
        ("gpumem", "GPU mem", True, 8), ("cmd", "Command", False, 30),
    )
    FLEX = ("cmd", "cmd", "tree")
    DROP = ("tree", "rss", "gpus", "user")
    CUT_LEFT = frozenset({"tree"})

    @staticmethod
    def cells(host: str, p: JobInfo) -> tuple[str, ...]:
        """The texts of one process's row."""
        gpus = ",".join(sorted(p.gpu_mem_bytes)) or "-"
        cmd = p.cmdline if len(p.cmdline) <= 400 else p.cmdline[:399] + "…"
        return (f"{host}:{p.pid}", p.tree_id, p.user, pct(p.cpu_percent), size(p.rss_bytes),
                gpus, size(sum(p.gpu_mem_bytes.values())), cmd)

    def show(self, processes: tuple[tuple[str, JobInfo], ...]) -> bool:
        """Show these processes; True if anything changed."""
        rows = {f"{h}:{p.pid}": self.cells(h, p) for h, p in processes}
        return self.sync(rows, list(rows))
