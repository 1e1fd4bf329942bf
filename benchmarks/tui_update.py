"""Overview update cost with 256 hosts x 8 GPUs (demo fleet), headless.

One update = a tick of 256 host samples applied to the store, the overview
refreshed and the screen repainted (``pilot.pause`` waits for the paint).
Target: median <= 50 ms.

Peers, measured in the same run on the same ticks (each its own headless app,
same size, fed from its own store):

* ``DataTable, update_cell`` -- Textual's best way to keep a changing table:
  the table is built once, keyed by host and column; per update each host's
  row is formatted, and only the cells whose text changed are written with
  ``update_cell`` (the column widened with ``update_width=True`` only when a
  value no longer fits); rows are added or removed only when hosts come or go.
* ``DataTable, rebuild`` -- the naive way, for reference: the table cleared
  (``clear(columns=True)``) and rebuilt on every update (the peer before
  issue 33).

Each side runs ``--rounds`` times (a fresh app each round, the order rotated
each round so load bursts hit all of them); printed per side: the median over
every tick of every round, the min and max of the per-round medians, and the
ratios of the medians. The machine is shared: read the spread.

Usage: .venv/bin/python benchmarks/tui_update.py [--ticks 30] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.cells import cell_len
from textual.app import App, ComposeResult
from textual.widgets import DataTable

from gpulens.core.events import SampleEvent
from gpulens.sources.demo import DemoSource
from gpulens.store.store import Store
from gpulens.tui.app import GpulensApp

T0 = 1_700_000_000.0
HOSTS = 256
COLUMNS = ("Host", "GPUs", "Util", "SM", "GPU mem", "Power", "CPU", "Net", "Alerts")
Times = tuple[list[float], list[float]]


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


def host_cells(store: Store, h: str) -> tuple[str, ...]:
    r = store.host_row(h, 300)
    return (h, str(r.gpus), f"{r.util_percent:.0f}%", f"{r.sm_percent:.0f}%", f"{r.gpu_mem_percent:.0f}%",
            f"{r.power_w:.0f}W", f"{r.cpu_percent:.0f}%", f"{r.net_bytes_per_s:.0f}", " ".join(r.alerts))


class TablePeer(App[None]):
    """A DataTable of the hosts; each peer's ``update()`` is its whole per-tick table work."""

    def __init__(self, store: Store) -> None:
        super().__init__()
        self.store = store

    def compose(self) -> ComposeResult:
        yield DataTable()


class Rebuild(TablePeer):
    """The naive way: clear the table (columns too) and add every row again."""

    def update(self) -> None:
        table = self.query_one(DataTable)
        table.clear(columns=True)
        table.add_columns(*COLUMNS)
        for h in self.store.hosts():
            table.add_row(*host_cells(self.store, h))


class UpdateCell(TablePeer):
    """Textual's way for a changing table: write only the cells that changed; rows only as hosts come or go."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.shown: dict[str, tuple[str, ...]] = {}
        self.writes = 0

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for name in COLUMNS:
            table.add_column(name, key=name)

    def update(self) -> None:
        table = self.query_one(DataTable)
        hosts = self.store.hosts()
        gone = self.shown.keys() - set(hosts)
        for h in gone:
            table.remove_row(h)
            del self.shown[h]
        for h in hosts:
            cells = host_cells(self.store, h)
            old = self.shown.get(h)
            if old is None:
                table.add_row(*cells, key=h)
            else:
                for key, was, now in zip(COLUMNS, old, cells, strict=True):
                    if now != was:
                        wider = cell_len(now) > table.columns[key].content_width  # type: ignore[index]
                        table.update_cell(h, key, now, update_width=wider)
                        self.writes += 1
            self.shown[h] = cells


async def table_update(cls: type[Rebuild | UpdateCell], n: int) -> tuple[list[float], list[float], float]:
    demo = DemoSource(seed=1, hosts=HOSTS, clock=lambda: T0, live=False, backfill_s=60)
    store = Store()
    demo.start(store.apply)
    app = cls(store)
    batches = ticks(demo, n)
    out, cpu = [], []
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.pause()
        app.update()  # the first fill is not an update (it is every row added, for both peers)
        await pilot.pause()
        writes0 = getattr(app, "writes", 0)
        for batch in batches:
            t, c = time.perf_counter(), time.thread_time()
            store.apply_many(list(batch))
            app.update()
            await pilot.pause()
            out.append((time.perf_counter() - t) * 1000)
            cpu.append((time.thread_time() - c) * 1000)
        writes = (getattr(app, "writes", 0) - writes0) / n
    return out, cpu, writes


def spread(rounds: list[list[float]]) -> str:
    """Median over all ticks of all rounds, and the min-max of the per-round medians."""
    meds = [statistics.median(r) for r in rounds]
    every = [x for r in rounds for x in r]
    return f"{statistics.median(every):6.1f} (rounds {min(meds):.1f}-{max(meds):.1f})"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ticks", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    n = args.ticks
    wall: dict[str, list[list[float]]] = {}
    cpu: dict[str, list[list[float]]] = {}
    idle: list[list[float]] = []
    writes: list[float] = []

    async def ours() -> None:
        w, c, i = await gpulens_update(n)
        wall.setdefault("gpulens", []).append(w)
        cpu.setdefault("gpulens", []).append(c)
        idle.append(i)

    def peer(name: str, cls: type[Rebuild | UpdateCell]) -> Callable[[], Coroutine[Any, Any, None]]:
        async def run() -> None:
            w, c, k = await table_update(cls, n)
            wall.setdefault(name, []).append(w)
            cpu.setdefault(name, []).append(c)
            if cls is UpdateCell:
                writes.append(k)
        return run

    sides = [ours, peer("update_cell", UpdateCell), peer("rebuild", Rebuild)]
    load = os.getloadavg()[0]
    for r in range(args.rounds):
        for side in sides[r % len(sides):] + sides[: r % len(sides)]:
            asyncio.run(side())
    med = {k: statistics.median(x for r in v for x in r) for k, v in wall.items()}
    med_cpu = {k: statistics.median(x for r in v for x in r) for k, v in cpu.items()}
    idle_med = statistics.median(x for r in idle for x in r)
    print(f"{HOSTS} hosts x 8 GPUs, {n} updates x {args.rounds} rounds per side, 160x45 headless; "
          f"load average {load:.2f} -> {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print(f"ms per update: median over all ticks (min-max of the {args.rounds} per-round medians)")
    print(f"  gpulens overview update                : wall {spread(wall['gpulens'])}  CPU {spread(cpu['gpulens'])}"
          "  (target <= 50 ms)")
    print(f"    of which the harness's idle wait (pilot.pause() with nothing to do): {spread(idle)}; "
          f"update without it: {med['gpulens'] - idle_med:.1f} ms wall")
    print(f"  peer: DataTable, update_cell (changed)  : wall {spread(wall['update_cell'])}  CPU "
          f"{spread(cpu['update_cell'])}  ({statistics.median(writes):.0f} of {HOSTS * len(COLUMNS)} cells "
          "written per update)")
    print(f"  ref.: DataTable, clear + rebuild        : wall {spread(wall['rebuild'])}  CPU {spread(cpu['rebuild'])}")
    for name in ("update_cell", "rebuild"):
        print(f"ratio gpulens / {name:11s} (medians): {med['gpulens'] / med[name]:.2f} wall, "
              f"{med_cpu['gpulens'] / med_cpu[name]:.2f} CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
