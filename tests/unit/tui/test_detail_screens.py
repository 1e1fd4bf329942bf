"""Host, job, GPU and process screens: window keys, Enter targets, plots that say what they cover."""

from __future__ import annotations

import math
import re
from pathlib import Path

from textual.app import App
from textual.screen import ModalScreen

from gpulens.core.events import SampleEvent
from gpulens.core.units import rate
from gpulens.tui.screens._plots import GPU_PLOTS
from gpulens.tui.screens.gpu import GpuScreen
from gpulens.tui.screens.help import key_rows
from gpulens.tui.screens.job import JobScreen
from gpulens.tui.screens.process import ProcessScreen
from gpulens.tui.widgets.fields import FieldsLine
from gpulens.tui.widgets.gpu_table import GpuTable
from gpulens.tui.widgets.header import AppHeader
from gpulens.tui.widgets.plot import TimeSeriesPlot, plot_data
from gpulens.tui.widgets.process_table import ProcessTable
from tests.fakes.tui_fakes import FakeContext, StaticSource, demo_app, settle, sync
from tests.unit.store.test_store import T0, sample


@sync
async def test_job_screen_follows_the_window_keys_and_says_how_much_data() -> None:
    app = demo_app(backfill_s=120)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        app.jump("job 4711")
        await settle(app, pilot)
        assert isinstance(app.screen, JobScreen)
        plot = app.screen.query_one("#job-util", TimeSeriesPlot)
        assert plot.data.window == "5m" and plot.data.window_s == 300
        await pilot.press("4")
        await settle(app, pilot)
        assert plot.data.window == "1h" and plot.data.window_s == 3600
        text = plot.render().plain
        # 121 samples in the hour: the label says the figures cover ~2 minutes, not an hour.
        assert "over 2m01s of data [1h]" in text and text.splitlines()[-1].strip().startswith("-1h")
        st = plot.data.stats
        assert st is not None and st.max == app.store.job_stats("4711", "job.gpu_utilization_percent", 3600).max


@sync
async def test_enter_on_a_gpu_row_and_on_a_process_row_open_their_screens() -> None:
    app = demo_app(backfill_s=60)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        app.jump("host gpu-node05")
        await settle(app, pilot)
        table = app.screen.query_one(GpuTable)
        table.focus()
        await pilot.press("down", "down", "enter")
        await settle(app, pilot)
        assert isinstance(app.screen, GpuScreen) and app.screen.index == 2
        events = str(app.screen.query_one("#gpu-events").render())
        assert "throttle SW-therm,HW-therm" in events  # node05 GPU 2 throttles in the demo
        await pilot.press("escape")
        app.jump("job 4711")
        await settle(app, pilot)
        procs = app.screen.query_one(ProcessTable)
        procs.focus()
        key = procs.selected_key()
        await pilot.press("enter")
        await settle(app, pilot)
        assert isinstance(app.screen, ProcessScreen) and key == f"{app.screen.host}:{app.screen.pid}"
        assert app.store.processes.since(app.screen.host, app.screen.pid) is not None  # tracked while open
        assert "signals: the demo's hosts are SIMULATED" in str(
            app.screen.query_one("#proc-actions").render())
        host, pid = app.screen.host, app.screen.pid
        await pilot.press("escape")
        await settle(app, pilot)
        assert app.store.processes.since(host, pid) is None  # and forgotten when closed


@sync
async def test_the_gpu_screen_plots_every_metric_the_store_keeps_for_the_gpu() -> None:
    app = demo_app(backfill_s=120)
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(app, pilot)
        app.push_screen(GpuScreen("gpu-node01", 0, context=app))
        await settle(app, pilot)
        for spec in GPU_PLOTS:
            plot = app.screen.query_one(f"#{spec.id}", TimeSeriesPlot)
            want = app.store.window_stats("gpu-node01", spec.metric, 300, gpu=0)
            st = plot.data.stats
            assert st is not None and not want.empty and (st.max, st.now) == (want.max, want.now), spec.id
        energy = app.screen.query_one("#gpu-energy", TimeSeriesPlot).data.stats
        power = app.screen.query_one("#gpu-power", TimeSeriesPlot).data.stats
        assert energy is not None and power is not None
        assert abs(energy.mean - power.mean) < 0.15 * power.mean  # the counter's J/s is the mean draw
        assert f"{energy.now:.0f}J/s" in str(app.screen.query_one("#gpu-info").render())


