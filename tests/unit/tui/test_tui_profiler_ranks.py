"""Profiler screen (issue 11): the selected trace, one row per rank, Enter, queued, poll hint, exports, job-wide.

A scripted trace service: each request becomes a job whose state the test
sets (``finish``); files are fixture traces, so View / Analyze / Export read
real Kineto output.
"""

from __future__ import annotations

import gzip
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.app import App
from textual.widgets import DataTable, Input, Static

from gpulens.ipc.kineto.requests import TraceJob, TraceRequest, TraceState
from gpulens.tui.screens.profiler import ProfilerScreen
from gpulens.tui.screens.profiler_rows import (
    Target,
    file_rows,
    host_hint,
    job_hosts,
    member_names,
    poll_hint,
)
from gpulens.tui.screens.profiler_views import AnalyzeScreen, TimelineScreen
from gpulens.tui.widgets.step_chart import ChartView
from gpulens.tui.widgets.timeline import TraceTimeline
from tests.fakes.trace_service import FakeTraceService, poller
from tests.fakes.tui_fakes import sync
from tests.paths import DATA

TRACES = DATA / "traces"
RANK0, RANK1 = TRACES / "sampled_rank-0.json.gz", TRACES / "sampled_rank-1.json.gz"
SMALL = TRACES / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"
SIZE = (160, 45)


def scripted(address: str = "fake endpoint", intervals: dict[int, float] | None = None,
             queues: bool = False) -> FakeTraceService:
    """A TraceService double: requests wait until ``finish``; ``queues`` reports QUEUED itself."""
    return FakeTraceService(address=address, processes=[poller(p, interval_s=v) for p, v in (intervals or {}).items()],
                            states=(TraceState.WAITING_FOR_POLL,), detail="handed over", queues=queues,
                            request_id="{address}-{n}")


def done_job(rid: str, pids: tuple[int, ...], files: dict[int, Path]) -> TraceJob:
    """A finished job of ``pids`` with ``files``."""
    return TraceJob(rid, TraceRequest(pids=pids), pids, TraceState.DONE, "done", 0.0, {p: str(f) for p, f in files.items()})


class Host(App[None]):
    def __init__(self, screen: ProfilerScreen) -> None:
        super().__init__()
        self._screen = screen

    def on_mount(self) -> None:
        self.push_screen(self._screen)


async def wait_for(pilot: Any, cond: Callable[[], bool], what: str, limit_s: float = 60) -> None:
    deadline = time.monotonic() + limit_s
    while not cond():
        assert time.monotonic() < deadline, f"condition not reached: {what}"
        await pilot.pause(0.05)


def table(screen: ProfilerScreen) -> DataTable[Any]:
    return screen.query_one("#pf-jobs", DataTable)


def cells(screen: ProfilerScreen, row: int) -> list[str]:
    return [str(c) for c in table(screen).get_row_at(row)]


def notes(app: App[Any]) -> list[str]:
    return [str(n.message) for n in app._notifications]


async def type_text(pilot: Any, text: str) -> None:
    for ch in text:
        await pilot.press(ch)


@pytest.mark.timeout(120)
@sync
async def test_view_analyze_export_act_on_the_selected_trace_default_newest(tmp_path: Path) -> None:
    svc = scripted()
    svc.publish(done_job("old", (11,), {11: SMALL}))
    svc.publish(done_job("new", (11,), {11: RANK0}))
    screen = ProfilerScreen(svc, "node", [11])
    app = Host(screen)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert table(screen).cursor_row == 1  # the newest trace, not the oldest
        await pilot.press("a")
        await wait_for(pilot, lambda: isinstance(app.screen, AnalyzeScreen), "analyze")
        assert isinstance(app.screen, AnalyzeScreen) and app.screen.title_text == str(RANK0)
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is screen, "back")
        table(screen).move_cursor(row=0)
        await pilot.press("v")
        await wait_for(pilot, lambda: isinstance(app.screen, TimelineScreen), "view")
        assert isinstance(app.screen, TimelineScreen) and app.screen.title_text == str(SMALL)
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is screen, "back again")
        await pilot.press("x")
        await type_text(pilot, str(tmp_path / "old.json"))
        await pilot.press("enter")
        await wait_for(pilot, lambda: (tmp_path / "old.json").exists(), "export")
        assert (tmp_path / "old.json").read_bytes() == gzip.decompress(SMALL.read_bytes())


