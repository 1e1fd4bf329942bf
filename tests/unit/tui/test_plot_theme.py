"""A plot drawn before a theme change draws in the new theme's colours, as a fresh plot does."""

from __future__ import annotations

from typing import Any

from rich.segment import Segment
from textual.app import App
from textual.geometry import Region

from gpulens.core.units import pct
from gpulens.tui.widgets.plot import PlotData, TimeSeriesPlot, plot_data
from tests.fakes.tui_fakes import sync


async def drawn_plot(app: App[None], pilot: Any, name: str, data: PlotData) -> TimeSeriesPlot:
    """A plot of ``data`` mounted 12 lines tall and drawn."""
    plot = TimeSeriesPlot("Util", pct, id=name)
    await app.mount(plot)
    plot.styles.height = 12
    await pilot.pause()
    plot.set_data(data)
    await pilot.pause()
    return plot


def lines(plot: TimeSeriesPlot) -> list[list[Segment]]:
    """The plot's content lines as Textual draws them."""
    size = plot.lines.size
    return [list(s) for s in plot.lines.render_lines(Region(0, 0, size.width, size.height))]


@sync
async def test_a_plot_drawn_before_a_theme_change_draws_what_a_fresh_one_draws_after_it() -> None:
    app: App[None] = App()
    data = plot_data([float(i % 100) for i in range(200)], None, "5m", 300)
    async with app.run_test(size=(80, 30)) as pilot:
        old = await drawn_plot(app, pilot, "old", data)
        before = lines(old)
        app.theme = "textual-light"
        await pilot.pause()
        await pilot.pause()
        fresh = await drawn_plot(app, pilot, "fresh", data)
        assert old.lines.size == fresh.lines.size
        after = lines(old)
        assert after == lines(fresh)  # the time axis kept the old theme's colours
        assert after != before  # the theme did change the colours