@sync
async def test_readonly_removes_the_signal_actions() -> None:
    me = sample(T0, host="this-host")
    ctx = FakeContext(StaticSource([SampleEvent(me)]), [SampleEvent(me)])
    ctx.readonly = True
    app: App[None] = App()
    async with app.run_test(size=(120, 35)) as pilot:
        app.push_screen(ProcessScreen("this-host", 1, context=ctx))
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ProcessScreen)
        assert screen.check_action("signal", ("SIGTERM",)) is False
        assert "read-only" in str(screen.query_one("#proc-actions").render())
        assert not {"I", "T", "K"} & {k for k, _ in key_rows(screen, [])}


@sync
async def test_readonly_removes_py_spy_and_traces_from_the_host_and_job_screens() -> None:
    """py-spy stops a process while it reads its stacks, a trace makes it run the profiler: not read-only."""
    from dataclasses import replace

    from gpulens.core.model import JobInfo
    from gpulens.tui.screens.host import HostScreen
    from gpulens.tui.widgets.profile_panel import ProfilePanel

    job = JobInfo(pid=4242, tree_id="systemd/bash/python3", cmdline="python3 train.py", user="me", start_time=T0)
    me = replace(sample(T0, host="this-host"), jobs=(job,))
    for readonly in (False, True):
        ctx = FakeContext(StaticSource([SampleEvent(me)]), [SampleEvent(me)])
        ctx.readonly = readonly
        ctx.hostname = "this-host"
        app: App[None] = App()
        async with app.run_test(size=(160, 45)) as pilot:
            for screen in (HostScreen("this-host", context=ctx), JobScreen(ctx.store.jobs(300)[0].key, context=ctx)):
                app.push_screen(screen)
                await pilot.pause()
                offered = {a for a in ("profile", "quick_look", "profile_seconds", "last_flame", "profiler_hint",
                                       "open_profiler") if screen.check_action(a, ())}
                panel = str(screen.query_one(ProfilePanel).render())
                names = {c.title for c in screen.profiling.commands()}
                helped = {k for k, _ in key_rows(screen, [])}
                if readonly:
                    # ? lists the screen's keys as they are now: none of the removed ones.
                    assert not {"f", "d", "F", "L", "o"} & helped, helped
                    assert not offered and not names, (screen, offered, names)
                    assert panel.startswith("read-only (--readonly)"), panel
                    screen.action_profile()  # the key itself does nothing but say why
                    await pilot.pause()
                    assert any("read-only" in n.message for n in app._notifications)
                else:
                    assert {"profile", "quick_look"} <= offered and "Profile" in names, (screen, offered)
                    assert {"f", "d"} <= helped, helped
                    assert not panel.startswith("read-only")
                app.pop_screen()
                await pilot.pause()


@sync
async def test_a_replay_offers_no_py_spy_nor_traces_a_recorded_pid_may_be_another_process_now(tmp_path: Path) -> None:
    from dataclasses import replace

    from gpulens.core.model import JobInfo
    from gpulens.sources.local import Recorder
    from gpulens.sources.replay import ReplaySource
    from gpulens.tui.profiling import REPLAY_NOTE
    from gpulens.tui.screens.host import HostScreen
    from gpulens.tui.widgets.profile_panel import ProfilePanel

    job = JobInfo(pid=4242, tree_id="systemd/bash/python3", cmdline="python3 train.py", user="me", start_time=T0)
    me = SampleEvent(replace(sample(T0, host="this-host"), jobs=(job,)))
    rec = Recorder(str(tmp_path / "r.gpulens"), "test")
    rec.write(me)
    rec.close()
    ctx = FakeContext(ReplaySource(str(tmp_path / "r.gpulens")), [me])  # a recording made on this very host
    app: App[None] = App()
    async with app.run_test(size=(160, 45)) as pilot:
        for screen in (HostScreen("this-host", context=ctx), JobScreen(ctx.store.jobs(300)[0].key, context=ctx)):
            app.push_screen(screen)
            await pilot.pause()
            assert not any(screen.check_action(a, ()) for a in ("profile", "quick_look", "open_profiler"))
            assert str(screen.query_one(ProfilePanel).render()).startswith(REPLAY_NOTE)
            assert not {"f", "d", "o"} & {k for k, _ in key_rows(screen, [])}
            screen.action_profile()
            await pilot.pause()
            assert any(REPLAY_NOTE in n.message for n in app._notifications)
            app.pop_screen()
            await pilot.pause()


