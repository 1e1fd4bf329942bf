"""Analyze screen repaint cost with its three plotext charts (two real ranks), headless.

One repaint = the screen and its three ChartViews refreshed and painted
(``pilot.pause`` waits for the paint). gpulens: each chart is drawn once per
(analysis, size) and kept. Peer, measured in the same run: the same screen
with the cache turned off, so plotext draws every chart on every repaint.

Usage: .venv/bin/python benchmarks/analyze_charts.py [--repaints 30]
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


async def measure(cached: bool, repaints: int, data: tuple[Any, Any]) -> tuple[float, int]:
    """Median ms per repaint and how many times plotext ran."""
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
        return statistics.median(times), sum(v.draws for v in views)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repaints", type=int, default=30)
    args = parser.parse_args()
    data = analyze_paths([str(p) for p in RANKS])
    ours, our_draws = asyncio.run(measure(True, args.repaints, data))
    peer, peer_draws = asyncio.run(measure(False, args.repaints, data))
    print(f"repaint, charts cached:   {ours:.2f} ms median, plotext ran {our_draws} times")
    print(f"repaint, drawn each time: {peer:.2f} ms median, plotext ran {peer_draws} times")
    print(f"ratio (cached / peer): {ours / peer:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