@pytest.mark.timeout(120)
@sync
async def test_every_rank_has_a_row_and_is_reachable_and_exported(tmp_path: Path) -> None:
    svc = scripted()
    svc.publish(done_job("job", (21, 22), {21: RANK0, 22: RANK1}))
    screen = ProfilerScreen(svc, "node", [21, 22])
    app = Host(screen)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert table(screen).row_count == 2
        assert [cells(screen, i)[3] for i in range(2)] == ["21", "22"]
        assert "1 of 2 processes" in str(screen.query_one("#pf-selected", Static).render())
        table(screen).move_cursor(row=1)
        await pilot.press("v")  # the second rank's own file
        await wait_for(pilot, lambda: isinstance(app.screen, TimelineScreen), "view rank 1")
        assert isinstance(app.screen, TimelineScreen) and app.screen.title_text == str(RANK1)
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is screen, "back")
        await pilot.press("V")  # both ranks as lanes of one timeline
        await wait_for(pilot, lambda: isinstance(app.screen, TimelineScreen), "view ranks")
        assert isinstance(app.screen, TimelineScreen)
        lanes = app.screen.timeline.lanes
        assert any(t.startswith("rank 0 / ") for t in lanes) and any(t.startswith("rank 1 / ") for t in lanes)
        assert len(set(lanes)) == len(lanes)
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is screen, "back")
        await pilot.press("A")
        await wait_for(pilot, lambda: isinstance(app.screen, AnalyzeScreen), "analyze ranks")
        an = app.screen
        assert isinstance(an, AnalyzeScreen) and an.extras is not None
        assert [r.label for r in an.extras.ranks] == ["rank 0", "rank 1"]
        assert len(an.summary.processes) == 2
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is screen, "back")
        for dest in ("ranks", "ranks.tar.gz", "one.json"):
            await pilot.press("x")
            await type_text(pilot, str(tmp_path / dest))
            await pilot.press("enter")

            def exported(d: str = dest) -> bool:
                return (tmp_path / d).exists()

            await wait_for(pilot, exported, f"export {dest}")
        names = sorted(p.name for p in (tmp_path / "ranks").iterdir())
        assert names == ["node-pid21.json.gz", "node-pid22.json.gz"]
        assert (tmp_path / "ranks" / "node-pid22.json.gz").read_bytes() == RANK1.read_bytes()
        with tarfile.open(tmp_path / "ranks.tar.gz") as tar:
            assert sorted(tar.getnames()) == names
        # A .json name writes the selected rank only (row 1: pid 22).
        assert (tmp_path / "one.json").read_bytes() == gzip.decompress(RANK1.read_bytes())


@pytest.mark.timeout(60)
@sync
async def test_export_to_a_missing_directory_is_refused_and_creates_nothing(tmp_path: Path) -> None:
    svc = scripted()
    svc.publish(done_job("job", (21, 22), {21: RANK0, 22: RANK1}))
    screen = ProfilerScreen(svc, "node", [21, 22])
    app = Host(screen)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        for dest in (tmp_path / "no" / "x.json", tmp_path / "no" / "dir", tmp_path / "no" / "r.tar.gz"):
            await pilot.press("x")
            await type_text(pilot, str(dest))
            await pilot.press("enter")

            def refused(d: Path = dest) -> bool:
                return any(n.startswith("cannot export to") and str(d) in n and "does not exist" in n
                           for n in notes(app))

            await wait_for(pilot, refused, f"refusal of {dest}")
        assert list(tmp_path.iterdir()) == []


@pytest.mark.timeout(60)
@sync
async def test_enter_submits_the_form_with_a_typed_iteration_count() -> None:
    svc = scripted(intervals={31: 1.0})
    screen = ProfilerScreen(svc, "node", [31])
    app = Host(screen)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        screen.query_one("#pf-iterations", Input).focus()
        await type_text(pilot, "3")
        await pilot.press("enter")
        await wait_for(pilot, lambda: len(svc.requests) == 1, "request sent")
        assert svc.requests[0].iterations == 3 and svc.requests[0].duration_ms is None
        screen.query_one("#pf-duration", Input).focus()
        await pilot.press("enter")  # enter in any field of the form
        await wait_for(pilot, lambda: len(svc.requests) == 2, "second request")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("queues", [False, True], ids=["screen-side", "service-side"])
@sync
async def test_second_trace_of_a_busy_pid_shows_queued(queues: bool) -> None:
    svc = scripted(intervals={41: 1.0}, queues=queues)
    screen = ProfilerScreen(svc, "node", [41])
    app = Host(screen)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("t")
        await pilot.press("t")
        await wait_for(pilot, lambda: table(screen).row_count == 2, "two rows")
        assert cells(screen, 0)[0] == "waiting for poll" and cells(screen, 1)[0] == "queued"
        assert table(screen).cursor_row == 1  # the trace just asked for is selected
        svc.finish(1, {41: SMALL})
        await wait_for(pilot, lambda: cells(screen, 1)[0] != "queued" or queues, "no longer queued")
        assert cells(screen, 0)[0] == "done"


