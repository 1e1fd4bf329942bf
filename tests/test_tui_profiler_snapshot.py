"""Snapshots of the profiler screen, its Analyze view and its timeline View at 80x24 and 200x50.

Deterministic: a fake trace service with a fixed list of jobs, the GPU trace
``benchmark_result_2869224_1695835535_trace.json.gz`` and HTA's two sampled
ranks (``sampled_rank-{0,1}.json.gz``) from tests/data/traces, a frozen
monotonic clock (the "waiting for poll" age) and UTC. The newest trace (two
ranks) is selected when the screen opens; Analyze and View of both ranks
show them together.
Update the baselines with ``pytest tests/test_tui_profiler_snapshot.py --snapshot-update``;
scripts/make_profiler_screenshots.py writes the same renders to screenshots/profiler_*.svg.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from textual.app import App
from textual.screen import Screen
from textual.widgets import DataTable

from gpulens.ipc.kineto.registry import PollingProcess
from gpulens.ipc.kineto.requests import TraceJob, TraceRequest, TraceState
from gpulens.ipc.kineto.untraceable import Untraceable, UntraceableKind
from gpulens.tui.screens import profiler
from gpulens.tui.screens.profiler import ProfilerScreen
from gpulens.tui.screens.profiler_views import AnalyzeScreen, TimelineScreen
from tests.fakes.trace_service import FakeTraceService
from tests.fakes.tui_fakes import (
    utc,  # noqa: F401 - a fixture, used by name below
)

pytestmark = pytest.mark.usefixtures("utc")

TRACES = Path(__file__).parent / "data" / "traces"
GPU_TRACE = TRACES / "benchmark_result_2869224_1695835535_trace.json.gz"
RANKS = [TRACES / "sampled_rank-0.json.gz", TRACES / "sampled_rank-1.json.gz"]
SIZES = [(80, 24), (200, 50)]
NOW_MONO = 5000.0
PIDS = [2869224, 2869301]


def snapshot_service() -> FakeTraceService:
    """A trace service double whose job list is fixed: one job per state worth showing."""
    ms = TraceRequest(pids=(PIDS[0],), duration_ms=500)
    steps = TraceRequest(pids=tuple(PIDS), duration_ms=None, iterations=3, record_shapes=True)
    job = TraceRequest(pids=tuple(PIDS), duration_ms=300)
    jobs = [
        TraceJob("2869-1-1700000000", ms, ms.pids, TraceState.DONE, "1 file, 24.8 kB",
                 NOW_MONO - 90, {PIDS[0]: str(GPU_TRACE)}),
        TraceJob("2869-2-1700000030", steps, steps.pids, TraceState.FAILED,
                 "[Errno 3] pid 2869301 exited before its next poll", NOW_MONO - 60),
        TraceJob("2869-3-1700000060", ms, ms.pids, TraceState.TRACING, "tracing 500 ms", NOW_MONO - 20),
        TraceJob("2869-4-1700000075", steps, steps.pids, TraceState.WAITING_FOR_POLL,
                 "waiting for 2 pids to poll", NOW_MONO - 12),
        TraceJob("2869-5-1700000090", job, job.pids, TraceState.DONE, "2 files", NOW_MONO - 5,
                 {PIDS[0]: str(RANKS[0]), PIDS[1]: str(RANKS[1])}),
    ]
    # The ready process polls every 2 s (the poll hint says so); the other one cannot be traced.
    ready = PollingProcess(PIDS[0], (1,), 0, 0, NOW_MONO - 30, NOW_MONO - 1, polls=15, interval_s=2.0)
    # The fake service's own words (the baselines show this shorter sentence, not NO_DAEMON_ENV's).
    why = Untraceable(UntraceableKind.TRACING_OFF, PIDS[1],
                      detail="KINETO_USE_DAEMON is not set in its environment: restart it with KINETO_USE_DAEMON=1")
    return FakeTraceService(address="unix:/tmp/gpulens-kineto (fake)", processes=[ready], reasons={PIDS[1]: why},
                            jobs=jobs)


@contextlib.contextmanager
def frozen_monotonic() -> Iterator[None]:
    """The profiler screen's clock (the 'waiting for poll' age) stands still."""
    real = vars(profiler)["time"]
    # setattr: the stand-in only has the one function the screen calls.
    setattr(profiler, "time", SimpleNamespace(monotonic=lambda: NOW_MONO))  # noqa: B010
    try:
        yield
    finally:
        setattr(profiler, "time", real)  # noqa: B010


def analyze_screen(paths: list[Path] | None = None) -> Screen[None]:
    from gpulens.tui.screens.profiler_work import analyze_paths

    paths = paths or [GPU_TRACE]
    summary, extras = analyze_paths([str(p) for p in paths])
    title = paths[0].name if len(paths) == 1 else f"{len(paths)} ranks"
    screen: Screen[None] = AnalyzeScreen(summary, title, extras)
    return screen


