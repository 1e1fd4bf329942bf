"""The sparse compositor writes to the terminal exactly what Textual's writes, and renders less (issue 13: cost).

Every partial update of a real gpulens session (the demo fleet: overview ticks,
cursor moves, a filter, a heatmap metric, the host, job and GPU screens, a
theme change) is made twice: by :class:`SparseCompositor`, then by Textual's
own compositor from the same dirty regions. The bytes each would write must be
the same, but for the cursor moves Textual writes with nothing after them
(for a cut beside a dirty span, of a widget the sparse one does not draw); the
rows rendered must be fewer.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, ClassVar

import pytest
from rich.console import Console
from textual._compositor import ChopsUpdate, Compositor
from textual.geometry import Region

from gpulens.core.events import SampleEvent, SourceEvent
from gpulens.tui import _compositor
from gpulens.tui._compositor import SparseCompositor
from gpulens.tui.app import GpulensApp
from gpulens.tui.messages import OpenHost, OpenJob
from tests.fakes.tui_fakes import demo_app, sync

IDLE_MOVE = re.compile(r"\x1b\[\d+;\d+H(?=\x1b\[\d+;\d+H|\n|$)")
"""A cursor move followed by another, by the next line's newline or by the end: it writes nothing."""


def written(update: ChopsUpdate, console: Any) -> str:
    """What ``update`` writes, without the cursor moves that write nothing."""
    return IDLE_MOVE.sub("", update.render_segments(console))


class Twin(SparseCompositor):
    """Makes each partial update both ways; keeps the pairs' output and the rows each rendered."""

    frames: ClassVar[list[tuple[str, str]]] = []
    rows: ClassVar[list[tuple[int, int]]] = []

    def render_partial_update(self) -> ChopsUpdate | None:
        regions = set(self._dirty_regions)
        if not regions:
            return super().render_partial_update()
        crop_rows = self._rows_textual_renders(regions)
        before = self.rendered_rows
        sparse = super().render_partial_update()
        self._dirty_regions.update(regions)
        textual = Compositor.render_partial_update(self)  # _repaint is None: Textual's own renders
        if sparse is None or textual is None:
            assert sparse is textual
            return sparse
        console = Console(width=self.size.width, height=self.size.height, color_system="truecolor",
                          force_terminal=True, legacy_windows=False)
        Twin.frames.append((written(sparse, console), written(textual, console)))
        Twin.rows.append((self.rendered_rows - before, crop_rows))
        return sparse

    def _rows_textual_renders(self, regions: set[Any]) -> int:
        """The widget rows Textual's partial update renders: every widget whose clip meets the crop, whole."""
        crop = Region.from_union(list(regions)).intersection(self.size.region)
        return sum(region.intersection(clip).height for region, clip in self.visible_widgets.values()
                   if crop.overlaps(clip))


@pytest.fixture
def twin(monkeypatch: pytest.MonkeyPatch) -> type[Twin]:
    monkeypatch.setattr(_compositor, "SparseCompositor", Twin)
    Twin.frames, Twin.rows = [], []
    return Twin


def moved(app: GpulensApp, k: int) -> list[SourceEvent]:
    """Every host's newest sample ``k`` seconds on, its GPUs' utilization moved by ``k``."""
    out: list[SourceEvent] = []
    for host in app.store.hosts():
        s = app.store.latest(host)
        assert s is not None
        gpus = tuple(dataclasses.replace(g, utilization_percent=(float(g.utilization_percent or 0) + 37 * k) % 100)
                     for g in s.gpus)
        out.append(SampleEvent(dataclasses.replace(s, time=s.time + 1.0, gpus=gpus)))
    return out


async def ticks(app: GpulensApp, pilot: Any, n: int) -> None:
    for k in range(1, n + 1):
        app.store.apply_many(moved(app, k))
        app.refresh_data()
        for _ in range(2):
            await pilot.pause()


@sync
async def test_every_frame_of_a_session_writes_what_textuals_compositor_writes_and_renders_fewer_rows(
        twin: type[Twin]) -> None:
    app = demo_app()
    async with app.run_test(size=(160, 45)) as pilot:
        for _ in range(3):
            await pilot.pause()
        await ticks(app, pilot, 3)
        for key in ("down", "down", "tab", "tab", "down", "a", "tab"):
            await pilot.press(key)
            await pilot.pause()
        await pilot.press("slash")
        await pilot.press(*"node0[1-3]")
        await pilot.press("enter")
        await ticks(app, pilot, 2)
        await pilot.press("escape")
        await ticks(app, pilot, 1)
        app.post_message(OpenHost("gpu-node02"))
        await pilot.pause()
        await ticks(app, pilot, 3)
        await pilot.press("g")  # per-GPU lines
        await ticks(app, pilot, 2)
        await pilot.press("escape")
        app.post_message(OpenJob("4711"))
        await pilot.pause()
        await ticks(app, pilot, 3)
        app.theme = "textual-light"
        await ticks(app, pilot, 2)
    frames, rows = twin.frames, twin.rows
    assert len(frames) >= 20, f"only {len(frames)} partial updates were compared"
    for i, (sparse, textual) in enumerate(frames):
        assert sparse == textual, f"partial update {i} differs"
    sparse_rows, textual_rows = sum(r[0] for r in rows), sum(r[1] for r in rows)
    assert sparse_rows < 0.8 * textual_rows, (sparse_rows, textual_rows)


@sync
async def test_a_frame_that_repaints_only_the_clock_renders_only_the_header_row(twin: type[Twin]) -> None:
    app = demo_app()
    async with app.run_test(size=(160, 45)) as pilot:
        for _ in range(3):
            await pilot.pause()
        twin.frames, twin.rows = [], []
        app.screen.query_one("AppHeader").refresh()
        await pilot.pause()
        await pilot.pause()
    assert twin.frames and all(s == t for s, t in twin.frames)
    sparse, textual = twin.rows[-1]
    # The header, and the screen behind it: one row each; Textual renders every child of the screen whole.
    assert sparse <= 2 < 40 < textual, twin.rows
