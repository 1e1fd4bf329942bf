"""Analyze screen repaint cost with its three plotext charts (two real ranks), headless.

One repaint = the screen and its three ChartViews refreshed and painted
(``pilot.pause`` waits for the paint). gpulens: each chart is drawn once per
(analysis, size) and kept. Peer, measured in the same run: the same screen
with the cache turned off, so plotext draws every chart on every repaint.
Each side runs ``--rounds`` times (default 3), a fresh app each, in turns.

Usage: .venv/bin/python benchmarks/analyze_charts.py [--repaints 30] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from textual.app import App  # noqa: E402

from gpulens.tui.screens.profiler_views import AnalyzeScreen  # noqa: E402
from gpulens.tui.screens.profiler_work import analyze_paths  # noqa: E402
from gpulens.tui.widgets.step_chart import ChartView  # noqa: E402

RANKS = [ROOT / "tests/data/traces/sampled_rank-0.json.gz", ROOT / "tests/data/traces/sampled_rank-1.json.gz"]


class NoCache(dict[Any, Any]):
    """A cache that keeps nothing: every repaint draws again (the peer)."""

    def __setitem__(self, key: Any, value: Any) -> None:
        pass


class Host(App[None]):
    def __init__(self, screen: AnalyzeScreen) -> None:
        super().__init__()
        self._screen = screen

    def on_mount(self) -> None:
        self.push_screen(self._screen)


async def measure(cached: bool, repaints: int, data: tuple[Any, Any]) -> tuple[list[float], int]:
    """ms per repaint and how many times plotext ran."""
    screen = AnalyzeScreen(data[0], "2 ranks", data[1])
    app = Host(screen)
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.pause()
        views = list(screen.query(ChartView))
        if not cached:
            for v in views:
                v._cache = NoCache()
        times = []
        for _ in range(repaints):
            t = time.perf_counter()
            for v in views:
                v.refresh()
            await pilot.pause()
            times.append((time.perf_counter() - t) * 1000)
        return times, sum(v.draws for v in views)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repaints", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3, help="fresh apps per side, in turns (default 3)")
    args = parser.parse_args()
    data = analyze_paths([str(p) for p in RANKS])
    times: dict[bool, list[list[float]]] = {True: [], False: []}
    draws: dict[bool, int] = {}
    for r in range(args.rounds):  # a fresh app each, in turns (the order swapped each round)
        for cached in ((True, False) if r % 2 == 0 else (False, True)):
            got, draws[cached] = asyncio.run(measure(cached, args.repaints, data))
            times[cached].append(got)
    med = {k: statistics.median(x for run in v for x in run) for k, v in times.items()}

    def spread(k: bool) -> str:
        meds = [statistics.median(run) for run in times[k]]
        return f"{med[k]:.2f} ms median (rounds {min(meds):.2f}-{max(meds):.2f})"

    print(f"{args.rounds} rounds of {args.repaints} repaints per side; median over all, min-max of the round medians")
    print(f"repaint, charts cached:   {spread(True)}, plotext ran {draws[True]} times (last round)")
    print(f"repaint, drawn each time: {spread(False)}, plotext ran {draws[False]} times (last round)")
    print(f"ratio of medians (cached / peer): {med[True] / med[False]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
