"""``/`` finding: a regex over hosts, jobs, users and tree IDs, linked both ways, on every panel."""

from __future__ import annotations

import re
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Input

from gpulens.sources.demo import DemoSource
from gpulens.store.store import Store
from gpulens.store.views import JobView
from gpulens.tui.finding import FilterError, compile_filter
from gpulens.tui.screens.overview import OverviewScreen
from gpulens.tui.widgets.heatmap import GpuHeatmap
from gpulens.tui.widgets.host_table import HostTable
from gpulens.tui.widgets.job_table import JobTable
from gpulens.tui.widgets.sparklines import HostSparklines
from gpulens.tui.widgets.stats import StatsBar
from tests.fakes.tui_fakes import demo_app, frozen_clock, heat_key, settle, sync
from tests.unit.store.test_store import feed


def demo_store() -> Store:
    store = Store()
    DemoSource(seed=7, clock=frozen_clock, live=False, backfill_s=20).start(feed(store))
    return store


def expected(store: Store, regex: str) -> tuple[set[str], set[str]]:
    """Hosts and jobs a linked filter keeps, computed here from the store's own views."""
    p = re.compile(regex, re.IGNORECASE)
    jobs = store.jobs(300)
    direct_hosts = {h for h in store.hosts() if p.search(h)}
    direct_jobs = {j.key for j in jobs if any(p.search(x) for x in (j.key, j.tree_id, j.user, j.cmdline))}
    hosts = direct_hosts | {h for j in jobs if j.key in direct_jobs for h in j.hosts}
    keys = direct_jobs | {j.key for j in jobs if set(j.hosts) & direct_hosts}
    return hosts, keys


@pytest.mark.parametrize("regex", ["node01", "alice", "node0[1-3]$", "^47", "torchrun", "erin|carol"])
def test_select_links_hosts_and_jobs_both_ways(regex: str) -> None:
    store = demo_store()
    gpus = [(h, g) for h in store.hosts() for g in store.gpu_indices(h)]
    sel = compile_filter(regex).select(store.hosts(), store.jobs(300), gpus)
    hosts, keys = expected(store, regex)
    assert set(sel.hosts) == hosts and sel.jobs == keys
    assert {h for h, _ in sel.gpus} <= hosts


def test_host_filter_shows_its_jobs_and_user_filter_its_hosts() -> None:
    store = demo_store()
    jobs = store.jobs(300)
    on_node01 = {j.key for j in jobs if "gpu-node01" in j.hosts}
    assert "4711" in on_node01  # the demo runs alice's 4711 there
    sel = compile_filter("/node01".lstrip("/")).select(store.hosts(), jobs, [])
    assert sel.hosts == ("gpu-node01",) and sel.jobs == on_node01
    alice = next(j for j in jobs if j.user == "alice")
    sel = compile_filter("alice").select(store.hosts(), jobs, [])
    assert set(sel.hosts) == set(alice.hosts) and len(alice.hosts) > 1


def test_job_filter_narrows_the_heatmap_to_the_gpus_it_holds() -> None:
    store = demo_store()
    jobs = store.jobs(300)
    job = next(j for j in jobs if j.key == "gpu-node12:11100")
    gpus = [(h, g) for h in store.hosts() for g in store.gpu_indices(h)]
    sel = compile_filter("11100").select(store.hosts(), jobs, gpus)
    assert set(sel.gpus) == {(h, int(i)) for h, i in job.gpus}
    assert len(sel.gpus) < len(store.gpu_indices("gpu-node12"))


def test_inverted_filter_keeps_the_other_hosts_and_their_jobs() -> None:
    store = demo_store()
    jobs = store.jobs(300)
    gpus = [(h, g) for h in store.hosts() for g in store.gpu_indices(h)]
    plain = compile_filter("node0[1-8]").select(store.hosts(), jobs, gpus)
    inverted = compile_filter("!node0[1-8]").select(store.hosts(), jobs, gpus)
    assert set(plain.hosts) | set(inverted.hosts) == set(store.hosts())
    assert not set(plain.hosts) & set(inverted.hosts)
    # Every job of a host kept is kept (a host shows its jobs), even one that also runs on a hidden host.
    kept = set(inverted.hosts)
    assert inverted.jobs == {j.key for j in jobs if kept & set(j.hosts)}
    assert any(set(j.hosts) - kept for j in jobs if j.key in inverted.jobs)  # the case is exercised