@pytest.mark.timeout(60)
@sync
async def test_poll_hint_uses_the_interval_the_target_shows() -> None:
    svc = scripted(intervals={51: 1.5, 52: 0.5})
    screen = ProfilerScreen(svc, "node", [51, 52])
    app = Host(screen)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        status = str(screen.query_one("#pf-status", Static).render())
        assert "within 1.5 s" in status and "5 s" not in status.replace("1.5 s", "")


def test_poll_hint_texts() -> None:
    assert "within 2.0 s (it polls every 2.0 s)" in poll_hint({1: 2.0})
    assert "not known yet" in poll_hint({1: None})
    assert "not reported here" in poll_hint({1: None}, reported=False)
    assert "1 not measured yet" in poll_hint({1: 2.0, 2: None})
    assert poll_hint({}) == ""


@pytest.mark.timeout(60)
@sync
async def test_job_wide_trace_asks_every_host_with_one_start_time() -> None:
    here = scripted("here", intervals={61: 1.0, 62: 1.0})
    there = scripted("there", intervals={71: 3.0})
    screen = ProfilerScreen(here, "a", [61, 62], others=[Target("b", there, (71,))])
    app = Host(screen)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert "3 processes on 2 hosts" in str(screen.query_one("#pf-title", Static).render())
        before = time.time()
        await pilot.press("t")
        await wait_for(pilot, lambda: table(screen).row_count == 3, "one row per rank")
        (mine,), (theirs,) = here.requests, there.requests
        assert mine.pids == (61, 62) and theirs.pids == (71,)
        assert mine.start_time_ms is not None and mine.start_time_ms == theirs.start_time_ms
        # After the slowest target's next poll (3 s), within a few seconds more.
        assert before + 3.0 <= mine.start_time_ms / 1000 <= time.time() + 3.0 + 5.0
        assert [cells(screen, i)[3] for i in range(3)] == ["a:61", "a:62", "b:71"]
        here.finish(1, {61: RANK0, 62: RANK1})
        there.finish(1, {71: SMALL})
        await wait_for(pilot, lambda: all(cells(screen, i)[0] == "done" for i in range(3)), "all done")
        await pilot.press("V")
        await wait_for(pilot, lambda: isinstance(app.screen, TimelineScreen), "all ranks as lanes")
        assert isinstance(app.screen, TimelineScreen)
        labels = {t.split(" / ")[0] for t in app.screen.timeline.lanes}
        assert labels == {"rank 0", "rank 1", "b pid 71"}  # the third trace names no rank


def test_single_pid_trace_starts_at_once() -> None:
    """One process needs no common start: Kineto starts at its next poll (start_time_ms None)."""
    rows = file_rows(TraceJob("r", TraceRequest(pids=(1, 2)), (1, 2), TraceState.DONE, "pid 2: it exited", 0.0,
                              {1: "/x/a.json.gz"}), target=0, host="h", batch=1, earlier=[], now_s=0.0)
    assert [(r.pid, r.state, r.path) for r in rows] == [(1, "done", "/x/a.json.gz"), (2, "failed", None)]
    assert rows[1].detail == "pid 2: it exited"
    assert member_names(rows) == {"h-pid1.json.gz": "/x/a.json.gz"}


def test_host_hint_and_job_hosts() -> None:
    assert "open a job first" in host_hint(2)
    assert "no job on this host polls Kineto" in host_hint(0)

    class P:
        def __init__(self, pid: int, polling: bool) -> None:
            self.pid, self.kineto_polling = pid, polling

    procs = [("me", P(1, False)), ("me", P(2, False)), ("b", P(3, True)), ("b", P(4, False)), ("c", P(5, True))]
    hosts = job_hosts(procs, lambda h: h == "me", local_polling={1}, agents=True)
    assert hosts == [("me", (1,), False), ("b", (3,), True), ("c", (5,), True)]
    assert job_hosts(procs, lambda h: h == "me", local_polling=(), agents=False) == []


class ChartHost(App[None]):
    def __init__(self, screen: AnalyzeScreen) -> None:
        super().__init__()
        self._screen = screen

    def on_mount(self) -> None:
        self.push_screen(self._screen)


