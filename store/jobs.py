"""Jobs in the store: each host's job series at ingest, and the job views joined over hosts.

:class:`JobViews` keeps each job's :class:`~gpulens.store.views.JobView` between
calls and rebuilds it only when one of its hosts changed (``HostState.version``)
or the store's ``now`` moved; each host's newest processes are grouped by job
key once per sample. The views are the ones a full computation gives
(``tests/unit/store/test_store_memo.py`` compares them tick by tick).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from operator import attrgetter

from gpulens.core.model import HostSample, JobInfo
from gpulens.store.host import HostState
from gpulens.store.panels import combine
from gpulens.store.ring import NAN, Ring
from gpulens.store.views import JobView, job_key, job_totals

MAX_JOBS_PER_HOST = 256
Groups = dict[str, list[JobInfo]]
"""Processes by job key."""
Totals = dict[str, tuple[set[str], int]]
"""Per job key: the GPU indices its processes hold memory on, and the bytes they hold."""
_PID = attrgetter("pid")


def add_jobs(h: HostState, s: HostSample, fb: int, util: Mapping[str, float],
             make_ring: Callable[[], Ring], history_s: float) -> tuple[Groups, Totals]:
    """Store ``s``'s jobs in ``h``'s job rings at fine bucket ``fb`` (``util``: GPU utilization by index).

    Returns the processes by job key (in sample order: :func:`latest_jobs` of ``s``, unsorted) and
    per key the GPU indices they hold memory on and the bytes they hold.
    """
    host, t = s.host, s.time
    groups: dict[str, list[JobInfo]] = {}
    for j in s.jobs:
        key = job_key(host, j)
        procs = groups.get(key)
        if procs is None:
            groups[key] = [j]
        else:
            procs.append(j)
    seen = h.job_seen
    totals: Totals = {}
    for key, procs in groups.items():
        ring = h.jobs.get(key)
        if ring is None:
            if len(h.jobs) >= MAX_JOBS_PER_HOST:
                evict_jobs(h, t, history_s, force=True)
            ring = h.jobs[key] = make_ring()
        values, used, mem = job_totals(procs, util)
        totals[key] = (used, mem)
        ring.put(fb, values)
        old = seen.get(key)
        if old is None or t > old:  # max(old, t), the newest time the job was seen
            seen[key] = t
    evict_jobs(h, t, history_s, force=False)
    return groups, totals


def evict_jobs(h: HostState, now: float, history_s: float, force: bool) -> None:
    """Drop the job series not seen for ``history_s``; ``force``: at least the oldest one."""
    old = [k for k, t in h.job_seen.items() if now - t > history_s]
    if force and not old:
        old = [min(h.job_seen, key=h.job_seen.__getitem__)]
    for k in old:
        h.jobs.pop(k, None)
        h.job_seen.pop(k, None)


def latest_jobs(name: str, h: HostState) -> dict[str, list[JobInfo]]:
    """``h.latest``'s processes by job key, each group by pid (in sample order among equal pids)."""
    groups = h.latest_jobs
    if groups is None:
        groups = {}
        for j in h.latest.jobs if h.latest is not None else ():
            groups.setdefault(job_key(name, j), []).append(j)
        h.latest_jobs, h.latest_sorted, h.latest_totals = groups, False, {}
    if not h.latest_sorted:
        for procs in groups.values():
            procs.sort(key=_PID)
        h.latest_sorted = True
    return groups


class JobViews:
    """The jobs of the hosts' newest samples, joined by key; each view kept while its inputs hold."""

    __slots__ = ("_views",)

    def __init__(self) -> None:
        # window_s -> key -> ((now, hosts, their versions), view)
        self._views: dict[float, dict[str, tuple[tuple[object, ...], JobView]]] = {}

    def jobs(self, hosts: Mapping[str, HostState], now: float, window_s: float, now_cb: int,
             k: int) -> list[JobView]:
        """Every job, sorted by key (``now_cb``, ``k``: the window's coarse buckets)."""
        by_key: dict[str, list[str]] = {}
        for name, h in hosts.items():
            if h.latest is not None and h.latest.jobs:
                for key in latest_jobs(name, h):
                    names = by_key.get(key)
                    if names is None:
                        by_key[key] = [name]
                    else:
                        names.append(name)
        old = self._views.get(window_s, {})
        if len(self._views) >= 8 and window_s not in self._views:
            self._views.clear()
        kept: dict[str, tuple[tuple[object, ...], JobView]] = {}
        out: list[JobView] = []
        for key in sorted(by_key):
            names = sorted(by_key[key])
            stamp = (now, tuple(names), tuple([hosts[n].version for n in names]))
            hit = old.get(key)
            if hit is not None and hit[0] == stamp:
                view = hit[1]
            else:
                view = job_view(key, names, hosts, now, now_cb, k)
            kept[key] = (stamp, view)
            out.append(view)
        self._views[window_s] = kept
        return out


def job_view(key: str, names: list[str], hosts: Mapping[str, HostState], now: float, now_cb: int,
             k: int) -> JobView:
    """One job over the hosts ``names`` (sorted) that run it."""
    procs = [(n, p) for n in names for p in latest_jobs(n, hosts[n])[key]]
    totals = [hosts[n].latest_totals.get(key) for n in names]
    if None in totals:  # not recorded at ingest: from the processes
        totals = [job_totals([p for m, p in procs if m == n], {})[1:] for n in names]
    gpus = tuple(sorted({(n, i) for n, t in zip(names, totals, strict=True) if t is not None for i in t[0]}))
    utils = []
    for n in names:
        ring = hosts[n].jobs.get(key)
        v = ring.window_mean(0, now_cb, k) if ring is not None else NAN
        utils.append(v + 0.0 if v == v else NAN)  # as Store.window_mean: a sum of one value
    cpu = [p.cpu_percent for _, p in procs if p.cpu_percent is not None]
    first = min(procs, key=lambda hp: hp[1].start_time)[1]
    return JobView(
        key=key, tree_id=first.tree_id, user=first.user, cmdline=first.cmdline, hosts=tuple(names),
        gpus=gpus, util_percent=combine(utils, False),
        gpu_mem_bytes=_gpu_mem(names, hosts, sum(t[1] for t in totals if t is not None)),
        cpu_percent=sum(cpu) if cpu else NAN, start_time=first.start_time,
        runtime_s=max(0.0, now - first.start_time), processes=tuple(procs),
    )


def _gpu_mem(names: list[str], hosts: Mapping[str, HostState], held: int) -> float:
    """Bytes of GPU memory the job holds; NaN (n/a) when none of its hosts reads GPUs."""
    if not any((s := hosts[n].latest) is not None and s.gpus for n in names):
        return NAN
    return float(held)