def test_an_inverted_filter_links_jobs_to_the_hosts_it_keeps() -> None:
    """``/!alice`` hides alice's hosts; bob's job on one of them goes with it, not alone into the jobs table."""
    def job(key: str, user: str, *hosts: str) -> JobView:
        return JobView(key, "systemd/python", user, "python train.py", hosts, (), 0.0, 0.0, 0.0, 0.0, 0.0, ())

    jobs = [job("1", "alice", "n1"), job("2", "bob", "n1"), job("3", "bob", "n2"), job("4", "carol", "n1", "n3")]
    hosts = ["n1", "n2", "n3"]
    gpus = [(h, 0) for h in hosts]
    sel = compile_filter("!alice").select(hosts, jobs, gpus)
    assert sel.hosts == ("n2", "n3") and sel.gpus == (("n2", 0), ("n3", 0))
    assert sel.jobs == {"3", "4"}  # bob's job 2 runs only on n1, hidden; carol's job 4 also runs on n3
    for j in jobs:
        assert (j.key in sel.jobs) <= bool(set(j.hosts) & set(sel.hosts)), j.key


def test_invalid_regex_is_one_line_error() -> None:
    with pytest.raises(FilterError, match=r"bad regex 'node0\[1'") as err:
        compile_filter("node0[1")
    assert "\n" not in str(err.value)
    assert not compile_filter("").active and not compile_filter("!").active


async def _type(pilot: Pilot[Any], text: str) -> None:
    await pilot.press("slash")
    for ch in text:
        await pilot.press(ch)


@sync
async def test_filter_narrows_every_panel_and_a_bad_regex_keeps_the_old_one() -> None:
    app = demo_app(backfill_s=30)
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(app, pilot)
        screen = app.screen
        assert isinstance(screen, OverviewScreen)
        await _type(pilot, "node0[1-3]")
        await settle(app, pilot)
        hosts, jobs = screen.query_one(HostTable), screen.query_one(JobTable)
        want_hosts, want_jobs = expected(app.store, "node0[1-3]")
        assert set(hosts.order) == want_hosts == {"gpu-node01", "gpu-node02", "gpu-node03"}
        assert set(jobs.order) == want_jobs and "4711" in jobs.order
        assert set(screen.query_one(HostSparklines).rows) == want_hosts
        assert {heat_key(k)[0] for k in screen.query_one(GpuHeatmap).rows} == want_hosts
        # The headline too: the figures of the hosts shown, the jobs the table shows.
        stats = screen.query_one(StatsBar).stats
        assert stats is not None and (stats.hosts, stats.of_hosts, stats.jobs) == (3, 16, len(want_jobs))
        assert stats.total_gpus == 24
        assert stats.gpu_util_percent == app.store.fleet(app.window_s, sorted(want_hosts)).gpu_util_percent
        assert stats.gpu_util_percent != app.store.fleet(app.window_s).gpu_util_percent
        assert dict(StatsBar.parts(stats))["hosts"] == "3 of 16 (filter)"
        assert str(screen.query_one("#sparklines-box").border_subtitle) == "3 of 16 hosts · filter 'node0[1-3]'"
        await pilot.press("left_square_bracket")  # now 'node0[1-3][': invalid
        await settle(app, pilot)
        error = screen.query_one("#filter-error")
        assert error.display and "bad regex" in str(error.render())
        assert set(hosts.order) == want_hosts  # the old filter stays
        await pilot.press("escape")
        await settle(app, pilot)
        assert hosts.row_count == 16 and not error.display
        stats = screen.query_one(StatsBar).stats
        assert stats is not None and (stats.hosts, stats.of_hosts) == (16, 0)


