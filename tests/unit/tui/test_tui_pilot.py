"""Pilot tests: every screen and key path, checked against the store's values."""

from __future__ import annotations

import time
from typing import Any

import pytest
from textual.widgets import Input

from gpulens.core.config import Panel
from gpulens.tui.app import GpulensApp
from gpulens.tui.screens.help import HelpScreen, key_rows
from gpulens.tui.screens.host import HostScreen
from gpulens.tui.screens.job import JobScreen
from gpulens.tui.screens.overview import OverviewScreen
from gpulens.tui.widgets.gpu_table import GpuTable
from gpulens.tui.widgets.header import AppHeader
from gpulens.tui.widgets.heatmap import GpuHeatmap
from gpulens.tui.widgets.host_table import HostTable
from gpulens.tui.widgets.job_table import JobTable
from gpulens.tui.widgets.panel import CustomPanel
from gpulens.tui.widgets.plot import TimeSeriesPlot
from gpulens.tui.widgets.process_table import ProcessTable
from gpulens.tui.widgets.stats import StatsBar
from tests.fakes.trace_service import FakeTraceService
from tests.fakes.tui_fakes import (
    cell,
    demo_app,
    settle,
    sync,
    utc,  # noqa: F401 - a fixture, used by name below
)

pytestmark = pytest.mark.usefixtures("utc")

SIZE = (160, 45)


@sync
async def test_overview_shows_store_values() -> None:
    app = demo_app(backfill_s=120)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        assert isinstance(app.screen, OverviewScreen)
        store = app.store
        hosts = app.screen.query_one(HostTable)
        row = store.host_row("gpu-node01", app.window_s)
        assert cell(hosts, "gpu-node01", "util") == f"{row.util_percent:.0f}%"
        assert "IDLE-HELD 4" in cell(hosts, "gpu-node07", "alerts")
        assert "XID 79" in cell(hosts, "gpu-node11", "alerts")
        jobs = app.screen.query_one(JobTable)
        assert cell(jobs, "4711", "user") == "alice" and cell(jobs, "4711", "hosts") == "4"
        stats = app.screen.query_one(StatsBar)
        fleet = store.fleet(app.window_s)
        assert ("busy GPUs", f"{fleet.busy_gpus}/128") in stats.parts(fleet)
        header = app.screen.query_one(AppHeader)
        assert header.simulated and header.source == "demo" and header.crumbs == ("gpulens", "Overview")
        assert header.clock == "22:13:20"


@sync
async def test_drill_into_host_and_back() -> None:
    app = demo_app(backfill_s=120)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        await pilot.press("enter")
        await settle(app, pilot)
        screen = app.screen
        assert isinstance(screen, HostScreen) and screen.host == "gpu-node01"
        assert screen.query_one(AppHeader).crumbs == ("gpulens", "Overview", "gpu-node01")
        gpus = screen.query_one(GpuTable)
        latest = app.store.latest("gpu-node01")
        assert latest is not None
        g0 = latest.gpus[0]
        assert cell(gpus, "0", "util") == f"{g0.utilization_percent:.0f}%"
        plot = screen.query_one("#cpu", TimeSeriesPlot)
        plot.scroll_visible(animate=False)  # plots out of view are filled when scrolled to
        await settle(app, pilot)
        latest = app.store.latest("gpu-node01")
        assert latest is not None
        assert plot.values[-1] == pytest.approx(latest.cpu.total_percent, rel=1e-5)
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, OverviewScreen)


@sync
async def test_na_with_reason_on_host_without_counters() -> None:
    app = demo_app(backfill_s=60)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        app.jump("host gpu-node09")
        await settle(app, pilot)
        # An n/a plot with nothing in the window is left out, named on one line with its reason.
        assert not app.screen.query_one("#l2", TimeSeriesPlot).display
        line = next(ln for ln in str(app.screen.query_one("#plots-na").render()).splitlines() if "L2" in ln)
        assert "n/a" in str(app.screen.query_one("#plots-na").render())
        assert "L2 Cache Hit Ratio" in line and "perf_event_open" in line
        assert app.screen.query_one("#cpu", TimeSeriesPlot).display


