"""Pilot and snapshot tests of the flame graph widget and its screens."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from textual.app import App

from gpulens.analysis.flame.importers import load_profile
from gpulens.analysis.flame.model import Profile, build_from_stacks
from gpulens.analysis.flame.query import function_table
from gpulens.tui.screens.flame import FlameApp, FlameScreen
from gpulens.tui.screens.flame_views import FlameHelpScreen, FunctionTableScreen, SandwichScreen
from gpulens.tui.widgets.flamegraph import FlameGraph

DATA = Path(__file__).parent / "data"
SIZE = (100, 30)


def run_async(fn: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async Pilot test without an async pytest plugin (fixtures passed through)."""

    @functools.wraps(fn)
    def wrapper(**kwargs: Any) -> None:
        asyncio.run(fn(**kwargs))

    return wrapper


def training_profile(extra: int = 0) -> Profile:
    """A small Python-like profile with methods, constructors and native frames."""
    base = ["<module> (train.py:80)", "main (train.py:70)"]
    return build_from_stacks(
        [
            ([*base, "Trainer.fit (trainer.py:40)", "Trainer.step (trainer.py:55)", "Model.forward (model.py:12)", "_PyEval_EvalFrameDefault", "0x7f151a2b3c4d"], 30 + extra),
            ([*base, "Trainer.fit (trainer.py:40)", "Trainer.step (trainer.py:55)", "Model.forward (model.py:12)", "Attention.forward (model.py:30)"], 25),
            ([*base, "Trainer.fit (trainer.py:40)", "Trainer.step (trainer.py:57)", "Optimizer.step (optim.py:9)"], 15),
            ([*base, "Trainer.fit (trainer.py:40)", "DataLoader.__next__ (data.py:22)", "load_batch (data.py:30)"], 20),
            ([*base, "Model.__init__ (model.py:5)", "KVCache.__init__ (cache.py:8)", "allocate (cache.py:20)"], 10),
        ],
        "samples",
        "train.py (py-spy, 100 Hz)",
    )


class Host(App[None]):
    """An app with a base screen, so FlameScreen can be left."""

    def __init__(self, profile: Profile) -> None:
        super().__init__()
        self.profile = profile

    def on_mount(self) -> None:
        self.push_screen(FlameScreen(self.profile, "test"))


def graph_of(app: App[Any]) -> FlameGraph:
    return app.screen.query_one(FlameGraph)


@run_async
async def test_focus_and_back() -> None:
    profile = training_profile()
    app = Host(profile)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        graph = graph_of(app)
        await pilot.press("up", "up", "up")
        fit = graph.selected
        assert profile.label(fit) == "Trainer > fit"
        await pilot.press("enter")
        assert graph.focus_node == fit
        assert "100.0% of focus" in graph._status_text()
        span = graph.layout_now.by_node[fit]
        assert (span.x0, span.x1) == (0, SIZE[0])
        await pilot.press("up", "enter")
        assert graph.focus_history == [0, fit]
        await pilot.press("backspace")
        assert graph.focus_node == fit
        await pilot.press("escape")
        assert graph.focus_node == 0
        await pilot.press("escape")  # top of the focus history: leave the screen
        await pilot.pause()
        assert not isinstance(app.screen, FlameScreen)


@run_async
async def test_search_highlights_and_next_match() -> None:
    profile = training_profile()
    app = Host(profile)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        graph = graph_of(app)
        await pilot.press("slash", *"forward", "enter")
        result = graph._search
        assert result is not None
        assert result.value == 30 + 25  # samples with a forward frame, once each
        assert "55.0%" in graph._status_text()
        await pilot.press("n")
        assert "forward" in profile.frames[profile.node_frame[graph.selected]]
        first = graph.selected
        await pilot.press("n")
        assert graph.selected != first
        await pilot.press("N")
        assert graph.selected == first


@run_async
async def test_sandwich_view() -> None:
    profile = training_profile()
    app = Host(profile)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("up", "up", "up", "up")  # Trainer.step (widest child of fit)
        graph = graph_of(app)
        assert profile.label(graph.selected) == "Trainer > step"
        await pilot.press("s")
        await pilot.pause()
        assert isinstance(app.screen, SandwichScreen)
        callers, callees = app.screen.query(FlameGraph).results()
        assert callers.profile.total == 70 and callees.profile.total == 70
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, FlameScreen)