@sync
async def test_a_flat_zero_rate_reads_idle_on_a_floor_scale() -> None:
    app: App[None] = App()
    plot = TimeSeriesPlot("Net", rate, hi=None, floor=1000.0)
    async with app.run_test(size=(80, 10)) as pilot:
        await app.mount(plot)
        plot.styles.height = 8
        plot.set_data(plot_data([0.0] * 60, None, "5m", 300))
        await pilot.pause()
        text = plot.render().plain
        assert text.startswith("idle") and "1.0kB/s" in text and "1B/s" not in text.replace("1.0kB/s", "")
        assert plot.scale([0.0])[0] == 1000.0
        plot.set_data(plot_data([0.0, math.nan, 5e6], None, "5m", 300))
        assert plot.scale([0.0, 5e6])[0] == 5.5e6


@sync
async def test_plots_grow_with_the_terminal() -> None:
    heights = []
    for size in ((160, 30), (200, 60)):
        app = demo_app(backfill_s=30)
        async with app.run_test(size=size) as pilot:
            await settle(app, pilot)
            app.jump("job 4711")
            await settle(app, pilot)
            heights.append(app.screen.query_one("#job-util", TimeSeriesPlot).size.height)
    assert heights[1] > heights[0] + 3, heights


@sync
async def test_a_host_without_gpus_names_its_empty_plots_on_one_line_and_gives_the_room_to_the_rest() -> None:
    from dataclasses import replace

    from textual.widgets import Static

    from gpulens.tui.screens._plots import HOST_PLOTS
    from gpulens.tui.screens.host import HostScreen

    reason = "NVML init failed: no NVIDIA driver (test double)"
    bare = [replace(sample(T0 + i, host="this-host"), gpus=(), unavailable={"gpus": reason}) for i in range(30)]
    ctx = FakeContext(StaticSource([SampleEvent(s) for s in bare]), [SampleEvent(s) for s in bare])
    app: App[None] = App()
    async with app.run_test(size=(160, 45)) as pilot:
        screen = HostScreen("this-host", context=ctx)
        app.push_screen(screen)
        await pilot.pause()
        gpu_plots = [s.id for s in HOST_PLOTS if s.metric.startswith("gpu.")]
        assert len(gpu_plots) == 8
        assert not any(screen.query_one(f"#{i}", TimeSeriesPlot).display for i in gpu_plots)
        assert screen.query_one("#cpu", TimeSeriesPlot).display
        na = screen.query_one("#plots-na", Static)
        text = str(na.render())
        assert na.display and text.count(reason) == 1, text  # one line for the eight, with the reason
        assert "GPU Utilization" in text and "GPU Power" in text and "NVLink rx+tx" in text
        assert "CPU" not in text
        cpu_rows = screen.query_one("#cpu", TimeSeriesPlot).size.height

        # A GPU appears: its plots come back, the line goes.
        for i in range(30, 33):
            ctx.store.apply(SampleEvent(sample(T0 + i, host="this-host")))
        screen.refresh_data()
        await pilot.pause()
        assert all(screen.query_one(f"#{i}", TimeSeriesPlot).display for i in gpu_plots)
        # (the samples' storage has no figures, with a reason: that plot stays left out, on its own line)
        assert str(na.render()) == "n/a here  Storage Bandwidth (read+write) — no disks"
        assert screen.query_one("#cpu", TimeSeriesPlot).size.height < cpu_rows  # 14 plots share the room now

        # Utilisation turns n/a, but the window holds its values: the plot stays, with what it has.
        ctx.store.apply(SampleEvent(sample(T0 + 33, host="this-host", util=None)))
        screen.refresh_data()
        await pilot.pause()
        assert screen.query_one("#gpu-util", TimeSeriesPlot).display