@pytest.mark.timeout(120)
@sync
async def test_analyze_charts_are_drawn_once_per_analysis_and_size() -> None:
    from gpulens.tui.screens.profiler_work import analyze_paths

    summary, extras = analyze_paths([str(RANK0), str(RANK1)])
    # HTA's late-arrival answer beside the median method (tests/unit/analysis/test_late_arrival.py checks
    # the numbers against HTA's): rank 1 starts the collective later.
    late = [n for n in extras.notes if n.startswith("late arrival")]
    assert len(late) == 1 and "rank 1 +" in late[0] and "ncclKernel_SendRecv" in late[0], extras.notes
    assert late[0].index("rank 1") < late[0].index("rank 0")
    screen = AnalyzeScreen(summary, "2 ranks", extras)
    app = ChartHost(screen)
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.pause()
        views = list(screen.query(ChartView))
        assert len(views) == 3
        texts = [v.render() for v in views]
        drawn = [v.draws for v in views]
        assert all(d == 1 for d in drawn)
        assert "mean step time per rank" in texts[0].plain and "rank 1" in texts[0].plain
        assert "top" in texts[1].plain and "kernel durations" in texts[2].plain
        for _ in range(5):
            screen.refresh()
            for v in views:
                v.refresh()
            await pilot.pause()
        assert [v.draws for v in views] == drawn  # refreshes redraw nothing
        await pilot.press("n")  # the other rank: the ops and kernel charts change, the per-rank one stays
        await pilot.pause()
        assert views[0].draws == 1 and views[1].draws == 2 and views[2].draws == 2
        await pilot.resize_terminal(180, 50)
        await pilot.pause()
        assert all(v.draws >= d + 1 for v, d in zip(views, drawn, strict=True))  # a new size draws once more


@pytest.mark.timeout(60)
@sync
async def test_timeline_widget_stays_inside_the_trace_and_unfolds() -> None:
    from gpulens.analysis.trace.load import load_trace
    from gpulens.analysis.trace.timeline import build_timeline

    tl = build_timeline(load_trace(TRACES / "benchmark_result_2869224_1695835535_trace.json.gz", keep_args=True).events)
    screen = TimelineScreen(tl, "t")
    app = ChartHost(screen)  # type: ignore[arg-type]
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        w = screen.query_one(TraceTimeline)
        for key in ("minus", "minus", "left_square_bracket", "left_square_bracket", "plus", "plus",
                    "left_square_bracket", "left_square_bracket", "left_square_bracket"):
            await pilot.press(key)
            assert tl.start_us <= w.t0 < w.t1 <= max(tl.end_us, tl.start_us + 1.0)
        for _ in range(40):
            await pilot.press("left_square_bracket")
        assert w.t0 == tl.start_us  # panned to the start, not past it
        for _ in range(40):
            await pilot.press("right_square_bracket")
        assert w.t1 == tl.end_us
        folded = len(w.rows)
        assert any(r.folded for r in w.rows)
        gutter = w.render_line(1 + next(i for i, r in enumerate(w.rows) if r.folded)).text
        assert "deeper row" in gutter
        await pilot.press("z")
        assert len(w.rows) > folded and not any(r.folded for r in w.rows)
        await pilot.press("pagedown")
        assert w.row == min(len(w.rows) - 1, w.size.height - 3)  # a screenful down
        await pilot.press("pageup")
        assert w.row == 0
        ruler = w.render_line(0).text
        assert ruler.startswith("time (") and ruler.count("(") == 1  # one unit, named once


@pytest.mark.timeout(60)
@sync
async def test_deep_stacks_fold_with_a_count_and_scroll_when_unfolded() -> None:
    from gpulens.analysis.trace.timeline import build_timeline

    events = [_Ev(f"f{d}", float(d), 1000.0 - 2 * d) for d in range(40)]
    screen = TimelineScreen(build_timeline(events), "deep")
    app = ChartHost(screen)  # type: ignore[arg-type]
    async with app.run_test(size=(100, 20)) as pilot:
        await pilot.pause()
        w = screen.query_one(TraceTimeline)
        assert len(w.rows) == 8 and w.rows[-1].folded == 32
        assert "+32 deeper rows" in w.render_line(8).text
        await pilot.press("z")
        assert len(w.rows) == 40
        await pilot.press("pagedown", "pagedown")
        body = w.size.height - 2
        assert w.row > body  # the selection went past the first screenful...
        top = w.render_line(1).text
        assert not top.startswith("thread 1")  # ...and the rows scrolled: the lane's title row is off screen
        assert f"of {len(w.rows)}" in w.render_line(w.size.height - 1).text


class _Ev:
    """A complete CPU event on pid 1 / tid 1 (what the timeline reads)."""

    def __init__(self, name: str, ts: float, dur: float) -> None:
        self.ph, self.cat, self.name, self.pid, self.tid, self.ts, self.dur, self.args = (
            "X", "cpu_op", name, 1, 1, ts, dur, None)


@pytest.mark.timeout(60)
@sync
async def test_a_request_refused_before_any_job_is_said() -> None:
    # refuses every request at once, publishing no job (as a stopped local service does)
    svc = FakeTraceService(address="fake endpoint", processes=[poller(81, interval_s=1.0)],
                           fail=RuntimeError("the trace service is not started"))
    screen = ProfilerScreen(svc, "node", [81])
    app = Host(screen)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("t")
        await wait_for(pilot, lambda: any("trace on node refused: the trace service is not started" in n
                                          for n in notes(app)), "the refusal")
        assert table(screen).row_count == 0
