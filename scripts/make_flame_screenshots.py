"""Render the flame graph screens to screenshots/flame_*.svg.

GPU memory: the real PyTorch memory snapshot in tests/data; CPU: a real
perf capture (FlameGraph's vert.x folded stacks); search, sandwich, table
and guide: the small Python-like training profile of tests/test_flame_tui.py.
Usage: ``python scripts/make_flame_screenshots.py``.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpulens.analysis.flame.importers import load_profile  # noqa: E402
from gpulens.analysis.flame.model import Profile  # noqa: E402
from gpulens.tui.screens.flame import FlameApp  # noqa: E402
from tests.test_flame_tui import training_profile  # noqa: E402

SIZE = (120, 34)
DATA = ROOT / "tests" / "data"


def shots() -> list[tuple[str, Profile, list[str]]]:
    memory = load_profile(str(DATA / "memory_snapshots" / "mini_snapshot.pickle"))
    cpu = load_profile(str(DATA / "stacks" / "perf-vertx-stacks-01-collapsed-all.txt"))
    train = training_profile()
    return [
        ("flame_memory", memory, ["up"] * 12),
        ("flame_cpu", cpu, ["up"] * 6 + ["c"]),
        ("flame_search", train, ["up", "up", "up", "enter", "slash", *"forward", "enter", "n"]),
        ("flame_sandwich", train, ["up", "up", "up", "up", "s"]),
        ("flame_table", train, ["t"]),
        ("flame_help", train, ["question_mark"]),
    ]


async def render(profile: Profile, keys: list[str], title: str) -> str:
    app = FlameApp(profile)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        for key in keys:
            await pilot.press(key)
        await pilot.pause()
        return app.export_screenshot(title=title)


def main() -> int:
    out = ROOT / "screenshots"
    out.mkdir(exist_ok=True)
    for name, profile, keys in shots():
        path = out / f"{name}.svg"
        path.write_text(asyncio.run(render(profile, keys, f"gpulens {name.replace('_', ' ')}")), encoding="utf-8")
        print(path.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
