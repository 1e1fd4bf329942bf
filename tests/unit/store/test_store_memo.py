"""The store's shortcuts give what a full computation gives.

- ring extremes folded when a coarse bucket closes (``Ring._fold``) equal those kept per put;
- views kept between calls (``Store.jobs``/``fleet`` memo, per-job views kept while their
  hosts' versions hold, job totals kept from ingest) equal those of a fresh store fed the same
  events and those computed from the newest samples and public window means, tick after tick,
  with a host going down, a late sample, jobs that end and a job whose GPUs change.
"""

from __future__ import annotations

import math
import random
from dataclasses import replace

from gpulens.core.events import HostStatusEvent, SampleEvent, SourceEvent
from gpulens.core.model import JobInfo
from gpulens.sources.demo import DemoSource
from gpulens.store.panels import combine
from gpulens.store.ring import Ring
from gpulens.store.store import Store
from gpulens.store.views import BUSY_UTIL_PERCENT, FleetStats, JobView, job_key

T0 = 1_700_000_000.0
WINDOWS = (60.0, 3600.0)


def _puts(seed: int, n: int) -> list[tuple[int, list[float]]]:
    """In order, with gaps, backfill, duplicates, NaN, infinities, signed zeros; wraps both tiers."""
    rnd = random.Random(seed)
    out: list[tuple[int, list[float]]] = []
    fb = 1000
    for _ in range(400):
        fb += rnd.choice((1, 1, 1, 1, 2, 13))
        targets = [fb]
        if rnd.random() < 0.15:
            targets.append(fb - rnd.randrange(1, 40))  # late (maybe an older coarse bucket)
        if rnd.random() < 0.05:
            targets.append(fb)  # a duplicate of a filled bucket
        for b in targets:
            vals = [rnd.choice((math.nan, 0.0, -0.0, math.inf, -5.0)) if rnd.random() < 0.2
                    else rnd.uniform(-50, 150) for _ in range(n)]
            out.append((b, vals))
    return out


def test_folded_extremes_equal_per_put_extremes() -> None:
    for seed, (n, fine, coarse) in enumerate([(5, 30, 12), (3, 300, 40), (4, 10, 8), (3, 15, 9), (2, 7, 6)]):
        lazy, eager = Ring(n, fine, coarse), Ring(n, fine, coarse)
        eager._lazy = False
        pending_seen = 0
        for b, vals in _puts(seed, n):
            lazy.put(b, list(vals))
            eager.put(b, list(vals))
            pending_seen = max(pending_seen, len(lazy._pending))
            now_cb = b // 10 + 1
            for m in range(n):
                for k in (1, 3, coarse):
                    assert repr(lazy.window_extremes(m, now_cb, k)) == repr(eager.window_extremes(m, now_cb, k))
        assert (pending_seen > 1) == (fine >= 10)  # folding was exercised (not where the fine tier is short)
        wide_lazy, wide_eager = lazy.widened(n + 1), eager.widened(n + 1)
        for ring, ref in ((lazy, eager), (wide_lazy, wide_eager)):
            ring._fold()
            assert ring.cmax.tobytes() == ref.cmax.tobytes() and ring.cmin.tobytes() == ref.cmin.tobytes()
            assert ring.cbuf.tobytes() == ref.cbuf.tobytes() and ring.cmiss == ref.cmiss
            assert ring.fbuf.tobytes() == ref.fbuf.tobytes()


def _ticks() -> list[list[SourceEvent]]:
    """Demo samples, 14 hosts x 2 GPUs, 40 ticks (and a late one alone), with the cases a stale memo would get wrong."""
    demo = DemoSource(hosts=14, gpus_per_host=2, clock=lambda: T0, live=False)
    held: list[SourceEvent] = []
    ticks: list[list[SourceEvent]] = []
    for t in range(40):
        batch: list[SourceEvent] = []
        for h in range(14):
            name = demo.host_name(h)
            s = demo.sample(h, T0 + t)
            if h == 2 and 10 <= t < 20:  # node03 goes down, then comes back
                if t == 10:
                    batch.append(HostStatusEvent(host=name, up=False, reason="ssh: timeout", time=T0 + t))
                continue
            if h == 6 and t >= 22:  # carol's notebook ends
                s = replace(s, jobs=())
            if h == 12 and t >= 30:  # one of erin's servers ends (the job is keyed by host:pid)
                s = replace(s, jobs=())
            if h == 1 and t >= 28:  # node02's processes of 4711 take more memory on another GPU
                s = replace(s, jobs=tuple(replace(j, gpu_mem_bytes={**j.gpu_mem_bytes, "1": 7 * t})
                                          for j in s.jobs))
            if h == 5 and t == 15:  # a late sample, delivered three ticks on
                held.append(SampleEvent(s))
                continue
            batch.append(SampleEvent(s))
        if t == 18:
            ticks.append(held)  # on its own: ``now`` stays, only node06 changed
        if t == 26:  # node03's backfill: an old bucket of a host that is up to date
            batch.append(SampleEvent(demo.sample(2, T0 + 12), backfill=True))
        ticks.append(batch)
    return ticks