def timeline_screen() -> Screen[None]:
    from gpulens.analysis.trace.load import load_trace
    from gpulens.analysis.trace.timeline import build_timeline

    timeline = build_timeline(load_trace(str(GPU_TRACE), keep_args=True).events)
    screen: Screen[None] = TimelineScreen(timeline, GPU_TRACE.name)
    return screen


def ranks_timeline_screen() -> Screen[None]:
    from gpulens.analysis.trace.load import load_trace
    from gpulens.analysis.trace.timeline import build_rank_timeline

    ranks = [(f"rank {i}", load_trace(str(p), keep_args=True).events) for i, p in enumerate(RANKS)]
    screen: Screen[None] = TimelineScreen(build_rank_timeline(ranks), "2 ranks")
    return screen


class ProfilerHost(App[None]):
    """The profiler screen on a fake service, optionally with a View / Analyze screen on top."""

    def __init__(self, top: Callable[[], Screen[None]] | None = None) -> None:
        super().__init__()
        self._top = top

    def on_mount(self) -> None:
        self.push_screen(ProfilerScreen(snapshot_service(), "gpu-node05", PIDS))
        if self._top is not None:
            self.push_screen(self._top())


# name -> (top screen factory, keys pressed once it is up)
SHOTS: dict[str, tuple[Callable[[], Screen[None]] | None, tuple[str, ...]]] = {
    "list": (None, ()),  # the newest trace (two ranks) selected; one row per process
    "analyze": (analyze_screen, ()),
    "analyze_ranks": (lambda: analyze_screen(RANKS), ()),
    # Down to the GPU stream lanes, a few kernels along, then enter for the detail pane.
    "timeline": (timeline_screen, ("down",) * 8 + ("right",) * 3 + ("enter",)),
    "timeline_ranks": (ranks_timeline_screen, ("right",) * 2 + ("plus",) * 3),
}


async def settle(pilot: Any, keys: tuple[str, ...]) -> None:
    """Let the screens mount, press ``keys``, let the result render."""
    for _ in range(3):
        await pilot.pause()
    for key in keys:
        await pilot.press(key)
    for _ in range(3):
        await pilot.pause()


@pytest.fixture
def still_clock() -> Iterator[None]:
    with frozen_monotonic():
        yield


@pytest.mark.usefixtures("still_clock")
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("shot", list(SHOTS))
def test_profiler_snapshot(snap_compare: Any, shot: str, size: tuple[int, int]) -> None:
    top, keys = SHOTS[shot]

    async def run_before(pilot: Any) -> None:
        await settle(pilot, keys)

    assert snap_compare(ProfilerHost(top), terminal_size=size, run_before=run_before)


@pytest.mark.usefixtures("still_clock")
def test_bracketed_text_is_not_read_as_markup() -> None:
    """A failure reason "[Errno 3] ..." and op names "[param|cuda]" show as written."""

    async def run() -> None:
        app = ProfilerHost(analyze_screen)
        async with app.run_test(size=(200, 50)) as pilot:
            await settle(pilot, ())
            ops = app.screen.query_one(DataTable)
            assert any(str(ops.get_row_at(i)[0]).startswith("[param|") for i in range(ops.row_count))
            await pilot.press("escape")
            await settle(pilot, ())
            jobs = app.screen.query_one("#pf-jobs", DataTable)
            assert str(jobs.get_row_at(1)[1]).startswith("[Errno 3] pid 2869301")
            assert "12 s" not in str(jobs.get_row_at(4)[1])  # queued behind the running trace, not waiting
            assert str(jobs.get_row_at(4)[0]) == "queued" and "2869-3-1700000060" in str(jobs.get_row_at(4)[1])

    asyncio.run(run())


@pytest.mark.usefixtures("still_clock")
def test_failure_reason_readable_at_80_columns() -> None:
    """State and reason come before the request id, and the selected trace's reason is whole below."""

    async def run() -> None:
        app = ProfilerHost(None)
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot, ())
            jobs = app.screen.query_one("#pf-jobs", DataTable)
            assert jobs.cursor_row == jobs.row_count - 2  # the newest trace (two ranks) selected
            jobs.move_cursor(row=1)
            await settle(pilot, ())
            assert [str(c.label) for c in jobs.ordered_columns][:2] == ["state", "detail"]
            assert jobs.scroll_x == 0  # nothing scrolled sideways
            failed_row = jobs.render_line(2).text  # the header, the first job, then the failed one
            assert "failed" in failed_row and "[Errno 3] pid 2869301" in failed_row
            line = app.screen.query_one("#pf-selected")
            text = str(line.render())
            assert "failed" in text and "[Errno 3] pid 2869301 exited before its next poll" in text
            assert line.region.right <= 80 and line.region.height >= 1

    asyncio.run(run())
