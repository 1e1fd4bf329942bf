"""Render every TUI screen (and the GPU and process detail screens) to screenshots/*.svg (demo fleet, seed 7, frozen clock).

The same renders as tests/test_tui_snapshot.py. Usage: ``python scripts/make_screenshots.py``.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fakes.tui_fakes import demo_app, pin_timezone  # noqa: E402
from tests.test_tui_snapshot import DETAIL_SCREENS, SCREENS, SIZES, _open, open_detail  # noqa: E402


async def render(screen: str, size: tuple[int, int]) -> str:
    app = demo_app()
    async with app.run_test(size=size) as pilot:
        if screen in DETAIL_SCREENS:
            await open_detail(pilot, screen)
        else:
            await _open(pilot, *SCREENS[screen])
        return app.export_screenshot(title=f"gpulens {screen}")


def main() -> int:
    pin_timezone()
    out = ROOT / "screenshots"
    out.mkdir(exist_ok=True)
    for screen in (*SCREENS, *DETAIL_SCREENS):
        for w, h in SIZES:
            path = out / f"{screen}-{w}x{h}.svg"
            path.write_text(asyncio.run(render(screen, (w, h))), encoding="utf-8")
            print(path.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
