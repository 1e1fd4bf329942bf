"""Overview update cost with 256 hosts x 8 GPUs (demo fleet), headless.

One update = a tick of 256 host samples applied to the store, the overview
refreshed and the screen repainted (``pilot.pause`` waits for the paint).
Peer, measured in the same run: the naive way, a DataTable of the 256 hosts
cleared and rebuilt on every update. Target: median <= 50 ms.

Usage: .venv/bin/python benchmarks/tui_update.py [--ticks 30]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from textual.app import App, ComposeResult
from textual.widgets import DataTable

from gpulens.core.events import SampleEvent
from gpulens.sources.demo import DemoSource
from gpulens.store.store import Store
from gpulens.tui.app import GpulensApp

T0 = 1_700_000_000.0
HOSTS = 256


def ticks(demo: DemoSource, n: int) -> list[list[SampleEvent]]:
    return [[SampleEvent(demo.sample(h, T0 + k)) for h in range(HOSTS)] for k in range(1, n + 1)]


async def gpulens_update(n: int) -> tuple[list[float], list[float], list[float]]:
    demo = DemoSource(seed=1, hosts=HOSTS, clock=lambda: T0, live=False, backfill_s=60)
    app = GpulensApp(source=demo, clock=lambda: T0)
    batches = ticks(demo, n)
    out, cpu, idle = [], [], []
    async with app.run_test(size=(160, 45)) as pilot:
        for _ in range(3):
            await pilot.pause()
        # The harness's own cost: pilot.pause() with nothing to do still waits for idle.
        for _ in range(n):
            t = time.perf_counter()
            await pilot.pause()
            idle.append((time.perf_counter() - t) * 1000)
        for batch in batches:
            t, c = time.perf_counter(), time.thread_time()
            app.store.apply_many(list(batch))
            app.refresh_data()
            await pilot.pause()
            out.append((time.perf_counter() - t) * 1000)
            cpu.append((time.thread_time() - c) * 1000)
    return out, cpu, idle


class Naive(App[None]):
    def __init__(self, store: Store) -> None:
        super().__init__()
        self.store = store

    def compose(self) -> ComposeResult:
        yield DataTable()

    def rebuild(self) -> None:
        table = self.query_one(DataTable)
        table.clear(columns=True)
        table.add_columns("Host", "GPUs", "Util", "SM", "GPU mem", "Power", "CPU", "Net", "Alerts")
        for h in self.store.hosts():
            r = self.store.host_row(h, 300)
            table.add_row(h, r.gpus, f"{r.util_percent:.0f}%", f"{r.sm_percent:.0f}%",
                          f"{r.gpu_mem_percent:.0f}%", f"{r.power_w:.0f}W", f"{r.cpu_percent:.0f}%",
                          f"{r.net_bytes_per_s:.0f}", " ".join(r.alerts))


async def naive_update(n: int) -> tuple[list[float], list[float]]:
    demo = DemoSource(seed=1, hosts=HOSTS, clock=lambda: T0, live=False, backfill_s=60)
    store = Store()
    demo.start(store.apply)
    app = Naive(store)
    batches = ticks(demo, n)
    out, cpu = [], []
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.pause()
        for batch in batches:
            t, c = time.perf_counter(), time.thread_time()
            store.apply_many(list(batch))
            app.rebuild()
            await pilot.pause()
            out.append((time.perf_counter() - t) * 1000)
            cpu.append((time.thread_time() - c) * 1000)
    return out, cpu


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ticks", type=int, default=30)
    args = parser.parse_args()
    ours, ours_cpu, idle = (statistics.median(x) for x in asyncio.run(gpulens_update(args.ticks)))
    naive, naive_cpu = (statistics.median(x) for x in asyncio.run(naive_update(args.ticks)))
    print(f"gpulens overview update, {HOSTS} hosts x 8 GPUs: median {ours:.1f} ms wall, "
          f"{ours_cpu:.1f} ms CPU (target <= 50 ms)")
    print(f"  of which the harness's idle wait (pilot.pause() with nothing to do): {idle:.1f} ms; "
          f"update without it: {ours - idle:.1f} ms wall")
    print(f"naive DataTable rebuild of the host table alone: median {naive:.1f} ms wall, "
          f"{naive_cpu:.1f} ms CPU")
    print(f"ratio gpulens / naive: {ours / naive:.2f} wall, {ours_cpu / naive_cpu:.2f} CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