def _reference_jobs(store: Store, w: float) -> list[JobView]:
    """``Store.jobs`` computed from the newest samples and the public window means, as the store once did."""
    groups: dict[str, list[tuple[str, JobInfo]]] = {}
    for host in store.hosts():
        s = store.latest(host)
        for j in s.jobs if s is not None else ():
            groups.setdefault(job_key(host, j), []).append((host, j))
    out = []
    for key, procs in sorted(groups.items()):
        procs.sort(key=lambda hp: (hp[0], hp[1].pid))
        hosts = tuple(sorted({h for h, _ in procs}))
        utils = [store.window_mean(h, "job.gpu_utilization_percent", w, job=key) for h in hosts]
        cpu = [p.cpu_percent for _, p in procs if p.cpu_percent is not None]
        first = min(procs, key=lambda hp: hp[1].start_time)[1]
        reads_gpus = any((s := store.latest(h)) is not None and s.gpus for h in hosts)
        out.append(JobView(
            key=key, tree_id=first.tree_id, user=first.user, cmdline=first.cmdline, hosts=hosts,
            gpus=tuple(sorted({(h, i) for h, p in procs for i in p.gpu_mem_bytes})),
            util_percent=combine(utils, False),
            gpu_mem_bytes=float(sum(sum(p.gpu_mem_bytes.values()) for _, p in procs)) if reads_gpus else math.nan,
            cpu_percent=sum(cpu) if cpu else math.nan, start_time=first.start_time,
            runtime_s=max(0.0, store.now - first.start_time), processes=tuple(procs)))
    return out


def _reference_fleet(store: Store, w: float) -> FleetStats:
    """``Store.fleet`` from the public per-host and per-GPU window means."""
    metrics = ("gpu.utilization_percent", "gpu.sm_activity_percent", "gpu.mem_used_percent")
    sums, weights, busy, total, up = [0.0, 0.0, 0.0], [0, 0, 0], 0, 0, 0
    for host in store.hosts():
        n = len(store.gpu_indices(host))
        up += store.host_status(host)[0]
        total += n
        for j, metric in enumerate(metrics):
            v = store.window_mean(host, metric, w)
            if v == v and n:
                sums[j] += v * n
                weights[j] += n
        busy += sum(store.window_mean(host, metrics[0], w, gpu=g) >= BUSY_UTIL_PERCENT
                    for g in store.gpu_indices(host))
    util, sm, mem = (s / k if k else math.nan for s, k in zip(sums, weights, strict=True))
    return FleetStats(w, util, sm, mem, busy, total, len(store.hosts()), up, len(_reference_jobs(store, w)))


def _views(store: Store) -> list[str]:
    out = []
    for w in WINDOWS:
        out += [repr(store.jobs(w)), repr(store.fleet(w))]
        for host in ("gpu-node01", "gpu-node03", "gpu-node06", "gpu-node07", "gpu-node13"):
            out.append(repr(store.host_row(host, w)) if host in store.hosts() else "-")
            for metric, gpu in (("gpu.utilization_percent", None), ("gpu.power_w", 1), ("cpu.total_percent", None)):
                out.append(repr(store.series(host, metric, w, 40, gpu=gpu)))
                out.append(repr(store.series(host, metric, w, 40, gpu=gpu, aligned=True)))
                out.append(repr(store.window_stats(host, metric, w, gpu=gpu)))
        for job in ("4711", "4720", "gpu-node13:11200"):
            out.append(repr(store.job_series(job, "job.gpu_utilization_percent", w, 40)))
            out.append(repr(store.job_stats(job, "job.cpu_percent", w)))
    return out


def test_views_equal_a_fresh_computation_every_tick() -> None:
    ticks = _ticks()
    kept = Store()
    history: list[SourceEvent] = []
    job_counts = []
    for batch in ticks:
        kept.apply_many(batch)
        history += batch
        kept.jobs(60.0)  # views read mid-tick, kept by the memo for the next calls
        fresh = Store()
        fresh.apply_many(history)
        assert _views(kept) == _views(fresh)
        assert _views(kept) == _views(fresh)  # the memo's second answers too
        for w in WINDOWS:
            assert repr(kept.jobs(w)) == repr(_reference_jobs(kept, w))
            assert repr(kept.fleet(w)) == repr(_reference_fleet(kept, w))
        job_counts.append(len(kept.jobs(60.0)))
        assert kept.fleet(60.0).jobs == job_counts[-1]
    assert job_counts[22] > job_counts[23] > job_counts[36] > 0  # the jobs that end are gone


def test_jobs_memo_keeps_views_of_unchanged_hosts_only() -> None:
    demo = DemoSource(hosts=14, gpus_per_host=2, clock=lambda: T0, live=False)
    store = Store()
    store.apply_many([SampleEvent(demo.sample(h, T0 + t)) for t in range(3) for h in range(14)])
    before = {j.key: j for j in store.jobs(60.0)}
    assert store.jobs(60.0) is store.jobs(60.0)
    # A late sample of node05 (bob's job 4712 runs on node05-06): ``now`` stays, so only 4712 changes.
    assert not store.apply(SampleEvent(demo.sample(4, T0 + 1.0)))  # a duplicate: nothing changes
    assert store.jobs(60.0) == list(before.values())
    assert store.apply(SampleEvent(demo.sample(4, T0 - 5.0), backfill=True))
    after = {j.key: j for j in store.jobs(60.0)}
    assert after.keys() == before.keys()
    changed = {k for k in after if after[k] is not before[k]}
    assert changed == {"4712"}
    fresh = Store()
    fresh.apply_many([SampleEvent(demo.sample(h, T0 + t)) for t in range(3) for h in range(14)])
    fresh.apply(SampleEvent(demo.sample(4, T0 - 5.0), backfill=True))
    assert repr(fresh.jobs(60.0)) == repr(list(after.values()))
    # A status change bumps the host's version: its jobs' views are rebuilt, equal to a fresh one.
    store.apply(HostStatusEvent(host="gpu-node01", up=False, reason="x", time=T0 + 3))
    again = {j.key: j for j in store.jobs(60.0)}
    assert again["4711"] is not after["4711"] and again["4712"] is after["4712"]
    assert repr(again["4711"]) == repr(after["4711"])
