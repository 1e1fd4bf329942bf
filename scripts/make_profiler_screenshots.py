"""Render the profiler screens to screenshots/profiler_*.svg (fake service, fixed trace, frozen clock).

The same renders as tests/test_tui_profiler_snapshot.py: the list of traces,
the Analyze view and the timeline View with an event selected, each at 80x24
and 200x50. Usage: ``python scripts/make_profiler_screenshots.py``.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fakes.tui_fakes import pin_timezone  # noqa: E402
from tests.test_tui_profiler_snapshot import SHOTS, SIZES, ProfilerHost, frozen_monotonic, settle  # noqa: E402


async def render(shot: str, size: tuple[int, int]) -> str:
    top, keys = SHOTS[shot]
    app = ProfilerHost(top)
    async with app.run_test(size=size) as pilot:
        await settle(pilot, keys)
        return app.export_screenshot(title=f"gpulens profiler {shot}")


def main() -> int:
    pin_timezone()
    out = ROOT / "screenshots"
    out.mkdir(exist_ok=True)
    with frozen_monotonic():
        for shot in SHOTS:
            for w, h in SIZES:
                path = out / f"profiler_{shot}-{w}x{h}.svg"
                path.write_text(asyncio.run(render(shot, (w, h))), encoding="utf-8")
                print(path.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
