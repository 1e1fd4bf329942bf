"""The ``--demo`` source's own cost: 16 hosts x 8 GPUs sampled per tick, against the demo at ``--before``.

The peer is ``sources/demo.py`` as committed at ``--before`` (default 24e3482, before the
per-host plans and slotted twins), loaded from git into a private module; both make the
same ticks in turns (5 rounds of 100 ticks each; printed: best, median, max), and every
sample is compared: the two must be equal. The 300 s backfill is timed 3 times each.

Usage: .venv/bin/python benchmarks/demo_sim.py [--before REV] [--hosts 16]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
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


def round_ms(src: object, hosts: int, r: int) -> float:
    """CPU ms per tick over 100 ticks (round ``r``)."""
    t = time.thread_time()
    for k in range(100):
        for h in range(hosts):
            src.sample(h, T0 + r * 100 + k)  # type: ignore[attr-defined]
    return (time.thread_time() - t) / 100 * 1e3


def history_ms(src: object) -> tuple[float, int]:
    t = time.thread_time()
    n = len(src.history(T0 + 300))  # type: ignore[attr-defined]
    return (time.thread_time() - t) * 1e3, n


def spread(xs: list[float], fmt: str = ".3f") -> str:
    return f"best {format(min(xs), fmt)}, median {format(statistics.median(xs), fmt)}, max {format(max(xs), fmt)}"


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
    old_r: list[float] = []
    new_r: list[float] = []
    for r in range(5):  # in turns, so load bursts hit both
        old_r.append(round_ms(before, args.hosts, r))
        new_r.append(round_ms(now, args.hosts, r))
    old_h: list[float] = []
    new_h: list[float] = []
    history = 0
    for _ in range(3):
        ms, history = history_ms(now)
        new_h.append(ms)
        old_h.append(history_ms(before)[0])
    old_ms, new_ms = min(old_r), min(new_r)
    print(f"demo, {args.hosts} hosts x 8 GPUs, CPU ms per tick (5 rounds x 100 ticks, in turns): {spread(new_r)}; "
          f"at {args.before}: {spread(old_r)} ({old_ms / new_ms:.1f}x best, "
          f"{statistics.median(old_r) / statistics.median(new_r):.1f}x median); samples equal")
    print(f"300 s backfill ({history} samples), ms, 3 runs in turns: {spread(new_h, '.0f')}; "
          f"at {args.before}: {spread(old_h, '.0f')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
