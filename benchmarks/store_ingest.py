"""Store cost per tick with the demo fleet (16 hosts x 8 GPUs at 1 Hz): ingest and overview reads.

After a 300 s backfill, each tick applies the 16 hosts' samples
(``Store.apply_many``), then reads what the overview reads per tick:
``fleet(w)`` once and ``jobs(w)`` twice (the first call after the tick, then
again with the store unchanged). Figures are ms per tick (mean over the
ticks, thread CPU time).

Peer, measured in the same run: the store as committed at ``--before`` (a git
revision, default ``HEAD``), loaded from git into a private package, fed the
same samples in lockstep (so load bursts hit both); both must give equal fleet/jobs views
and window extremes (checked every tick).

Once this store is committed, name the peer: ``--before 24e3482`` (the store before the
lazy extremes and job-view memo).

Usage: .venv/bin/python benchmarks/store_ingest.py [--ticks 300] [--hosts 16] [--window 300]
       [--before REV]
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpulens.core.events import SampleEvent, SourceEvent
from gpulens.sources.demo import DemoSource
from gpulens.store.store import Store

T0 = 1_700_000_000.0
ROOT = Path(__file__).resolve().parent.parent


def old_store(rev: str, into: Path) -> type[Any] | None:
    """``Store`` as committed at ``rev`` (``store/*.py`` from git, imports renamed), or None."""
    try:
        names = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "--name-only", rev, "store/"],
                               check=True, capture_output=True, text=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return None
    pkg = into / "_store_before"
    pkg.mkdir()
    for name in names:
        if not name.endswith(".py"):
            continue
        text = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{name}"], check=True,
                              capture_output=True, text=True).stdout
        (pkg / Path(name).name).write_text(text.replace("gpulens.store.", "_store_before."))
    sys.path.insert(0, str(into))
    mod: ModuleType = importlib.import_module("_store_before.store")
    return mod.Store  # type: ignore[no-any-return]


def _tick(store: Any, batch: list[SourceEvent], window_s: float, out: dict[str, list[float]]) -> tuple[Any, ...]:
    clock = time.thread_time
    t0 = clock()
    store.apply_many(batch)
    t1 = clock()
    jobs = store.jobs(window_s)
    t2 = clock()
    store.jobs(window_s)
    t3 = clock()
    fleet = store.fleet(window_s)
    t4 = clock()
    out["apply_many"].append(t1 - t0)
    out["jobs (first)"].append(t2 - t1)
    out["jobs (again)"].append(t3 - t2)
    out["fleet"].append(t4 - t3)
    extremes = [store.window_stats(f"gpu-node{h:02d}", "gpu.temperature_c", window_s, gpu=g)
                for h in (1, 5, 11) for g in (0, 2, 3)]
    return fleet, jobs, extremes


def run(classes: list[type[Any]], backfill: list[SourceEvent], ticks: list[list[SourceEvent]],
        window_s: float) -> tuple[list[dict[str, list[float]]], list[list[tuple[Any, ...]]]]:
    """Feed every store the same ticks in lockstep (alternating which goes first), so load bursts hit all."""
    stores = [cls() for cls in classes]
    for store in stores:
        store.apply_many(backfill)
    times: list[dict[str, list[float]]] = [
        {"apply_many": [], "fleet": [], "jobs (first)": [], "jobs (again)": []} for _ in stores]
    views: list[list[tuple[Any, ...]]] = [[] for _ in stores]
    for k, batch in enumerate(ticks):
        order = range(len(stores)) if k % 2 else reversed(range(len(stores)))
        for i in order:
            views[i].append(_tick(stores[i], batch, window_s, times[i]))
    return times, views


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ticks", type=int, default=300)
    ap.add_argument("--hosts", type=int, default=16)
    ap.add_argument("--window", type=float, default=300.0, help="the overview's (default 5 min)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--before", default="HEAD", help="git revision of the peer store ('' for none)")
    args = ap.parse_args()
    demo = DemoSource(hosts=args.hosts, clock=lambda: T0, live=False, backfill_s=300)
    backfill: list[SourceEvent] = list(demo.history())
    ticks: list[list[SourceEvent]] = [[SampleEvent(demo.sample(h, T0 + k)) for h in range(args.hosts)]
                                      for k in range(args.ticks)]
    with tempfile.TemporaryDirectory() as tmp:
        before = old_store(args.before, Path(tmp)) if args.before else None
        stores = [("now", Store)] + ([(f"before ({args.before})", before)] if before else [])
        labels = [label for label, _ in stores]
        rounds = [run([cls for _, cls in stores], backfill, ticks, args.window) for _ in range(args.rounds)]
    print(f"{args.hosts} hosts x {demo.gpus_per_host} GPUs, {args.ticks} ticks after a 300 s backfill, "
          f"window {args.window:g} s; ms per tick (mean over ticks; best of {args.rounds} rounds, then the worst round)")
    for i, label in enumerate(labels):
        means = {k: [statistics.fmean(r[0][i][k]) * 1000 for r in rounds] for k in rounds[0][0][i]}
        print(f"  {label:14s} " + "  ".join(f"{k} {min(v):.3f} ({max(v):.3f})" for k, v in means.items()))
    if len(labels) == 2:
        a, b = rounds[0][1]
        same = all(repr(x) == repr(y) for x, y in zip(a, b, strict=True))
        print(f"  views equal to the peer's every tick: {same}")
        if not same:
            sys.exit(1)


if __name__ == "__main__":
    main()