@run_async
async def test_function_table_sorts_and_searches() -> None:
    profile = training_profile()
    app = Host(profile)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("t")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, FunctionTableScreen)
        assert [r.name for r in screen._rows[:2]] == ["0x7f151a2b3c4d", "Attention.forward"]
        await pilot.press("t")
        assert screen._rows[0].total_value == profile.total
        totals = [r.total_value for r in screen._rows]
        assert totals == sorted(totals, reverse=True)
        await pilot.press("s", "down", "enter")
        await pilot.pause()
        assert isinstance(app.screen, FlameScreen)
        result = graph_of(app)._search
        assert result is not None and result.pattern == "^Attention\\.forward"


@run_async
async def test_collapse_and_expand_chains() -> None:
    profile = training_profile()
    app = Host(profile)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        graph = graph_of(app)
        expanded_rows = len(graph.layout_now.rows)
        await pilot.press("c")
        assert graph.collapsed
        chain = graph.layout_now.rows[1][0]
        assert chain.chain_length == 2  # <module> -> main
        assert len(graph.layout_now.rows) < expanded_rows
        await pilot.press("e")
        assert len(graph.layout_now.rows) == expanded_rows


@run_async
async def test_live_update_keeps_place_and_pause_holds() -> None:
    profile = training_profile()
    app = Host(profile)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        graph = graph_of(app)
        await pilot.press("up", "up", "up", "enter", "c")
        graph.set_search("forward")
        focus_label = profile.label(graph.focus_node)
        newer = training_profile(extra=100)
        screen = app.screen
        assert isinstance(screen, FlameScreen)
        screen.update_profile(newer)  # a live graph: p pauses it
        assert graph.profile is newer
        assert newer.label(graph.focus_node) == focus_label
        assert graph.collapsed
        assert graph._search is not None and graph._search.value == 130 + 25
        await pilot.press("p")
        assert graph.paused
        newest = training_profile(extra=200)
        graph.update_profile(newest)
        assert graph.profile is newer and "update waiting" in graph._status_text()
        await pilot.press("p")
        assert graph.profile is newest
        assert newest.label(graph.focus_node) == focus_label


@run_async
async def test_help_explains_reading() -> None:
    app = Host(training_profile())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, FlameHelpScreen)
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, FlameScreen)


@run_async
async def test_fixture_profile_opens_and_navigates() -> None:
    profile = load_profile(str(DATA / "stacks" / "perf-vertx-stacks-01-collapsed-all.txt"))
    app = FlameApp(profile)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        graph = graph_of(app)
        for key in ["up"] * 10 + ["left", "right", "down", "enter", "slash", *"vertx", "enter", "n"]:
            await pilot.press(key)
        assert graph.focus_node > 0
        assert graph._search is not None
        top = function_table(profile)[0]
        assert top.self_value == 23


def test_snapshot_graph(snap_compare: Any) -> None:
    assert snap_compare(FlameApp(training_profile()), terminal_size=SIZE, press=["up", "up", "up"])


def test_snapshot_focus_and_search(snap_compare: Any) -> None:
    assert snap_compare(
        FlameApp(training_profile()), terminal_size=SIZE,
        press=["up", "up", "up", "enter", "slash", *"forward", "enter"],
    )


def test_snapshot_sandwich(snap_compare: Any) -> None:
    assert snap_compare(FlameApp(training_profile()), terminal_size=SIZE, press=["up", "up", "up", "up", "s"])


def test_snapshot_table(snap_compare: Any) -> None:
    assert snap_compare(FlameApp(training_profile()), terminal_size=SIZE, press=["t"])


@pytest.mark.parametrize("size", [(60, 16), (140, 40)])
def test_snapshot_memory_sizes(snap_compare: Any, size: tuple[int, int]) -> None:
    profile = load_profile(str(DATA / "memory_snapshots" / "mini_snapshot.pickle"))
    assert snap_compare(FlameApp(profile), terminal_size=size, press=["up"] * 12)