@sync
async def test_job_screen_processes_and_profiler_action() -> None:
    # gpu-node01 stands for this machine: the trace service reaches local pids only
    app = demo_app(backfill_s=60, trace_service=FakeTraceService(polling={10_000, 10_100}), hostname="gpu-node01")
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        await pilot.press("tab", "enter")
        await settle(app, pilot)
        screen = app.screen
        assert isinstance(screen, JobScreen) and screen.key == "4711"
        procs = screen.query_one(ProcessTable)
        assert procs.row_count == 32 and cell(procs, "gpu-node01:10000", "user") == "alice"
        assert screen.check_action("open_profiler", ()) is True
        assert screen.polling_pids() == (10_000,)  # 10_100 runs on gpu-node02, not here
        assert any(b.binding.action == "open_profiler" and b.enabled
                   for b in screen.active_bindings.values())
        await pilot.press("escape")
        app.jump("job 10300")  # a pid of job 4711 on gpu-node04
        await settle(app, pilot)
        assert isinstance(app.screen, JobScreen) and app.screen.key == "4711"


@sync
async def test_no_profiler_action_without_service_and_profile_notice() -> None:
    app = demo_app(backfill_s=60)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        app.jump("job 4720")
        await settle(app, pilot)
        assert isinstance(app.screen, JobScreen)
        assert app.screen.check_action("open_profiler", ()) is False
        await pilot.press("o")  # not offered: the other o says why, instead of nothing
        await pilot.pause()
        assert any("no process of this job polls Kineto" in str(n.message) for n in app._notifications)
        assert ("o", "open Profiler") in key_rows(app.screen, [])  # ? lists it: it does something
        await pilot.press("f")
        await pilot.pause()
        assert any("SIMULATED" in str(n.message) for n in app._notifications)


@sync
async def test_keys_window_pause_filter_sort_heatmap_help() -> None:
    app = demo_app(backfill_s=60)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        await pilot.press("3")
        # A minute of data in a 15-minute window: the header says how much the figures are over.
        assert app.window == "15m" and app.screen.query_one(AppHeader).window == "15m (first sample 1m01s ago)"
        def footer_p() -> str:
            return next(b.binding.description for k, b in app.screen.active_bindings.items() if k == "p")

        assert footer_p() == "Pause"
        await pilot.press("p")
        assert app.paused and app.screen.query_one(AppHeader).paused
        assert footer_p() == "Resume"  # the footer names what p does now
        await pilot.press("p", "1")
        assert not app.paused and app.window == "1m" and footer_p() == "Pause"
        await pilot.press("slash")
        for ch in "node1":
            await pilot.press(ch)
        await pilot.press("enter")
        await settle(app, pilot)
        hosts = app.screen.query_one(HostTable)
        assert hosts.row_count == 7  # node1, node10..node16
        await pilot.press("escape")
        await settle(app, pilot)
        assert hosts.row_count == 16
        await pilot.press("U")  # sort by Util (the letter underlined in its header)
        await settle(app, pilot)
        first = hosts.order[0]
        rows = [app.store.host_row(h, app.window_s) for h in app.store.hosts()]
        assert first == max(rows, key=lambda r: r.util_percent).host  # the busiest first, as htop sorts
        await pilot.press("w")
        assert app.screen.query_one(GpuHeatmap).metric.metric == "gpu.power_w"
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, OverviewScreen)


@sync
async def test_jump_prompt_and_errors() -> None:
    app = demo_app(backfill_s=60)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        await pilot.press("colon")
        await pilot.pause()
        app.screen.query_one(Input).value = "host gpu-node03"
        await pilot.press("enter")
        await settle(app, pilot)
        assert isinstance(app.screen, HostScreen) and app.screen.host == "gpu-node03"
        app.jump("host nosuch")
        app.jump("frobnicate")
        await pilot.pause()
        messages = [str(n.message) for n in app._notifications]
        assert any("no host" in m for m in messages) and any("unknown command" in m for m in messages)


@sync
async def test_custom_panels_store_and_error() -> None:
    panels = (Panel(title="Power", unit="W", metric="gpu.power_w"),
              Panel(title="NCCL", unit="B/s", expr="rate(nccl_bytes_total[1m])"))
    app = demo_app(backfill_s=60, panels=panels)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        app.jump("host gpu-node01")
        await settle(app, pilot)
        power, nccl = app.screen.query(CustomPanel)
        assert power.values and power.values[-1] > 1000
        assert nccl.reason is not None and "cannot evaluate" in nccl.reason


@sync
async def test_narrow_layout_and_quit() -> None:
    app = demo_app(backfill_s=60)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        assert app.screen.has_class("narrow")
        assert not app.screen.query_one("#sparklines-box").display
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code in (None, 0)


@sync
async def test_command_palette_lists_actions() -> None:
    app = demo_app(backfill_s=60)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        titles = [c.title for c in app.get_system_commands(app.screen)]
        for t in ("Window 15m", "Pause / resume", "Jump", "Heatmap: power", "Host gpu-node01", "Job 4711"):
            assert t in titles


