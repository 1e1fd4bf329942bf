"""k9s-style resource views: ``:hosts``, ``:jobs``, ``:gpus`` (every GPU of the fleet), ``:user NAME``,
``:pods``, ``:ns NAME`` and ``:slurm [JOBID]``.

Each is one full-screen table (``:user`` two) with the same ``/`` regex filter
and column sorting as the overview; Enter opens the row's host or job.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Vertical
from textual.widgets import Footer

from gpulens.core.config import Thresholds
from gpulens.core.model import GpuSample
from gpulens.core.units import NA, num, pct
from gpulens.store.views import JobView
from gpulens.tui.context import ScreenContext
from gpulens.tui.messages import OpenHost, OpenJob
from gpulens.tui.screens._finding import HOSTS_TITLE, JOBS_TITLE, FindingScreen, sort_bindings
from gpulens.tui.widgets._table import IncrementalTable, SortKey
from gpulens.tui.widgets.gpu_table import THROTTLE_SHORT, mem_pair
from gpulens.tui.widgets.header import AppHeader
from gpulens.tui.widgets.host_table import HostTable
from gpulens.tui.widgets.job_table import JobTable
from gpulens.tui.widgets.thresholds import (
    DEFAULT,
    gpu_levels,
    marked,
    throttle_level,
    throttle_text,
)

VIEW_CSS = """
{name} .view-box {{ height: 1fr; border: round $panel; }}
{name} .view-box.-half {{ height: 1fr; }}
{name} IncrementalTable {{ height: 1fr; }}
"""


class GpuFleetTable(IncrementalTable):
    """Every GPU of the fleet: host, index, model, util (window mean), memory, power, temperature, throttle."""

    COLUMNS = (
        ("host", "Host", False, 14), ("gpu", "GPU", True, 4), ("name", "Model", False, 12),
        ("util", "Util avg", True, 8), ("mem", "Memory", True, 15), ("power", "Power", True, 6),
        ("temp", "Temp", True, 5), ("procs", "Procs", True, 6), ("throttle", "Throttle", False, 10),
    )
    FLEX = ("name", "throttle", "host")
    MARKED = True
    DROP = ("name", "procs", "throttle", "power")
    SORT_KEYS: ClassVar[dict[str, str]] = {"host": "H", "gpu": "G", "name": "O", "util": "U", "mem": "M", "power": "P",
                 "temp": "T", "procs": "R", "throttle": "L"}

    thresholds: Thresholds = DEFAULT
    """Where values turn warning or critical (the config's ``[thresholds]``)."""

    @staticmethod
    def cells(host: str, g: GpuSample, util: float, t: Thresholds = DEFAULT) -> tuple[str, ...]:
        """The texts of one row, marked past the thresholds as the host screen's GPU table marks them."""
        lv = gpu_levels(g, t)
        mem = NA if g.mem_used_bytes is None else mem_pair(g.mem_used_bytes, g.mem_total_bytes)
        throttle = throttle_text(g, lambda r: THROTTLE_SHORT.get(r, r.removesuffix("_slowdown")))
        return (host, str(g.index), g.name.removeprefix("NVIDIA "), pct(util), marked(mem, lv["mem"]),
                marked(num(g.power_w, "W"), lv["power"]), marked(num(g.temperature_c, "C"), lv["temp"]),
                str(len(g.processes)), marked(throttle, lv["throttle"]) if g.throttle_reasons else throttle)

    @staticmethod
    def sort_value(host: str, g: GpuSample, util: float, index: int) -> SortKey:
        """The raw value column ``index`` sorts by (unknown last)."""
        vals: tuple[Any, ...] = (host, g.index, g.name, util, g.mem_used_bytes, g.power_w, g.temperature_c,
                                 len(g.processes), (throttle_level(g.throttle_reasons), ",".join(g.throttle_reasons)))
        v = vals[index]
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return (1, 0)
        return (0, v)

    def show(self, gpus: list[tuple[str, GpuSample, float]]) -> bool:
        """Show these GPUs (host, newest sample, window util), sorted; True if anything changed."""
        t = self.thresholds
        data = {f"{h}:{g.index}": self.cells(h, g, u, t) for h, g, u in gpus}
        i = self.sort_index
        kept = sorted(gpus, key=lambda r: self.sort_value(r[0], r[1], r[2], i), reverse=self.sort_reverse)
        if self.sort_reverse:
            kept.sort(key=lambda r: self.sort_value(r[0], r[1], r[2], i)[0])
        order = [f"{h}:{g.index}" for h, g, _ in kept]
        return self.sync({k: data[k] for k in order}, order)


class _View(FindingScreen):
    """One or two tables, the filter line and the footer."""

    TITLE = ""

    def __init__(self, *, context: ScreenContext | None = None) -> None:
        super().__init__(context=context)
        self._subtitles: dict[int, str] = {}
        """Box id -> the subtitle it shows."""

    def compose(self) -> ComposeResult:
        """Header, the table(s), filter, footer."""
        yield AppHeader()
        for table, title in self.boxes():
            with Vertical(classes="view-box") as box:
                box.border_title = title
                yield table
        yield from self.filter_widgets()
        yield Footer()

    def boxes(self) -> list[tuple[IncrementalTable, str]]:
        """(table, box title) pairs (override)."""
        return []

    def on_mount(self) -> None:
        """First table focused, first draw."""
        super().on_mount()
        tables = self.tables()
        if tables:
            tables[0].focus()
        self.refresh_data(force=True)

    def on_incremental_table_row_selected(self, event: IncrementalTable.RowSelected) -> None:
        """Enter on a row opens its job or host."""
        event.stop()
        if isinstance(event.table, JobTable):
            self.post_message(OpenJob(event.key))
        else:
            self.post_message(OpenHost(event.key.rsplit(":", 1)[0] if isinstance(event.table, GpuFleetTable)
                                       else event.key))

    def _subtitle(self, table: IncrementalTable, shown: int, total: int, noun: str) -> None:
        """The box's subtitle (sort, count, filter), set only when it changed: setting it repaints the box."""
        box = table.parent
        if isinstance(box, Vertical):
            count = f" · {shown} of {total} {noun}s" if shown != total else f" · {total} {noun}{'s' * (total != 1)}"
            text = table.sort_label() + count + self.filter_note() + table.sort_hint()
            if self._subtitles.get(id(box)) != text:
                self._subtitles[id(box)] = text
                box.border_subtitle = text


class HostsView(_View):
    """``:hosts``: every host, one table."""

    crumb = "hosts"
    DEFAULT_CSS = VIEW_CSS.format(name="HostsView")
    BINDINGS: ClassVar[list[BindingType]] = sort_bindings(HostTable)

    def boxes(self) -> list[tuple[IncrementalTable, str]]:
        """The host table."""
        return [(HostTable(), HOSTS_TITLE)]

    def refresh_data(self, force: bool = False) -> None:
        """The hosts the filter keeps."""
        super().refresh_data(force)
        store, w = self.ctx.store, self.ctx.window_s
        hosts = store.hosts()
        sel = self.selection(hosts, store.jobs(w), [])
        table = self.query_one(HostTable)
        table.placeholder = f"no host matches the filter '{self.finder.text}'" if hosts else "no host reported yet"
        table.down_at = {h: self.ctx.clock_text(t) for h, t in self.ctx.down_hosts().items()}
        table.show(list(sel.hosts), lambda h: store.host_row(h, w))
        self._subtitle(table, len(sel.hosts), len(hosts), "host")


class JobsView(_View):
    """``:jobs``: every job, one table."""

    crumb = "jobs"
    DEFAULT_CSS = VIEW_CSS.format(name="JobsView")
    BINDINGS: ClassVar[list[BindingType]] = sort_bindings(JobTable)

    def boxes(self) -> list[tuple[IncrementalTable, str]]:
        """The job table."""
        return [(JobTable(), JOBS_TITLE)]

    def refresh_data(self, force: bool = False) -> None:
        """The jobs the filter keeps."""
        super().refresh_data(force)
        store, w = self.ctx.store, self.ctx.window_s
        jobs = store.jobs(w)
        sel = self.selection(store.hosts(), jobs, [])
        table = self.query_one(JobTable)
        table.placeholder = (f"no job matches the filter '{self.finder.text}'" if jobs
                             else "no process matches the job pattern (--pattern)")
        kept = [j for j in jobs if j.key in sel.jobs]
        table.show(kept)
        self._subtitle(table, len(kept), len(jobs), "job")


class GpusView(_View):
    """``:gpus``: every GPU of the fleet as one table (newest sample; util over the window)."""

    crumb = "gpus"
    SHOWS_LEVELS = True
    DEFAULT_CSS = VIEW_CSS.format(name="GpusView")
    BINDINGS: ClassVar[list[BindingType]] = sort_bindings(GpuFleetTable)

    def boxes(self) -> list[tuple[IncrementalTable, str]]:
        """The GPU table."""
        return [(GpuFleetTable(), "GPUs · util: mean over the window; memory, power, temperature: now")]

    def refresh_data(self, force: bool = False) -> None:
        """The GPUs the filter keeps (a host's, or those a matching job holds)."""
        super().refresh_data(force)
        store, w = self.ctx.store, self.ctx.window_s
        hosts = store.hosts()
        latest = {h: s for h in hosts if (s := store.latest(h)) is not None}
        every = [(h, g.index) for h, s in latest.items() for g in s.gpus]
        sel = self.selection(hosts, store.jobs(w), every)
        kept = set(sel.gpus)
        rows = [(h, g, store.window_mean(h, "gpu.utilization_percent", w, gpu=g.index))
                for h, s in latest.items() for g in s.gpus if (h, g.index) in kept]
        table = self.query_one(GpuFleetTable)
        table.placeholder = (f"no GPU matches the filter '{self.finder.text}'" if every
                             else "no GPUs reported yet")
        table.show(rows)
        self._subtitle(table, len(rows), len(every), "GPU")


class JobsOfView(_View):
    """Some of the jobs (``select``), and the hosts they run on: ``:user``, ``:pods``, ``:ns``, ``:slurm``."""

    BINDINGS: ClassVar[list[BindingType]] = sort_bindings(JobTable, HostTable)
    jobs_title = "Jobs"
    whose = "these jobs'"
    none_now = "no such job runs now"

    def __init__(self, arg: str = "", *, context: ScreenContext | None = None) -> None:
        """``arg``: what ``:NAME ARG`` named (a user, a namespace, a Slurm job id; '' for all)."""
        super().__init__(context=context)

    def select(self, job: JobView) -> bool:
        """Whether ``job`` belongs in the view (override)."""
        return True

    def boxes(self) -> list[tuple[IncrementalTable, str]]:
        """Jobs, then hosts."""
        return [(JobTable(), self.jobs_title), (HostTable(), f"Hosts {self.whose} jobs run on")]

    def refresh_data(self, force: bool = False) -> None:
        """The selected jobs (narrowed by the filter) and their hosts."""
        super().refresh_data(force)
        store, w = self.ctx.store, self.ctx.window_s
        mine: list[JobView] = [j for j in store.jobs(w) if self.select(j)]
        hosts = sorted({h for j in mine for h in j.hosts})
        sel = self.selection(hosts, mine, [])
        jobs = self.query_one(JobTable)
        jobs.placeholder = f"no job matches the filter '{self.finder.text}'" if mine else self.none_now
        kept = [j for j in mine if j.key in sel.jobs]
        jobs.show(kept)
        self._subtitle(jobs, len(kept), len(mine), "job")
        table = self.query_one(HostTable)
        table.placeholder = f"{self.whose} jobs run on no host now" if not mine else "no host matches the filter"
        table.show(list(sel.hosts), lambda h: store.host_row(h, w))
        self._subtitle(table, len(sel.hosts), len(hosts), "host")


class UserView(JobsOfView):
    """``:user NAME``: that user's jobs, and the hosts they run on."""

    DEFAULT_CSS = VIEW_CSS.format(name="UserView")

    def __init__(self, user: str, *, context: ScreenContext | None = None) -> None:
        super().__init__(context=context)
        self.user = user
        self.crumb = f"user {user}"
        self.jobs_title, self.whose, self.none_now = f"Jobs of {user}", f"{user}'s", f"{user} runs no job now"

    def select(self, job: JobView) -> bool:
        """The user's jobs."""
        return job.user == self.user


class PodsView(JobsOfView):
    """``:pods``: the jobs that run in Kubernetes pods (``:ns NAME``: in one namespace)."""

    DEFAULT_CSS = VIEW_CSS.format(name="PodsView")
    crumb = "pods"
    jobs_title, whose = "Jobs in Kubernetes pods", "pods'"
    none_now = "no job runs in a Kubernetes pod now (none of the jobs' cgroups is a kubepods one)"

    def __init__(self, namespace: str = "", *, context: ScreenContext | None = None) -> None:
        super().__init__(context=context)
        self.namespace = namespace
        if namespace:
            self.crumb = f"ns {namespace}"
            self.jobs_title, self.whose = f"Jobs in namespace {namespace}", f"namespace {namespace}'s"
            self.none_now = (f"no job runs in namespace {namespace} now (a pod known by UID only has no "
                             "namespace: see :log)")

    def select(self, job: JobView) -> bool:
        """Jobs in a pod (of the namespace)."""
        w = job.workload
        return w is not None and w.pod_uid is not None and (not self.namespace or w.namespace == self.namespace)


class SlurmView(JobsOfView):
    """``:slurm [JOBID]``: the jobs that are Slurm jobs (or that one)."""

    DEFAULT_CSS = VIEW_CSS.format(name="SlurmView")
    crumb = "slurm"
    jobs_title, whose = "Slurm jobs", "Slurm's"
    none_now = "no Slurm job runs now (no job's cgroup or environment names one)"

    def __init__(self, job_id: str = "", *, context: ScreenContext | None = None) -> None:
        super().__init__(context=context)
        self.job_id = job_id
        if job_id:
            self.crumb = f"slurm {job_id}"
            self.jobs_title, self.whose = f"Slurm job {job_id}", f"Slurm job {job_id}'s"
            self.none_now = f"Slurm job {job_id} runs on none of these hosts now"

    def select(self, job: JobView) -> bool:
        """Slurm jobs (that one)."""
        w = job.workload
        return w is not None and w.slurm_job is not None and (not self.job_id or w.slurm_job == self.job_id)


VIEWS: dict[str, type[_View]] = {"hosts": HostsView, "jobs": JobsView, "gpus": GpusView, "pods": PodsView}
"""``:NAME`` -> the view it opens."""
VIEWS_OF: dict[str, type[JobsOfView]] = {"user": UserView, "ns": PodsView, "slurm": SlurmView}
"""``:NAME ARG`` -> the view it opens for ``ARG`` (``:slurm`` alone: every Slurm job)."""