@sync
async def test_enter_on_a_bad_regex_keeps_the_filter_kept_before_not_its_valid_beginning() -> None:
    """``/!node0`` Enter, then ``/`` and ``bob|(`` Enter: as typed, ``bob|`` (which matches all) applied."""
    app = demo_app(backfill_s=20)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        screen = app.screen
        assert isinstance(screen, OverviewScreen)
        await _type(pilot, "!node0")
        await pilot.press("enter")
        await settle(app, pilot)
        kept = set(screen.query_one(HostTable).order)
        assert kept and not any("node0" in h for h in kept)
        await pilot.press("slash")
        for _ in range(6):
            await pilot.press("backspace")
        for ch in "bob|(":
            await pilot.press(ch)
        await pilot.press("enter")
        await settle(app, pilot)
        assert screen.finder.text == "!node0" and set(screen.query_one(HostTable).order) == kept
        assert any("bad regex 'bob|('" in n.message for n in app._notifications)
        assert screen.query_one("#filter", Input).value == "!node0"  # / again edits what is in force


@sync
async def test_alice_filter_shows_her_hosts_and_node01_its_job() -> None:
    app = demo_app(backfill_s=30)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        await _type(pilot, "alice")
        await pilot.press("enter")
        await settle(app, pilot)
        hosts, jobs = app.screen.query_one(HostTable), app.screen.query_one(JobTable)
        alice = [j for j in app.store.jobs(app.window_s) if j.user == "alice"]
        assert set(hosts.order) == {h for j in alice for h in j.hosts} and hosts.row_count == 4
        await pilot.press("escape")
        await _type(pilot, "node01$")
        await pilot.press("enter")
        await settle(app, pilot)
        assert hosts.order == ["gpu-node01"] and jobs.order == ["4711"]


@sync
async def test_sort_by_column_letter_and_again_reverses() -> None:
    app = demo_app(backfill_s=30)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        hosts = app.screen.query_one(HostTable)
        rows = {h: app.store.host_row(h, app.window_s) for h in app.store.hosts()}
        await pilot.press("P")  # Power: the largest first, as htop and nvitop sort figures
        await settle(app, pilot)
        assert [rows[h].power_w for h in hosts.order] == sorted((r.power_w for r in rows.values()), reverse=True)
        header = hosts.render_line(0)
        assert "Power↓" in header.text
        underlined = [seg.text for seg in header if seg.style is not None and seg.style.underline]
        assert "P" in underlined and "U" in underlined  # each sort letter marked, as htop marks F-keys
        await pilot.press("P")
        await settle(app, pilot)
        assert [rows[h].power_w for h in hosts.order] == sorted(r.power_w for r in rows.values())
        assert "Power↑" in hosts.render_line(0).text
        await pilot.press("H")  # a name: A-Z first
        await settle(app, pilot)
        assert list(hosts.order) == sorted(rows)
        await pilot.press("A")  # alerts: the loudest first, then the most (a left-aligned column, not A-Z)
        await settle(app, pilot)
        from gpulens.tui.widgets.thresholds import alert_level

        loud = [(max(map(alert_level, rows[h].alerts), default=0), len(rows[h].alerts)) for h in hosts.order]
        assert loud == sorted(loud, reverse=True) and loud[0][0] == 3  # critical (XID 79, THROTTLE HW) on top
        await pilot.press("tab", "R")  # the job table: Runtime
        await settle(app, pilot)
        jobs = app.screen.query_one(JobTable)
        views = {j.key: j for j in app.store.jobs(app.window_s)}
        assert [views[k].runtime_s for k in jobs.order] == sorted((v.runtime_s for v in views.values()), reverse=True)


@sync
async def test_heatmap_fills_its_height_says_how_many_more_and_scrolls() -> None:
    app = demo_app(backfill_s=30)
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(app, pilot)
        heat = app.screen.query_one(GpuHeatmap)
        shown = heat.size.height - heat.header_lines - 1
        assert shown > 18  # was 18 of 128 at 200x50
        last = heat.render_line(heat.size.height - 1).text
        assert f"rows 1–{shown} of 128 · {128 - shown} more ↓" in last
        heat.focus()
        await pilot.press("pagedown")
        await settle(app, pilot)
        assert int(heat.scroll_offset.y) > 0
        first, _, below = heat.hidden()
        assert first > 1 and below == 128 - (first - 1) - shown