@sync
async def test_no_color_keeps_heatmap_readable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    app = demo_app(backfill_s=120)
    assert app.no_color
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        heat = app.screen.query_one(GpuHeatmap)
        line = "".join(seg.text for seg in heat.make_line(("gpu-node01", 0), 80))
        assert "█" in line and any(g in line for g in "░▒▓")  # density, not only colour
        assert "·" in "".join(seg.text for seg in heat.make_line(("gpu-node11", 3), 80))  # n/a


@sync
async def test_profile_without_flame_modules_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    import gpulens.tui.profiling as profiling

    app = demo_app(backfill_s=60)
    monkeypatch.setattr(type(app.source), "simulated", property(lambda self: False))
    monkeypatch.setattr(profiling, "_has", lambda module: False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        app.jump("host gpu-node01")
        await settle(app, pilot)
        await pilot.press("f")
        await pilot.pause()
        assert any("flame graphs not available" in str(n.message) for n in app._notifications)


@sync
async def test_host_without_gpus_says_why_in_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpulens.core.events import SampleEvent
    from gpulens.core.model import (
        CpuSample,
        HostSample,
        MemorySample,
        NetworkSample,
        StorageSample,
    )
    from tests.fakes.tui_fakes import FROZEN, StaticSource, frozen_clock

    monkeypatch.setenv("NO_COLOR", "1")
    why = "NVML init failed: no NVIDIA driver"
    events = [SampleEvent(HostSample(
        host="cpu-only", time=FROZEN - i, cpu=CpuSample(total_percent=42.0),
        memory=MemorySample(total_bytes=100, used_bytes=50),
        network=NetworkSample(rx_bytes_per_s=10.0, tx_bytes_per_s=20.0),
        storage=StorageSample(read_bytes_per_s=1.0, write_bytes_per_s=2.0),
        unavailable={"gpus": why})) for i in range(30)]
    app = GpulensApp(source=StaticSource(events), clock=frozen_clock)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        assert app.screen.query_one(GpuHeatmap).placeholder == f"no GPUs: {why}"
        hosts = app.screen.query_one(HostTable)
        assert cell(hosts, "cpu-only", "cpu") == "42%" and cell(hosts, "cpu-only", "util") == "n/a"
        await pilot.press("enter")
        await settle(app, pilot)
        assert why in app.screen.query_one(GpuTable).placeholder
        assert not app.screen.query_one("#gpu-util", TimeSeriesPlot).display  # left out, and said why:
        na = str(app.screen.query_one("#plots-na").render())
        assert na.startswith("n/a here  GPU Utilization") and why in na
        assert app.screen.query_one("#cpu", TimeSeriesPlot).display


@sync
async def test_mouse_click_on_heatmap_and_table_rows() -> None:
    app = demo_app(backfill_s=60)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        await pilot.click("#heatmap", offset=(3, 2))  # legend, then node01:1 (the border is its box's)
        await settle(app, pilot)
        assert isinstance(app.screen, HostScreen) and app.screen.host == "gpu-node01"
        await pilot.press("escape")
        await settle(app, pilot)
        await pilot.click("#hosts", offset=(3, 3))  # header, node01, node02, node03
        await pilot.click("#hosts", offset=(3, 3))  # the cursor row again: open it
        await settle(app, pilot)
        assert isinstance(app.screen, HostScreen) and app.screen.host == "gpu-node03"


@sync
async def test_a_failed_worker_is_shown_and_the_app_stays_up() -> None:
    app = demo_app(backfill_s=60)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        screen = app.screen
        assert isinstance(screen, OverviewScreen)

        def broken() -> None:
            raise RuntimeError("disk on fire")

        screen.background.start(broken, name="test work", group="test")
        for _ in range(100):
            if app._notifications:
                break
            await pilot.pause(0.05)
        [notice] = list(app._notifications)
        assert notice.message == "test work failed: disk on fire" and notice.severity == "error"
        assert app.is_running and app.screen is screen


def _far_host_app(monkeypatch: pytest.MonkeyPatch) -> tuple[GpulensApp, Any, list[object]]:
    """An app watching ``far-host`` through an agent whose profile answer waits for the test; the
    future to answer it with, and what each of the profile worker's waits returned."""
    from concurrent.futures import Future

    from gpulens.core.events import SampleEvent
    from gpulens.core.model import (
        CpuSample,
        HostSample,
        JobInfo,
        MemorySample,
        NetworkSample,
        StorageSample,
    )
    from gpulens.tui import profiling
    from tests.fakes.request_source import FakeAgent
    from tests.fakes.tui_fakes import FROZEN, AgentSource, frozen_clock

    pending: Future[Any] = Future()
    returned: list[object] = []
    from gpulens.tui.workers import wait as real_wait  # the function profiling calls

    def spy(fut: Future[Any], timeout_s: float) -> object:
        returned.append(real_wait(fut, timeout_s))
        return returned[-1]

    monkeypatch.setattr(profiling, "wait", spy)

    slow = FakeAgent({"profile": lambda host, params: pending})  # answered when the test says

    job = JobInfo(pid=777, tree_id="slurmstepd/python", cmdline="python train.py", user="u",
                  start_time=FROZEN - 100, cpu_percent=99.0)
    sample = HostSample(host="far-host", time=FROZEN, cpu=CpuSample(total_percent=1.0),
                        memory=MemorySample(total_bytes=100, used_bytes=50),
                        network=NetworkSample(rx_bytes_per_s=1.0, tx_bytes_per_s=1.0),
                        storage=StorageSample(read_bytes_per_s=1.0, write_bytes_per_s=1.0), jobs=(job,))
    return GpulensApp(source=AgentSource([SampleEvent(sample)], slow), clock=frozen_clock), pending, returned


@sync
async def test_a_profile_started_on_a_host_goes_on_after_leaving_it_and_is_offered_when_ready(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    # Issue 31, item 2: F 8, f, Esc used to lose the flame graph and forget the duration.
    from gpulens.ipc.request_schema import ProfileAnswer, answer_to_wire
    from gpulens.sources.stream.requests import RequestResult

    app, pending, returned = _far_host_app(monkeypatch)
    folded = tmp_path / "profile.txt"
    folded.write_text("main;train;step 30\nmain;load 10\n")
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        app.jump("host far-host")
        await settle(app, pilot)
        host_screen = app.screen
        assert isinstance(host_screen, HostScreen)
        host_screen.profiling.duration_s = 8.0  # what F 8 Enter sets
        await pilot.press("f")
        await pilot.pause()
        [worker] = [w for w in app.workers if (w.group or "").startswith("profile")]
        await pilot.press("escape")
        await pilot.pause(0.3)
        assert isinstance(app.screen, OverviewScreen)
        assert not worker.is_cancelled and not returned  # still waiting for the agent: not dropped
        assert "py-spy far-host" in app.screen.query_one("AppHeader", AppHeader).source  # shown like REC
        pending.set_result(RequestResult(answer_to_wire(ProfileAnswer(files=(folded.name,))), {folded.name: folded}))
        for _ in range(200):
            if any("flame graph of far-host ready" in str(n.message) for n in app._notifications):
                break
            await pilot.pause(0.05)
        assert any("flame graph of far-host ready" in str(n.message) for n in app._notifications)
        app.jump("host far-host")  # opened again: the same duration, the graph offered
        await settle(app, pilot)
        again = app.screen
        assert isinstance(again, HostScreen)
        prof = again.profiling
        assert prof.duration_s == 8.0 and prof.last is not None and prof.last[0].total == 40
        assert any("while you were away is ready: L opens it" in str(n.message) for n in app._notifications)
        await pilot.press("L")
        await settle(app, pilot)
        assert type(app.screen).__name__ == "FlameScreen"


@sync
async def test_quitting_cancels_a_running_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 31, item 1: Ctrl-C while py-spy sampled left the app blank for 19 s.
    app, _pending, returned = _far_host_app(monkeypatch)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        app.jump("host far-host")
        await settle(app, pilot)
        await pilot.press("f")
        await pilot.pause()
        [worker] = [w for w in app.workers if (w.group or "").startswith("profile")]
    assert worker.is_cancelled  # the app quit
    for _ in range(100):
        if returned:
            break
        time.sleep(0.05)
    assert returned == [None]  # the thread stopped waiting at once


@sync
async def test_palette_heatmap_and_back_commands_act_on_the_screen() -> None:
    app = demo_app(backfill_s=60)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        power = next(c for c in app.get_system_commands(app.screen) if c.title == "Heatmap: power")
        await power.callback()
        assert app.screen.query_one(GpuHeatmap).metric.metric == "gpu.power_w"
        app.jump("host gpu-node01")
        await settle(app, pilot)
        await next(c for c in app.get_system_commands(app.screen) if c.title == "Heatmap: power").callback()
        assert isinstance(app.screen, HostScreen)  # elsewhere: nothing happens
        back = next(c for c in app.get_system_commands(app.screen) if c.title == "Back")
        back.callback()
        await pilot.pause()
        assert isinstance(app.screen, OverviewScreen)
