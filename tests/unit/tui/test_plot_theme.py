"""A plot drawn before a theme change draws in the new theme's colours, as a fresh plot does."""

from __future__ import annotations

from textual.app import App
from textual.geometry import Region

from gpulens.core.units import pct
from gpulens.tui.widgets.plot import TimeSeriesPlot, plot_data
from tests.fakes.tui_fakes import sync


@sync
async def test_a_plot_drawn_before_a_theme_change_draws_what_a_fresh_one_draws_after_it() -> None:
    app: App[None] = App()
    data = plot_data([float(i % 100) for i in range(200)], None, "5m", 300)
    async with app.run_test(size=(80, 30)) as pilot:
        old = TimeSeriesPlot("Util", pct, id="old")
        await app.mount(old)
        old.styles.height = 12
        await pilot.pause()
        old.set_data(data)
        await pilot.pause()
        size = old.lines.size
        before = [list(s) for s in old.lines.render_lines(Region(0, 0, size.width, size.height))]
        app.theme = "textual-light"
        await pilot.pause()
        await pilot.pause()
        fresh = TimeSeriesPlot("Util", pct, id="fresh")
        await app.mount(fresh)
        fresh.styles.height = 12
        await pilot.pause()
        fresh.set_data(data)
        await pilot.pause()
        assert size == fresh.lines.size
        after = [list(s) for s in old.lines.render_lines(Region(0, 0, size.width, size.height))]
        want = [list(s) for s in fresh.lines.render_lines(Region(0, 0, size.width, size.height))]
        assert after == want  # the time axis kept the old theme's colours
        assert after != [list(s) for s in before]  # the theme did change the colours