@run_async
async def test_mouse_selects_and_double_click_focuses() -> None:
    profile = training_profile()
    app = Host(profile)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        graph = graph_of(app)
        fit = graph.layout_now.rows[3][-1]  # Trainer.fit: the widest frame on row 3
        graph_h = graph.size.height - 1
        y = graph_h - 1 - fit.row
        await pilot.click(FlameGraph, offset=(fit.x0 + 1, y))
        assert graph.selected == fit.node
        await pilot.double_click(FlameGraph, offset=(fit.x0 + 1, y))
        assert graph.focus_node == fit.node


@run_async
async def test_escape_clears_search_before_leaving() -> None:
    app = Host(training_profile())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        graph = graph_of(app)
        await pilot.press("slash", *"step", "enter")
        assert graph._search is not None
        await pilot.press("escape")
        assert graph._search is None
        assert isinstance(app.screen, FlameScreen)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, FlameScreen)


@run_async
async def test_q_quits_gpulens_flame_everywhere() -> None:
    for keys in ([], ["t"], ["up", "up", "up", "s"]):
        app = FlameApp(training_profile())
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            await pilot.press(*keys)
            await pilot.pause()
            await pilot.press("q")
            await pilot.pause()
            assert app._exit, f"q did not quit after {keys}"
    # but inside ? it closes the help, as q closes less and man (docs/keys.md); then it quits
    app = FlameApp(training_profile())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("question_mark")
        await pilot.pause()
        await pilot.press("q")
        await pilot.pause()
        assert not app._exit and isinstance(app.screen, FlameScreen)
        await pilot.press("q")
        await pilot.pause()
        assert app._exit


def _help_text(app: App[Any]) -> str:
    from textual.widgets import Static

    return str(app.screen.query_one(Static).render())


@run_async
async def test_help_lists_only_real_keys() -> None:
    app = FlameApp(training_profile())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        graph = graph_of(app)
        assert graph.check_action("pause", ()) is False  # not a live graph: p does nothing here
        await pilot.press("question_mark")
        await pilot.pause()
        text = _help_text(app)
        assert "pause" not in text and "x export focus" in text and "q quit" in text
        assert "T threads" not in text  # one profile: no picker
    app2 = Host(training_profile())
    async with app2.run_test(size=SIZE) as pilot:
        await pilot.pause()
        screen = app2.screen
        assert isinstance(screen, FlameScreen)
        screen.update_profile(training_profile(extra=1))  # live
        await pilot.press("question_mark")
        await pilot.pause()
        assert "p pause updates" in _help_text(app2)


@run_async
async def test_breadcrumbs_on_flame_sandwich_and_table() -> None:
    from textual.widgets import Static

    app = FlameApp(training_profile())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        title = str(app.screen.query_one("#flame-title", Static).render())
        assert title.startswith("gpulens flame › Flame graph")
        await pilot.press("t")
        await pilot.pause()
        assert str(app.screen.query_one(".flame-crumbs", Static).render()) == "gpulens flame › Flame graph › Functions"
        await pilot.press("escape", "up", "up", "up", "s")
        await pilot.pause()
        crumbs = str(app.screen.query_one(".flame-crumbs", Static).render())
        assert crumbs == "gpulens flame › Flame graph › Sandwich: Trainer.fit"


def _threads_group() -> Any:
    from gpulens.analysis.flame.group import Part, group_of

    a = build_from_stacks([(["main", "step"], 30), (["main", "load"], 10)], "samples", "thread A")
    b = build_from_stacks([(["run", "work"], 7)], "samples", "thread B")
    return group_of("two.json", [Part("thread A", "samples", lambda: a), Part("thread B", "samples", lambda: b)])


