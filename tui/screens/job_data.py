"""What the job screen shows, worked out without a widget: its plots' figures, where its processes run.

A job is joined over its hosts and GPUs: :class:`JobFigures` reads each plot's window figures
(exact on one host or GPU, bounds when joined over several) and its aligned columns (its GPUs
averaged, its hosts summed) from the store; the other functions split the job's processes between
this machine and the hosts whose agents reach them.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from gpulens.core.sanitize import clean_text
from gpulens.store.store import Store
from gpulens.store.views import SUMMED, JobView, WindowStats
from gpulens.store.window import merge
from gpulens.tui.screens._plots import SeriesFeed, mean_series, reading_note, total

IsLocal = Callable[[str], bool]


class JobFigures:
    """The job ``key``'s plot figures: window statistics and aligned columns, joined over its hosts."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.feed = SeriesFeed()
        """The plots' aligned columns: per tick only the newest is read while the store's stamp holds."""

    def stats(self, store: Store, metric: str, w: float, view: JobView) -> tuple[WindowStats | None, str]:
        """The window figures of a plot (exact on one host or GPU, bounds when joined over several), and
        a note when its newest figure covers only some of the job's GPUs or hosts."""
        if metric.startswith("job."):
            return store.job_stats(self.key, metric, w), ""
        if metric.startswith("gpu."):
            parts = [store.window_stats(h, metric, w, gpu=int(g)) for h, g in view.gpus if g.isdigit()]
            return (merge(parts, False), _reading(parts, "GPUs")) if parts else (None, "")
        parts = [store.window_stats(h, metric, w) for h in view.hosts]
        return merge(parts, metric in SUMMED), _reading(parts, "hosts")

    def values(self, store: Store, metric: str, w: float, n: int, view: JobView) -> list[float]:
        """``n`` aligned columns of ``metric`` over the job (its GPUs averaged, its hosts summed); per
        tick only the newest columns are read and combined again (:meth:`SeriesFeed.combined`)."""
        feed = self.feed
        if metric.startswith("job."):
            return feed.job_series(store, self.key, metric, w, n)
        if metric.startswith("gpu."):
            gpus = tuple((h, int(g)) for h, g in view.gpus if g.isdigit())
            if not gpus:
                return mean_series([], n)
            parts = [feed.read(store, h, metric, w, n, gpu=g) for h, g in gpus]
            return feed.combined(("gpus", metric, gpus), parts, lambda cols: mean_series(cols, len(cols[0])))
        hosts = view.hosts
        return feed.combined(("hosts", metric, hosts), [feed.read(store, h, metric, w, n) for h in hosts], total)


def _reading(parts: list[WindowStats], what: str) -> str:
    """``"3 of 4 hosts read"`` when only some of ``parts`` have a newest figure (the others are n/a now)."""
    return reading_note(sum(1 for p in parts if p.now == p.now), len(parts), what)


@lru_cache(maxsize=16)
def shown_command(cmdline: str) -> str:
    """``cmdline`` made safe to show, kept while the job's command reads the same (asked every tick)."""
    return clean_text(cmdline)


def local_pids(view: JobView | None, is_local: IsLocal) -> list[int]:
    """The job's pids on this machine."""
    return [p.pid for h, p in view.processes if is_local(h)] if view is not None else []


def local_host(view: JobView | None, is_local: IsLocal) -> str | None:
    """The name this machine has among the job's hosts (None: the job does not run here)."""
    return next((h for h, _ in view.processes if is_local(h)), None) if view is not None else None


def remote_pids(view: JobView | None, is_local: IsLocal) -> dict[str, list[int]]:
    """The job's pids on other hosts, by host (their agents sample them)."""
    out: dict[str, list[int]] = {}
    for h, p in view.processes if view is not None else ():
        if not is_local(h):
            out.setdefault(h, []).append(p.pid)
    return out