@sync
async def test_a_python_c_scripts_newlines_read_as_spaces_in_the_job_screen_and_process_table() -> None:
    from gpulens.core.model import JobInfo

    script = "/usr/bin/python3 -c import time\nfor _ in range(9):\n\ttime.sleep(1)"
    job = JobInfo(pid=4242, tree_id="systemd/bash/python3", cmdline=script, user="alice", start_time=T0)
    cells = ProcessTable.cells("this-host", job)
    assert cells[-1] == "/usr/bin/python3 -c import time for _ in range(9):  time.sleep(1)"
    me = sample(T0, host="this-host", jobs=(job,))
    ctx = FakeContext(StaticSource([SampleEvent(me)]), [SampleEvent(me)])
    app: App[None] = App()
    async with app.run_test(size=(160, 45)) as pilot:
        key = ctx.store.jobs(300)[0].key
        app.push_screen(JobScreen(key, context=ctx))
        await pilot.pause()
        info = app.screen.query_one("#job-info", FieldsLine).text.plain
        assert "import time for _ in range(9):" in info and "\t" not in info


@sync
async def test_per_gpu_bands_keep_their_scale_note_when_the_summary_is_fitted() -> None:
    """The bands' "each lo–hi" and "N of M shown" are part of the line fitted: min and "over" go first."""
    app: App[None] = App()
    plot = TimeSeriesPlot("GPU Utilization", lambda v: "n/a" if v is None else f"{v:.0f}%")
    async with app.run_test(size=(70, 10)) as pilot:
        await app.mount(plot)
        plot.styles.height = 6
        values = [float(i % 100) for i in range(120)]
        lines = [(f"GPU{i}", values) for i in range(8)]
        plot.set_data(plot_data(values, None, "5m", 300, lines=lines, note="per GPU", covered_s=120.0))
        await pilot.pause()
        head = plot.render().plain.splitlines()[0]
        assert re.search(r"\[5m\] per GPU · each 0%–100% · \d of 8 shown$", head), head
        assert len(head) <= plot.content_size.width and "min" not in head, head


def test_a_gpu_that_reports_nothing_reads_one_na_per_field_not_na_slash_na() -> None:
    from gpulens.core.model import GpuSample

    me = sample(T0, host="h")
    ctx = FakeContext(StaticSource([SampleEvent(me)]), [SampleEvent(me)])
    lost = GpuSample(index=3, name="H100", uuid="u3", unavailable={"power_w": "GPU is lost"})
    text = GpuScreen("h", 3, context=ctx)._info(lost).plain
    assert "n/a/n/a" not in text, text
    for field in ("power n/a", "clocks n/a", "ECC c/u n/a", "PCIe rx/tx n/a"):
        assert field in text, (field, text)
    half = GpuScreen("h", 3, context=ctx)._info(GpuSample(index=3, name="H100", uuid="u3", power_w=250.0)).plain
    assert "power 250W / n/a" in half  # a known draw beside an unknown limit keeps both


def test_an_xid_reported_sample_after_sample_is_one_line_with_its_meaning() -> None:
    from gpulens.store.gpu_events import GpuEvent
    from gpulens.tui.screens.gpu import event_line, group_events

    evs = [GpuEvent(T0 + i, "xid", "79") for i in range(0, 30, 2)]
    evs += [GpuEvent(T0 + 40, "throttle", "hw_slowdown"), GpuEvent(T0 + 50, "throttle_end", "hw_slowdown"),
            GpuEvent(T0 + 60, "xid", "999")]
    runs = group_events(evs)
    assert [(e.detail, last - e.time, n) for e, last, n in runs] == [
        ("79", 28.0, 15), ("hw_slowdown", 0.0, 1), ("hw_slowdown", 0.0, 1), ("999", 0.0, 1)]
    line = event_line(runs[0][0], "12:00:00", runs[0][2], "12:00:28").plain.replace("  ", " ")
    assert "XID 79 ×15, last 12:00:28" in line and "fallen off the bus" in line
    assert "kernel log" in event_line(runs[-1][0], "12:01:00").plain  # a code the catalogue does not list