@run_async
async def test_thread_picker_and_all_threads() -> None:
    from gpulens.tui.screens.flame_views import ProfilePickerScreen

    group = _threads_group()
    app = FlameApp(group.pick(), group=group)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert graph_of(app).profile.total == 40
        await pilot.press("question_mark")
        await pilot.pause()
        assert "T threads / profiles" in _help_text(app)
        await pilot.press("escape", "T")
        await pilot.pause()
        assert isinstance(app.screen, ProfilePickerScreen)
        await pilot.press("home", "enter")  # first entry: all threads merged
        await pilot.pause()
        graph = graph_of(app)
        assert graph.profile.total == 47
        assert {graph.profile.label(c) for c in graph.profile.children(0)} == {"thread A", "thread B"}
        await pilot.press("T", "end", "enter")  # thread B
        await pilot.pause()
        assert graph_of(app).profile.total == 7
        assert "thread B" in str(app.screen.query_one("#flame-title").render())


@run_async
async def test_export_acts_on_the_focus(tmp_path: Path) -> None:
    from textual.widgets import Input

    from gpulens.tui.screens.flame_views import ExportScreen

    app = FlameApp(training_profile())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("up", "up", "up", "enter")  # focus Trainer.fit
        graph = graph_of(app)
        fit = graph.focus_node
        await pilot.press("x")
        await pilot.pause()
        assert isinstance(app.screen, ExportScreen)
        box = app.screen.query_one(Input)
        assert box.value.endswith(".folded")
        box.value = str(tmp_path / "fit.folded")
        await pilot.press("enter")
        await pilot.pause()
        lines = (tmp_path / "fit.folded").read_text().splitlines()
        assert all(line.startswith("Trainer.fit (trainer.py:40)") for line in lines)
        assert sum(int(line.rsplit(" ", 1)[1]) for line in lines) == graph.profile.total_of(fit) == 90
        assert any("wrote" in str(n.message) and "integer samples" in str(n.message) for n in app._notifications)


def test_snapshot_thread_picker(snap_compare: Any) -> None:
    group = _threads_group()
    assert snap_compare(FlameApp(group.pick(), group=group), terminal_size=SIZE, press=["T"])


def _screen_lines(app: App[Any]) -> list[str]:
    """What the terminal shows of the top screen, line by line."""
    return ["".join(seg.text for seg in strip) for strip in app.screen._compositor.render_strips()]


@pytest.mark.parametrize(
    ("name", "total"),
    [
        ("perf-rust-Yamakaky-dcpu.txt.gz", "6,850,637 events (cycles:u)  ·  "),  # cycles:u periods: a count
        ("perf-dd-stacks-01.perf-script", "111.1 ms  ·  "),  # cpu-clock periods: 11 x 10101010 ns
        ("example-perf-stacks.txt.gz", "1,315 samples  ·  "),  # no periods
    ],
)
def test_perf_script_total_says_its_unit(name: str, total: str) -> None:
    """perf weights are periods: the title line names what they count, not 'samples' (issue 32 item 11)."""

    @run_async
    async def check() -> None:
        app = FlameApp(load_profile(str(DATA / "stacks" / name)))
        async with app.run_test(size=(120, 30)) as pilot:
            await pilot.pause()
            assert _screen_lines(app)[0].startswith(" gpulens flame › Flame graph  ·  " + total)

    check()


@run_async
async def test_every_flame_screen_keeps_its_crumbs_on_the_first_line() -> None:
    app = FlameApp(load_profile(str(DATA / "stacks" / "perf-vertx-stacks-01-collapsed-all.txt")))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert _screen_lines(app)[0].startswith(" gpulens flame › Flame graph  ·  ")
        await pilot.press("t")  # more functions than lines: the table scrolls, not the screen
        await pilot.pause()
        assert isinstance(app.screen, FunctionTableScreen)
        for keys in ([], ["end"], ["home"], ["pagedown", "pageup"]):
            await pilot.press(*keys)
            await pilot.pause()
            lines = _screen_lines(app)
            assert lines[0].strip() == "gpulens flame › Flame graph › Functions", keys
            assert {"self", "file"} & set(lines[1].split()), keys  # the column header under it
        assert app.screen.scroll_offset.y == 0 and app.screen.max_scroll_y == 0
        await pilot.press("escape", "up", "s")
        await pilot.pause()
        assert isinstance(app.screen, SandwichScreen)
        first = _screen_lines(app)[0].strip()
        assert first.startswith("gpulens flame › Flame graph › Sandwich: ")
        await pilot.press("up", "s")  # a sandwich from a sandwich: its crumbs name both
        await pilot.pause()
        assert _screen_lines(app)[0].strip().startswith(f"{first} › Sandwich: ")


