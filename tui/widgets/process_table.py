"""Process tables: a job's processes (job screen) and one GPU's processes (GPU screen)."""

from __future__ import annotations

from gpulens.core.model import GpuProcess, JobInfo
from gpulens.core.sanitize import clean_text
from gpulens.core.units import NA, pct, size
from gpulens.core.workload import describe
from gpulens.tui.widgets._table import IncrementalTable


class ProcessTable(IncrementalTable):
    """One row per process of the job, on every host; Enter opens the process screen.

    ``GPU#`` lists the indices of the GPUs the process holds memory on
    (``0,1``), not how many.
    """

    COLUMNS = (
        ("pid", "Host:PID", False, 18), ("tree", "Tree ID", False, 24), ("user", "User", False, 8),
        ("where", "Runs in", False, 11),
        ("cpu", "CPU", True, 5), ("rss", "RSS", True, 8), ("gpus", "GPU#", False, 5),
        ("gpumem", "GPU mem", True, 8), ("cmd", "Command", False, 30),
    )
    """Each wider than its label, so the sort arrow never cuts it."""
    FLEX = ("cmd", "cmd", "tree")
    DROP = ("where", "tree", "rss", "gpus", "user")
    CUT_LEFT = frozenset({"tree"})

    def __init__(self, *, name: str | None = None, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._made: dict[str, tuple[JobInfo, tuple[str, ...]]] = {}
        """Row key -> the process record its texts were made from (a host that sent nothing new keeps it)."""

    @staticmethod
    def cells(host: str, p: JobInfo, was: tuple[JobInfo, tuple[str, ...]] | None = None,
              no_gpu: bool = False) -> tuple[str, ...]:
        """The texts of one process's row (its command's cleaned text kept from ``was`` while it reads the same);
        ``no_gpu``: its host reads no GPU, so its GPU figures are n/a, not 0 B."""
        gpus = NA if no_gpu else ",".join(sorted(p.gpu_mem_bytes, key=lambda i: (len(i), i))) or "-"
        if was is not None and was[0].cmdline == p.cmdline:
            cmd = was[1][-1]
        else:
            cmd = clean_text(p.cmdline if len(p.cmdline) <= 400 else p.cmdline[:399] + "…")  # a -c script's newlines
        return (f"{host}:{p.pid}", p.tree_id, p.user, describe(p.workload, short=True), pct(p.cpu_percent),
                size(p.rss_bytes),
                gpus, NA if no_gpu else size(sum(p.gpu_mem_bytes.values())), cmd)

    def show(self, processes: tuple[tuple[str, JobInfo], ...], no_gpu: frozenset[str] = frozenset()) -> bool:
        """Show these processes (``no_gpu``: hosts that read no GPU); True if anything changed."""
        made = self._made
        rows: dict[str, tuple[str, ...]] = {}
        kept: dict[str, tuple[JobInfo, tuple[str, ...]]] = {}
        for h, p in processes:
            key = f"{h}:{p.pid}"
            hit = made.get(key)
            kept[key] = hit if hit is not None and hit[0] is p else (p, self.cells(h, p, hit, h in no_gpu))
            rows[key] = kept[key][1]
        self._made = kept
        return self.sync(rows, list(rows))


class GpuProcessTable(IncrementalTable):
    """The processes NVML reports on one GPU, joined with what the job collector knows of them."""

    COLUMNS = (
        ("pid", "PID", True, 8), ("user", "User", False, 9), ("mem", "GPU mem", True, 9),
        ("sm", "SM util", True, 8), ("job", "Job", False, 14), ("where", "Runs in", False, 11),
        ("cmd", "Command", False, 30),
    )
    FLEX = ("cmd", "cmd", "job")
    DROP = ("where", "job", "sm", "user")

    @staticmethod
    def cells(p: GpuProcess, job: JobInfo | None, key: str) -> tuple[str, ...]:
        """One process's row (n/a where NVML or the job collector gave nothing)."""
        cmd = clean_text(job.cmdline) if job is not None else "(not a job process: the job pattern does not match it)"
        return (str(p.pid), job.user if job is not None else NA, size(p.used_memory_bytes),
                pct(p.sm_util_percent), key if job is not None else "-",
                describe(job.workload if job is not None else None, short=True), cmd if len(cmd) <= 400 else cmd[:399] + "…")

    def show(self, rows: list[tuple[GpuProcess, JobInfo | None, str]]) -> bool:
        """Show these processes; True if anything changed."""
        data = {str(p.pid): self.cells(p, j, k) for p, j, k in rows}
        return self.sync(data, list(data))