@sync
async def test_a_lost_gpu_holds_no_job_memory_and_reads_na_not_dash() -> None:
    app = demo_app(backfill_s=10)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        lost = app.store.latest("gpu-node11")
        assert lost is not None and "gpu" in lost.gpus[3].unavailable
        job = next(j for j in app.store.jobs(300) if "gpu-node11" in j.hosts)
        assert ("gpu-node11", "3") not in job.gpus  # NVML lists no process on a lost GPU
        cells = GpuTable.cells(lost.gpus[3])
        assert cells[-2] == "n/a"  # throttle: not known, not "-"
        from gpulens.tui.screens.views import GpuFleetTable

        assert GpuFleetTable.cells("gpu-node11", lost.gpus[3], math.nan)[-1] == "n/a"  # :gpus too
        app.jump("gpus")
        await settle(app, pilot)
        fleet = app.screen.query_one(GpuFleetTable)
        await pilot.press("L")  # throttle: the loudest first
        await settle(app, pilot)
        assert fleet.order[0] == "gpu-node05:2"  # HW-therm, the one critical throttle of the demo
        info = GpuScreen("gpu-node11", 3, context=app)._info(lost.gpus[3]).plain
        assert "throttle n/a" in info and "fallen off the bus" in info


@sync
async def test_the_job_screens_process_table_takes_the_room_the_plots_leave() -> None:
    app = demo_app(backfill_s=10)
    async with app.run_test(size=(200, 140)) as pilot:
        await settle(app, pilot)
        app.jump("job 4711")
        await settle(app, pilot)
        table = app.screen.query_one(ProcessTable)
        job = app.store.job("4711", 300)
        assert job is not None
        rows = len(job.processes)
        assert rows > 20 and table.region.height == rows + 1  # every row and the header, nothing to scroll
        assert not app.screen.query_one("#body").show_vertical_scrollbar


@sync
async def test_the_gpu_info_never_splits_a_label_from_its_value() -> None:
    app = demo_app(backfill_s=10)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        app.push_screen(GpuScreen("gpu-node05", 2, context=app))
        await settle(app, pilot)
        for size in ((120, 40), (84, 30), (200, 50)):
            await pilot.resize_terminal(*size)
            await settle(app, pilot)
            info = app.screen.query_one("#gpu-info")
            lines = [str(info.render_line(y).text).rstrip() for y in range(info.size.height)]
            assert all(len(line) <= info.size.width for line in lines)
            for label in ("PCIe rx/tx", "NVLink rx/tx", "ECC c/u", "clocks", "power"):
                line = next(x for x in lines if label in x)
                assert not line.endswith(label), (size, line)  # the value is on the label's line


@sync
async def test_enter_on_the_job_screen_goes_to_the_processes_and_again_opens_one() -> None:
    app = demo_app(backfill_s=10)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        app.jump("job 4711")
        await settle(app, pilot)
        table = app.screen.query_one(ProcessTable)
        assert not table.has_focus
        await pilot.press("enter")
        await settle(app, pilot)
        assert table.has_focus
        await pilot.press("enter")
        await settle(app, pilot)
        assert isinstance(app.screen, ProcessScreen)


def test_a_replay_is_found_through_the_sources_that_wrap_it(tmp_path: Path) -> None:
    from gpulens.sources.local import MultiSource, Recorder, RecordingSource, replays
    from gpulens.sources.replay import ReplaySource

    me = SampleEvent(sample(T0, host="this-host"))
    rec = Recorder(str(tmp_path / "r.gpulens"), "test")
    rec.write(me)
    rec.close()
    replay = ReplaySource(str(tmp_path / "r.gpulens"))
    again = RecordingSource(replay, Recorder(str(tmp_path / "again.gpulens")))  # --replay F --record G
    assert replays(replay) and replays(again) and replays(MultiSource([StaticSource([]), again]))
    assert not replays(StaticSource([])) and not replays(MultiSource([StaticSource([])]))
    again.recorder.close()