@run_async
async def test_main_tui_shows_the_flame_crumbs_once() -> None:
    """The main app puts its header on the flame screens: their own crumbs line goes."""
    from gpulens.tui.app import GpulensApp
    from gpulens.tui.widgets.header import AppHeader
    from tests.fakes.tui_fakes import StaticSource, frozen_clock, settle

    def crumb_lines() -> list[str]:
        return [line.strip() for line in _screen_lines(app) if "gpulens ›" in line]

    app = GpulensApp(source=StaticSource([]), clock=frozen_clock)
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(app, pilot)
        app.push_screen(FlameScreen(training_profile(), "test"))
        await settle(app, pilot)
        screen = app.screen
        assert isinstance(screen, FlameScreen)
        assert screen.query_one(AppHeader).crumbs == ("gpulens", "Overview", "Flame graph")
        (line,) = crumb_lines()
        assert line.startswith("gpulens › Overview › Flame graph ")  # the header
        title = _screen_lines(app)[1].strip()
        assert title.startswith("100 samples  ·  ") and title.endswith("test")  # total and title stay
        await pilot.press("t")
        await settle(app, pilot)
        assert isinstance(app.screen, FunctionTableScreen)
        (line,) = crumb_lines()
        assert line.startswith("gpulens › Overview › Flame graph › Functions ")
        assert _screen_lines(app)[1].split()[:2] == ["self", "self"]
        await pilot.press("escape", "up", "up", "up", "s")
        await settle(app, pilot)
        assert isinstance(app.screen, SandwichScreen)
        (line,) = crumb_lines()
        assert line.startswith("gpulens › Overview › Flame graph › Sandwich: Trainer.fit ")
        await pilot.press("up", "s")  # a sandwich from a sandwich: the crumbs grow as the stack does
        await settle(app, pilot)
        (line,) = crumb_lines()
        assert line.startswith("gpulens › Overview › Flame graph › Sandwich: Trainer.fit › Sandwich: ")


@run_async
async def test_the_flame_screens_header_follows_the_data_as_a_data_screens_does() -> None:
    """A recording's REC size and the clock keep moving in the header of a flame screen opened meanwhile."""
    from gpulens.tui.app import GpulensApp
    from gpulens.tui.widgets.header import AppHeader
    from tests.fakes.tui_fakes import StaticSource, settle

    now = [1_700_000_000.0]
    source = StaticSource([])
    app = GpulensApp(source=source, clock=lambda: now[0])
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(app, pilot)
        app.push_screen(FlameScreen(training_profile(), "test"))
        await settle(app, pilot)
        header = app.screen.query_one(AppHeader)
        before = header.clock
        source._name = "demo · REC 2.0MiB"  # what a recording's name says as it grows
        now[0] += 7
        app.refresh_data()  # a tick of new data
        await pilot.pause()
        assert header.source == "demo · REC 2.0MiB"
        assert header.clock != before and header.clock == app.clock_text()
        # Pause and the window keys act on data screens: not offered (nor in the footer) over a flame graph.
        assert app.check_action("pause", ()) is False and app.check_action("window", ("1h",)) is False
        app.pop_screen()
        await pilot.pause()
        assert app.check_action("pause", ()) is True and app.check_action("window", ("1h",)) is True


@run_async
async def test_a_refused_search_says_why_until_the_user_moves_on() -> None:
    """Issue 31 item 20: a stale search error stayed in the status line."""
    app = Host(training_profile())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        graph = graph_of(app)
        await pilot.press("slash", *"(unclosed", "enter")
        await pilot.pause()
        assert graph._search is None and "│" in graph._status_text()  # the reason, right of the bar
        said = graph._status_text().split("│", 1)[1]
        assert said.strip()
        await pilot.press("up")
        await pilot.pause()
        assert "│" not in graph._status_text() or said not in graph._status_text()
