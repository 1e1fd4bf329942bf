"""The ``--demo`` source's own cost: 16 hosts x 8 GPUs sampled per tick, against the demo at ``--before``.

The peer is ``sources/demo.py`` as committed at ``--before`` (default 24e3482, before the
per-host plans and slotted twins), loaded from git into a private module; both make the
same ticks in turn (best of 5 rounds of 100 ticks each), and every sample is compared:
the two must be equal.

Usage: .venv/bin/python benchmarks/demo_sim.py [--before REV] [--hosts 16]
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpulens.sources.demo import DemoSource

ROOT = Path(__file__).resolve().parents[1]
T0 = 1_700_000_000.0


def old_demo(rev: str) -> type:
    text = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:sources/demo.py"], capture_output=True,
                          text=True, check=True).stdout
    path = Path(tempfile.mkdtemp()) / "demo_before.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("demo_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cls: type = module.DemoSource
    return cls


def per_tick_ms(src: object, hosts: int) -> float:
    rounds = []
    for r in range(5):
        t = time.thread_time()
        for k in range(100):
            for h in range(hosts):
                src.sample(h, T0 + r * 100 + k)  # type: ignore[attr-defined]
        rounds.append((time.thread_time() - t) / 100 * 1e3)
    return min(rounds)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", default="24e3482")
    parser.add_argument("--hosts", type=int, default=16)
    args = parser.parse_args()
    before = old_demo(args.before)(clock=lambda: T0, live=False, hosts=args.hosts)
    now = DemoSource(clock=lambda: T0, live=False, hosts=args.hosts)
    for k in range(60):
        for h in range(args.hosts):
            if before.sample(h, T0 + k * 1.5) != now.sample(h, T0 + k * 1.5):
                print(f"DIFFERENT: host {h} at +{k * 1.5} s")
                return 1
    old_ms, new_ms = per_tick_ms(before, args.hosts), per_tick_ms(now, args.hosts)
    t = time.thread_time()
    history = len(now.history(T0 + 300))
    hist_new = time.thread_time() - t
    t = time.thread_time()
    before.history(T0 + 300)
    hist_old = time.thread_time() - t
    print(f"demo, {args.hosts} hosts x 8 GPUs, CPU per tick (best of 5 x 100 ticks): {new_ms:.3f} ms; "
          f"at {args.before}: {old_ms:.3f} ms ({old_ms / new_ms:.1f}x); samples equal")
    print(f"300 s backfill ({history} samples): {1000 * hist_new:.0f} ms; at {args.before}: {1000 * hist_old:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