@sync
async def test_a_host_sum_over_fewer_gpus_than_the_host_has_says_so() -> None:
    """gpu-node11's GPU 3 is lost: its power, PCIe and hottest temperature cover 7 GPUs, and the plots say it."""
    app = demo_app(backfill_s=10)
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(app, pilot)
        app.jump("host gpu-node11")
        await settle(app, pilot)
        power = app.screen.query_one("#gpu-power", TimeSeriesPlot)
        assert power.data.note == "7 of 8 GPUs read"
        assert "[5m] 7 of 8 GPUs read" in power.render().plain.splitlines()[0]
        app.jump("host gpu-node05")
        await settle(app, pilot)
        assert app.screen.query_one("#gpu-power", TimeSeriesPlot).data.note == ""  # every GPU reads


def test_a_job_plot_over_hosts_names_how_many_read_now() -> None:
    from gpulens.store.views import WindowStats
    from gpulens.tui.screens.job_data import _reading

    read, lost = WindowStats(300, 5.0, 4.0, 1.0, 9.0, 10, 10.0), WindowStats(300, math.nan, 4.0, 1.0, 9.0, 10, 10.0)
    assert _reading([read, lost, read], "hosts") == "2 of 3 hosts read"
    assert _reading([read, read], "hosts") == ""  # all of them
    assert _reading([lost, lost], "hosts") == ""  # none: the plot says n/a itself


@sync
async def test_a_window_key_while_paused_redraws_the_plots_for_the_header_s_window() -> None:
    """Paused at 1h, '2' sets 5m in the header and in the plots alike (they kept 1h), and stays paused."""
    app = demo_app(backfill_s=120)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        app.jump("host gpu-node05")
        await settle(app, pilot)
        await pilot.press("4", "p", "2")
        await pilot.pause()
        plot = app.screen.query_one("#gpu-util", TimeSeriesPlot)
        assert app.paused and app.window == "5m"
        assert plot.data.window == "5m" and plot.data.window_s == 300
        header = app.screen.query_one(AppHeader)
        assert header.paused and header.window.startswith("5m")  # the badge stays (no tick comes to redraw it)


@sync
async def test_a_refused_signal_key_says_why_instead_of_doing_nothing() -> None:
    """K on a process that has gone (or that is not yours) is answered with the reason, not silence."""
    me = sample(T0, host="this-host")
    ctx = FakeContext(StaticSource([SampleEvent(me)]), [SampleEvent(me)])
    ctx.hostname = "this-host"
    app: App[None] = App()
    async with app.run_test(size=(120, 35)) as pilot:
        app.push_screen(ProcessScreen("this-host", 999_999, context=ctx))  # no such process
        await pilot.pause()
        screen = app.screen
        said: list[str] = []
        screen.notify = lambda message, **kw: said.append(str(message))  # type: ignore[method-assign]
        assert screen.check_action("signal", ("SIGKILL",)) is True
        await pilot.press("K")
        await pilot.pause()
        assert said and said[0].startswith("SIGKILL not sent: "), said
        assert not isinstance(app.screen, ModalScreen)  # nothing to confirm


@sync
async def test_per_gpu_is_offered_only_on_a_host_with_gpus() -> None:
    from dataclasses import replace

    from gpulens.tui.screens.host import HostScreen

    me = replace(sample(T0, host="cpu-only"), gpus=())
    ctx = FakeContext(StaticSource([SampleEvent(me)]), [SampleEvent(me)])
    app: App[None] = App()
    async with app.run_test(size=(160, 45)) as pilot:
        app.push_screen(HostScreen("cpu-only", context=ctx))
        await pilot.pause()
        assert app.screen.check_action("per_gpu", ()) is False
        assert "g" not in {k for k, _ in key_rows(app.screen, [])}
    demo = demo_app(backfill_s=10)
    async with demo.run_test(size=(160, 45)) as pilot:
        await settle(demo, pilot)
        demo.jump("host gpu-node05")
        await settle(demo, pilot)
        assert demo.screen.check_action("per_gpu", ()) is True
