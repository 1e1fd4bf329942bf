"""Store memory for 1,000 hosts x 8 GPUs x 1 h, measured vs the computed bound.

Rings are preallocated at full size when a host, GPU or job first appears, so
samples spanning the whole hour plus every window statistic give the steady
state; it does not grow with run time. Peer: the same samples kept naively
as the HostSample objects of one hour would cost (extrapolated from 10 s).

Usage: .venv/bin/python benchmarks/store_memory.py [--hosts 1000]
"""

from __future__ import annotations

import argparse
import sys
import tracemalloc

from gpulens.core.events import SampleEvent
from gpulens.sources.demo import DemoSource
from gpulens.store.store import Store, memory_estimate_bytes

T0 = 1_700_000_000.0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, default=1000)
    args = parser.parse_args()
    demo = DemoSource(seed=1, hosts=args.hosts, clock=lambda: T0, live=False)
    samples = [demo.sample(h, t) for t in (T0 - 3599, T0) for h in range(args.hosts)]
    tracemalloc.start()
    store = Store()
    for s in samples:
        store.apply(SampleEvent(s))
    for w in (60, 300, 900, 3600):
        for h in store.hosts():
            store.host_row(h, w)
        store.fleet(w)
    used, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    jobs = sum(len(s.jobs) for s in samples[-args.hosts:]) / args.hosts
    est = memory_estimate_bytes(args.hosts, 8, round(jobs))
    tracemalloc.start()
    ten_s = [demo.sample(h, T0 + k) for k in range(10) for h in range(args.hosts)]
    naive, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del ten_s
    print(f"store, {args.hosts} hosts x 8 GPUs x 1 h: {used / 1e6:.0f} MB measured "
          f"(arrays computed: {est / 1e6:.0f} MB; the rest is Python objects and caches)")
    print(f"naive: keeping 1 h of HostSample objects would take {naive * 360 / 1e9:.1f} GB")
    print(f"ratio store / naive: {used / (naive * 360):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
