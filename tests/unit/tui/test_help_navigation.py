"""Help and navigation that tell the truth: ``?`` per screen from BINDINGS, breadcrumbs everywhere,
``:`` views, ``:interval``, ``:log``, ``--readonly``, one "Keys" in the palette."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

from textual.binding import Binding

from gpulens.commands.tui import add_arguments
from gpulens.core import logbook
from gpulens.tui.app import MIN_REFRESH_S
from gpulens.tui.screens.help import HelpScreen, key_rows, screen_bindings
from gpulens.tui.screens.jump import parse_jump
from gpulens.tui.screens.log import LogScreen
from gpulens.tui.screens.overview import OverviewScreen
from gpulens.tui.screens.views import GpuFleetTable, GpusView, HostsView, JobsView, UserView
from gpulens.tui.widgets.header import AppHeader
from gpulens.tui.widgets.host_table import HostTable
from gpulens.tui.widgets.job_table import JobTable
from tests.fakes.tui_fakes import demo_app, settle, sync

TRACE = Path(__file__).parents[2] / "data" / "traces" / "benchmark_result_2869224_1695835535_trace.json.gz"


def _keys(rows: list[tuple[str, str]]) -> set[str]:
    return {k for row, _ in rows for k in row.replace(" / ", " ").split()}


@sync
async def test_help_of_the_timeline_lists_its_keys_not_the_overviews() -> None:
    from gpulens.analysis.trace.load import load_trace
    from gpulens.analysis.trace.timeline import build_timeline
    from gpulens.tui.screens.profiler_views import TimelineScreen
    from gpulens.tui.widgets.timeline import TraceTimeline

    app = demo_app(backfill_s=10)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        timeline = build_timeline(load_trace(str(TRACE), keep_args=True).events)
        await app.push_screen(TimelineScreen(timeline, TRACE.name))
        await pilot.pause()
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        rows = key_rows(app.screen.below, app.screen.app_bindings)
        keys = _keys(rows)
        own = {b.key_display or b.key for b in TraceTimeline.BINDINGS if isinstance(b, Binding) and b.description}
        assert own  # every key the timeline widget binds, read from its BINDINGS
        for b in TraceTimeline.BINDINGS:
            assert isinstance(b, Binding)
            assert any(b.description.lower() in what.lower() or b.description == what for _, what in rows), b
        assert {"+", "-", "0", "f"} <= keys
        assert not {"u", "a", "g", "w", "t", "H", "U"} & keys  # the overview's heatmap and sort keys
        assert "p" not in keys and "1" not in keys  # window and pause act on data screens only
        assert "q" in keys and "?" in keys  # the global ones stay


@sync
async def test_overview_help_is_built_from_its_bindings() -> None:
    app = demo_app(backfill_s=10)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        rows = key_rows(app.screen.below, app.screen.app_bindings)
    keys = _keys(rows)
    letters = {b.key for b in OverviewScreen.BINDINGS if isinstance(b, Binding) and b.action.startswith("sort(")}
    assert letters == set(HostTable.SORT_KEYS.values()) | set(JobTable.SORT_KEYS.values())
    assert letters <= keys and "s" not in keys  # no more 's' cycling nine columns
    assert "space" not in keys  # replay keys are not passed when not replaying (the app filters them)
    assert any(b.key == "slash" for b in screen_bindings(OverviewScreen()))


@sync
async def test_breadcrumbs_on_screens_other_helpers_own_and_q_quits_there() -> None:
    from gpulens.tui.messages import OpenProfiler

    app = demo_app(backfill_s=10)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        app.jump("host gpu-node03")
        await settle(app, pilot)
        app.post_message(OpenProfiler("gpu-node03", (4711,), through_agent=False))
        for _ in range(5):
            await pilot.pause()
        header = app.screen.query_one(AppHeader)
        assert header.crumbs == ("gpulens", "Overview", "gpu-node03", "Profiler")
        assert "Profiler" in header.render().plain
        app.screen.set_focus(None)
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code in (None, 0) and not app.is_running


@sync
async def test_views_hosts_jobs_gpus_and_user() -> None:
    app = demo_app(backfill_s=10)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        app.jump("gpus")
        await settle(app, pilot)
        assert isinstance(app.screen, GpusView)
        table = app.screen.query_one(GpuFleetTable)
        assert table.row_count == sum(len(app.store.gpu_indices(h)) for h in app.store.hosts()) == 128
        assert app.screen.query_one(AppHeader).crumbs[-1] == "gpus"
        cursor = table.get_component_rich_style("table--cursor")
        marked = [seg for seg in table.render_line(1) if "▲" in seg.text]  # the cursor row, 90 % memory
        assert marked and all(seg.style == cursor for seg in marked)  # an amber value on the amber cursor vanished
        other = [seg for seg in table.render_line(2) if "▲" in seg.text]
        assert other and all(seg.style != table.get_component_rich_style("table--row") for seg in other)
        await pilot.press("T")  # by temperature
        await settle(app, pilot)

        def temperature(key: str) -> float | None:
            host, gpu = key.rsplit(":", 1)
            latest = app.store.latest(host)
            assert latest is not None
            return latest.gpus[int(gpu)].temperature_c

        temps = [temperature(k) for k in table.order]
        known = [t for t in temps if t is not None]
        assert known == sorted(known, reverse=True)  # the hottest first
        await pilot.press("escape")
        app.jump("user alice")
        await settle(app, pilot)
        assert isinstance(app.screen, UserView)
        jobs, hosts = app.screen.query_one(JobTable), app.screen.query_one(HostTable)
        alice = [j for j in app.store.jobs(app.window_s) if j.user == "alice"]
        assert jobs.order == [j.key for j in alice]
        assert set(hosts.order) == {h for j in alice for h in j.hosts}
        await pilot.press("escape")
        for name, view in (("hosts", HostsView), ("jobs", JobsView)):
            app.jump(name)
            await settle(app, pilot)
            assert isinstance(app.screen, view)
            await pilot.press("escape")
            await settle(app, pilot)


def test_colon_commands_parse_or_say_why() -> None:
    assert parse_jump("hosts") == ("hosts", "")
    assert parse_jump(":user alice") == ("user", "alice")
    assert parse_jump("interval 2") == ("interval", "2")
    for bad, why in (("interval fast", "expected seconds"), ("interval 0", "between"), ("user", "needs"),
                     ("gpus 3", "no argument"), ("frob", "unknown command")):
        said = parse_jump(bad)
        assert isinstance(said, str) and why in said and "\n" not in said
    assert parse_jump("job") == "':job' needs an argument, e.g. ':job PID'"  # as the help says, not NAME
    # one range for --interval, config interval_s and :interval (issue 31 item 18)
    assert parse_jump("interval 0.05") == ("interval", "0.05")
    assert "between 0.05 and 3600" in str(parse_jump("interval 0.01"))
    said = parse_jump("h")
    assert isinstance(said, str) and said.endswith("e.g. ':h NAME'")


@sync
async def test_interval_log_readonly_and_one_keys_command() -> None:
    app = demo_app(backfill_s=10, readonly=True)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        assert app.readonly
        logbook.install()  # as the command line does: the ring keeps what the TUI showed
        app.jump("interval 0.1")  # accepted as --interval accepts it; the redraw stops at its floor, and says so
        assert app.refresh_s == MIN_REFRESH_S
        app.jump("interval 2")
        assert app.refresh_s == 2.0
        calls: list[bool] = []
        real = app.refresh_data

        def counted(force: bool = False) -> None:
            calls.append(force)
            real(force)

        app.refresh_data = counted  # type: ignore[method-assign]
        app.schedule_refresh()  # new data right after a redraw: held back until 2 s have passed
        assert not calls and app._timer is not None
        app.refresh_data = real  # type: ignore[method-assign]
        app.jump("host no-such-host")  # an error notice: kept for :log
        app.jump("log")
        await settle(app, pilot)
        assert isinstance(app.screen, LogScreen)
        assert any("no host 'no-such-host'" in e.message for e in logbook.entries())
        assert "no host 'no-such-host'" in str(app.screen.query_one("#log").render())
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert titles.count("Keys") == 1


def test_readonly_flag() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert parser.parse_args(["--readonly"]).readonly is True
    assert parser.parse_args([]).readonly is False


def test_help_explains_every_alert_code_on_screens_that_show_them() -> None:
    from gpulens.tui.screens.help import alert_rows
    from gpulens.tui.screens.host import HostScreen
    from gpulens.tui.screens.overview import OverviewScreen
    from gpulens.tui.screens.profiler import ProfilerScreen
    from gpulens.tui.widgets.thresholds import ALERT_HELP

    for screen_type in (OverviewScreen, HostScreen):
        screen = screen_type.__new__(screen_type)  # the legend is read from the class
        rows = dict(alert_rows(screen))
        assert set(rows) == {"! DOWN", "! XID n", "▲ THROTTLE", "! THROTTLE HW", "▽ IDLE-HELD n"}
        assert "utilization" in rows["▽ IDLE-HELD n"] and rows["! XID n"] == ALERT_HELP["XID n"].meaning
    assert alert_rows(ProfilerScreen.__new__(ProfilerScreen)) == []


@sync
async def test_help_gives_the_thresholds_in_force_on_screens_that_colour_gpu_values() -> None:
    from dataclasses import replace

    from gpulens.tui.screens.gpu import GpuScreen
    from gpulens.tui.screens.help import level_rows
    from gpulens.tui.screens.profiler import ProfilerScreen
    from gpulens.tui.screens.views import GpusView

    app = demo_app(backfill_s=10)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        app.cfg = replace(app.cfg, thresholds=replace(app.cfg.thresholds, temp_warn_c=77.0, mem_crit_percent=95.5))
        for screen in (app.screen, GpuScreen("gpu-node01", 0, context=app), GpusView(context=app)):
            text = " ".join(d for _, d in level_rows(screen))
            assert "temperature from 77 / 90 °C" in text and "from 90 / 95.5 %" in text, (screen, text)
            assert "of the GPU's limit" in text and "under 10 %" in text
        assert level_rows(ProfilerScreen.__new__(ProfilerScreen)) == []


@sync
async def test_help_says_what_is_below_and_scrolls_with_j_k_space_g() -> None:
    from textual.containers import VerticalScroll

    app = demo_app(backfill_s=5)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        await pilot.press("question_mark")
        await settle(app, pilot)
        assert isinstance(app.screen, HelpScreen)
        box = app.screen.query_one(VerticalScroll)
        assert box.max_scroll_y > 0, "the overview's help fits at 160x45: the case is not exercised"
        assert str(box.border_subtitle).startswith(f"↓ j: {int(box.max_scroll_y)} more line")
        await pilot.press("j", "j")
        await pilot.pause()
        assert box.scroll_y == 2
        await pilot.press("k")
        await pilot.pause()
        assert box.scroll_y == 1
        await pilot.press("G")
        await pilot.pause()
        assert box.scroll_y == box.max_scroll_y and not box.border_subtitle
        from rich.console import Console

        from gpulens.tui.screens.help import key_table

        console = Console(width=120, record=True, file=io.StringIO())
        console.print(key_table(app.screen.below, []))
        keys = console.export_text()
        assert "([thresholds] in the config file)" in keys  # plain text, not a markup tag
        await pilot.press("g")
        await pilot.pause()
        assert box.scroll_y == 0


@sync
async def test_colon_views_replace_each_other_as_in_k9s_and_the_same_one_is_not_stacked() -> None:
    from gpulens.tui.widgets.header import crumb_of

    app = demo_app(backfill_s=10)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)

        def stack() -> list[str]:
            return [crumb_of(s) for s in app.screen_stack[1:]]

        for command in ("hosts", "hosts", "hosts"):
            app.jump(command)
            await settle(app, pilot)
        assert stack() == ["Overview", "hosts"]
        app.jump("gpus")
        await settle(app, pilot)
        app.jump("user alice")
        await settle(app, pilot)
        assert stack() == ["Overview", "user alice"]
        app.jump("job 4711")  # a job over a view: pushed (Esc comes back to the view)
        await settle(app, pilot)
        app.jump("job 4711")
        app.jump("host gpu-node11")
        await settle(app, pilot)
        app.jump("host gpu-node03")  # a host over a host: instead of it
        await settle(app, pilot)
        assert stack() == ["Overview", "user alice", "job 4711", "gpu-node03"], stack()
        await pilot.press("escape")
        await settle(app, pilot)
        assert stack() == ["Overview", "user alice", "job 4711"]


def test_every_sort_letter_is_in_its_columns_label_so_the_header_can_underline_it() -> None:
    import gpulens.tui.screens.views
    import gpulens.tui.widgets.host_table
    import gpulens.tui.widgets.job_table
    import gpulens.tui.widgets.process_table  # noqa: F401  (their tables register as subclasses)
    from gpulens.tui.widgets._table import IncrementalTable

    def every(cls: type[IncrementalTable]) -> list[type[IncrementalTable]]:
        return [cls, *(s for sub in cls.__subclasses__() for s in every(sub))]

    tables = [t for t in every(IncrementalTable) if t.SORT_KEYS]
    assert {"HostTable", "JobTable", "GpuFleetTable"} <= {t.__name__ for t in tables}
    for table in tables:
        labels = {c[0]: c[1] for c in table.COLUMNS}
        for column, letter in table.SORT_KEYS.items():
            assert letter.lower() in labels[column].lower(), (table.__name__, column, letter)


@sync
async def test_q_in_the_help_quits_as_the_help_says_and_esc_back_says_no_filter_where_there_is_none() -> None:
    from gpulens.tui.screens.help import HelpScreen, key_rows

    app = demo_app(backfill_s=10)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        overview = dict((w, k) for k, w in key_rows(app.screen, list(app.BINDINGS)))
        assert "back (first: clear the filter)" in overview  # the overview has a / filter
        app.jump("host gpu-node03")
        await settle(app, pilot)
        host = dict((w, k) for k, w in key_rows(app.screen, list(app.BINDINGS)))
        assert "back" in host and "back (first: clear the filter)" not in host
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("q")
        await pilot.pause()
    assert not app.is_running


def test_the_job_screens_help_explains_its_bounds() -> None:
    from gpulens.tui.screens.help import key_table
    from gpulens.tui.screens.job import JobScreen

    screen = JobScreen.__new__(JobScreen)  # the notes are read from the class
    rows = [str(cell) for col in key_table(screen, []).columns for cell in col._cells]
    assert "min≥ max≤" in rows and any(r.startswith("bounds, not exact") for r in rows)
