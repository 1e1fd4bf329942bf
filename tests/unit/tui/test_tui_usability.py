"""Regressions found by driving the real app as a demanding user (tmux, 80x24 to 200x50).

Each test fails without its fix: fast typing after '/' and ':', tables that
cut or hide columns, axis labels without units, a cut legend, placeholders
that said the wrong thing or were cut, host-down time, why a job cannot be
profiled, checkboxes unreadable without colour, MultiSource hosts, --tls-ca.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import pytest
from textual import events
from textual.widgets import Input, Static

from gpulens.core import units as fmt
from gpulens.core.events import HostStatusEvent, SampleEvent, SourceEvent
from gpulens.core.model import (
    CpuSample,
    HostSample,
    MemorySample,
    NetworkSample,
    StorageSample,
)
from gpulens.ipc.kineto.untraceable import Untraceable, UntraceableKind
from gpulens.sources.demo import DemoSource
from gpulens.sources.local import MultiSource
from gpulens.tui.app import GpulensApp
from gpulens.tui.screens.host import HostScreen
from gpulens.tui.screens.job import JobScreen
from gpulens.tui.screens.overview import OverviewScreen
from gpulens.tui.widgets.gpu_table import GpuTable, mem_pair, pair
from gpulens.tui.widgets.heatmap import GpuHeatmap
from gpulens.tui.widgets.host_table import HostTable
from gpulens.tui.widgets.job_table import JobTable
from gpulens.tui.widgets.plot import TimeSeriesPlot, axis_label
from gpulens.tui.widgets.sparklines import HostSparklines
from tests.fakes.trace_service import FakeTraceService
from tests.fakes.tui_fakes import (
    FROZEN,
    FakeProfiler,
    ProfilingSource,
    StaticSource,
    cell,
    demo_app,
    frozen_clock,
    settle,
    sync,
    utc,  # noqa: F401 - a fixture, used by name below
)

pytestmark = pytest.mark.usefixtures("utc")


def typed(app: GpulensApp, *keys: str) -> None:
    """Queue keys all at once, as a fast typist or a terminal paste delivers them."""
    chars = {"slash": "/", "colon": ":", "space": " ", "enter": None, "escape": None}
    for key in keys:
        app.post_message(events.Key(key, chars.get(key, key)))


def line_text(widget: Any, y: int) -> str:
    return str(widget.render_line(y).text)


@sync
async def test_keys_typed_fast_after_slash_go_into_the_filter_and_after_enter_to_the_table() -> None:
    app = demo_app(backfill_s=60)
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(app, pilot)
        typed(app, "slash", *"node12", "enter", "U", "C")
        await settle(app, pilot)
        assert app.screen.query_one(Input).value == "node12"  # was '' then 'UC'
        hosts = app.screen.query_one(HostTable)
        assert hosts.order == ["gpu-node12"] and hosts.sort_index == 6  # both letters sorted (CPU last)


@sync
async def test_jump_typed_fast_reaches_the_host_and_escape_pops_once() -> None:
    app = demo_app(backfill_s=60)
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(app, pilot)
        typed(app, "colon", *"host", "space", *"gpu-node03", "enter")
        await settle(app, pilot)
        assert isinstance(app.screen, HostScreen) and app.screen.host == "gpu-node03"
        await pilot.press("escape")
        await settle(app, pilot)
        typed(app, "colon", *"job", "space", *"4711", "enter", "escape")
        await settle(app, pilot)
        # The Esc right behind Enter closes the job, never the overview under it.
        assert [type(s).__name__ for s in app.screen_stack][1:] == ["OverviewScreen"]


@sync
async def test_tables_use_spare_width_and_drop_columns_instead_of_cutting() -> None:
    app = demo_app(backfill_s=60)
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(app, pilot)
        jobs = app.screen.query_one(JobTable)
        row = jobs.order.index("gpu-node12:11100")
        assert "gpu-node12:11100 " in line_text(jobs, row + 1)  # was 'gpu-node12:…'
        # Where it runs in full; the tree ID, cut at the left as ever, still ends in the program.
        assert " pod vllm-0 " in line_text(jobs, row + 1) and "-runc-v2/python3.11 " in line_text(jobs, row + 1)
    app = demo_app(backfill_s=60)
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(app, pilot)
        hosts = app.screen.query_one(HostTable)
        header = line_text(hosts, 0)
        assert "Alerts" in header and "Power" not in header  # dropped, not cut mid-column
        assert "IDLE-HELD 4" in line_text(hosts, hosts.order.index("gpu-node07") + 1)


@sync
async def test_gpu_table_shows_every_column_at_160_and_compact_pairs() -> None:
    app = demo_app(backfill_s=60)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        app.jump("host gpu-node12")
        await settle(app, pilot)
        gpus = app.screen.query_one(GpuTable)
        header = line_text(gpus, 0)
        for label in ("PCIe rx/tx", "NVLink rx/tx", "XID", "Throttle", "Procs"):
            assert label in header  # XID was cut, Throttle and Procs off screen
        latest = app.store.latest("gpu-node12")
        assert latest is not None
        g1 = latest.gpus[1]
        assert g1.mem_used_bytes is not None
        assert cell(gpus, "1", "mem") == f"{g1.mem_used_bytes / 2**30:.1f}/{fmt.size(g1.mem_total_bytes)}"
        assert "…" not in line_text(gpus, 2)
    assert pair(3.6e9, 2.7e9, fmt.rate) == "3.6/2.7GB/s"
    assert pair(900, 2e6, fmt.rate) == "0.0009/2.0MB/s"  # one unit, the larger one's (issue 31 item 20)
    assert pair(1.1e9, 854e6, fmt.rate) == "1.1/0.854GB/s"  # it read 1.1GB/s/854MB/s
    assert pair(1e9, None, fmt.rate) == "1.0GB/s / n/a"
    assert mem_pair(600 * 2**20, 80 * 2**30) == "0.6/80.0GiB"
    assert fmt.size(288.8 * 2**20) == "288.8MiB"  # binary units say so, as nvitop and btop do


def test_axis_label_keeps_the_unit() -> None:
    assert axis_label("18.0GB/s") == "18GB/s"  # was '18.0GB/'
    assert axis_label("294.6MB/s") == "295MB/s"
    assert axis_label("100%") == "100%"
    plot = TimeSeriesPlot("Net", fmt.rate, hi=None)
    plot.set_data([1.0e9, 16.4e9], None, "5m")
    assert axis_label(fmt.rate(16.4e9 * 1.1)).endswith("B/s")


@sync
async def test_heatmap_legend_and_sparkline_header_fit() -> None:
    app = demo_app(backfill_s=60)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        heat = app.screen.query_one(GpuHeatmap)
        legend = str(heat.header_line(0, heat.size.width).text)
        assert legend.rstrip().endswith("keys u a m w t")  # was cut at 't:te'
        wide = str(heat.header_line(0, 200).text)
        assert wide.rstrip().endswith("keys u a m w t")  # one wording at every width (issue 31 item 20)
        spark = app.screen.query_one(HostSparklines)
        head = str(spark.header_line(0, spark.size.width).text)
        assert head.count("now") == 2  # the figure is the latest value, not the window mean


@sync
async def test_filter_without_match_says_so_not_job_pattern() -> None:
    app = demo_app(backfill_s=60)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        await pilot.press("slash", "z", "z", "z")
        await settle(app, pilot)
        jobs = app.screen.query_one(JobTable)
        assert jobs.row_count == 0
        assert "no job matches the filter 'zzz'" in line_text(jobs, 1)
        assert "no host matches the filter 'zzz'" in line_text(app.screen.query_one(HostTable), 1)


def _cpu_sample(host: str, t: float, unavailable: dict[str, str] | None = None) -> SampleEvent:
    return SampleEvent(HostSample(host=host, time=t, cpu=CpuSample(total_percent=40.0),
                                  memory=MemorySample(total_bytes=100, used_bytes=50),
                                  network=NetworkSample(rx_bytes_per_s=1.0, tx_bytes_per_s=2.0),
                                  storage=StorageSample(read_bytes_per_s=1.0, write_bytes_per_s=2.0),
                                  unavailable=unavailable or {}))


@sync
async def test_long_reasons_wrap_instead_of_being_cut() -> None:
    why = ("NVML init failed: NVML library libnvidia-ml.so.1 not found: no NVIDIA driver installed "
           "(NVML_ERROR_LIBRARY_NOT_FOUND)")
    events_ = [_cpu_sample("cpu-only", FROZEN - i, {"gpus": why}) for i in range(5)]
    app = GpulensApp(source=StaticSource(events_), clock=frozen_clock)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        heat = app.screen.query_one(GpuHeatmap)
        shown = " ".join(line_text(heat, y).strip() for y in range(1, 4))
        assert "(NVML_ERROR_LIBRARY_NOT_FOUND)" in shown
        await pilot.press("enter")
        await settle(app, pilot)
        gpus = app.screen.query_one(GpuTable)
        shown = " ".join(line_text(gpus, y).strip() for y in range(1, 4))
        assert "(NVML_ERROR_LIBRARY_NOT_FOUND)" in shown


@sync
async def test_host_down_shows_reason_and_time() -> None:
    down_at = FROZEN - 42
    events_: list[SourceEvent] = [_cpu_sample("node-a", FROZEN - 60 + i) for i in range(10)]
    events_.append(HostStatusEvent(host="node-a", up=False, reason="Connection refused", time=down_at))
    app = GpulensApp(source=StaticSource(events_), clock=frozen_clock)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        hosts = app.screen.query_one(HostTable)
        assert cell(hosts, "node-a", "alerts") == f"! DOWN {app.clock_text(down_at)}"  # '!': critical
        await pilot.press("enter")
        await settle(app, pilot)
        status = str(app.screen.query_one("#host-status", Static).render())
        assert f"since {app.clock_text(down_at)} (42s ago): Connection refused" in status


@sync
async def test_job_screen_says_why_it_cannot_be_profiled(monkeypatch: pytest.MonkeyPatch) -> None:
    for kw, expected in (
        # a double that says why a pid cannot be traced: none of them polls
        ({"trace_service": FakeTraceService(not_polling=Untraceable(UntraceableKind.NO_DAEMON_ENV))},
         "pid 11100: KINETO_USE_DAEMON is not set"),
        ({"trace_error": "trace service not started: name taken"}, "trace service not started: name taken"),
    ):
        app = demo_app(backfill_s=60, hostname="gpu-node12", **kw)
        monkeypatch.setattr(type(app.source), "simulated", property(lambda self: False))
        async with app.run_test(size=(160, 45)) as pilot:
            await settle(app, pilot)
            app.jump("job gpu-node12:11100")
            await settle(app, pilot)
            assert isinstance(app.screen, JobScreen)
            line = app.screen.query_one("#profiler-action", Static)
            assert line.display and f"Open Profiler unavailable: {expected}" in str(line.render())
            assert app.screen.check_action("open_profiler", ()) is False


@sync
async def test_profiler_options_readable_without_colour() -> None:
    from textual.app import App, ComposeResult

    from gpulens.tui.widgets.trace_options import OptionBox

    class Boxes(App[None]):
        def compose(self) -> ComposeResult:
            yield OptionBox("shapes", value=False, id="off")
            yield OptionBox("stack", value=True, id="on")

    app = Boxes()
    async with app.run_test(size=(40, 8)) as pilot:
        await pilot.pause()
        assert "X" not in str(app.query_one("#off", OptionBox).render())
        assert "X" in str(app.query_one("#on", OptionBox).render())


def test_multisource_passes_expected_hosts_through() -> None:
    class Part(StaticSource):
        def __init__(self, hosts: list[str]) -> None:
            super().__init__([])
            self.hosts = hosts

        def expected_hosts(self) -> list[str]:
            return self.hosts

    multi = MultiSource([Part(["a:1", "b:2"]), StaticSource([]), Part(["b:2", "c:3"])])
    assert multi.expected_hosts() == ["a:1", "b:2", "c:3"]


def test_tui_accepts_tls_ca() -> None:
    from gpulens.commands import tui as cmd_tui
    parser = argparse.ArgumentParser()
    cmd_tui.add_arguments(parser)
    args = parser.parse_args(["--connect", "tls://node1:7070", "--tls-ca", "/etc/ca.pem"])
    assert args.tls_ca == "/etc/ca.pem"


def test_help_lists_each_key_once_and_groups_families() -> None:
    from gpulens.tui.screens.help import key_rows

    rows = key_rows(OverviewScreen(), GpulensApp.BINDINGS)
    keys = [k for k, _ in rows]
    assert "q / ctrl+c" in keys and "ctrl+c" not in keys  # one Quit row, not two
    assert keys.count("esc") == 1 and "escape" not in keys  # 'esc Back' was listed twice
    assert ("1 2 3 4", "window: 1m / 5m / 15m / 1h") in rows
    assert dict(rows)["u a m w t"].startswith("heatmap: GPU util / SM activity")


@sync
async def test_profiler_trace_button_stays_on_screen_at_80_columns() -> None:
    from textual.app import App
    from textual.widgets import Button

    from gpulens.tui.screens.profiler import ProfilerScreen

    class Host(App[None]):
        def on_mount(self) -> None:
            self.push_screen(ProfilerScreen(FakeTraceService(), "localhost", [4242]))

    app = Host()
    async with app.run_test(size=(80, 24)) as pilot:
        for _ in range(3):
            await pilot.pause()
        button = app.screen.query_one("#pf-trace", Button)
        memory = app.screen.query_one("#pf-memory")
        assert button.region.right <= 80 and memory.region.right <= 80  # were past column 100
        assert button.region.width > 0


@sync
async def test_f_on_a_remote_host_asks_its_agent_for_the_profile(tmp_path: Any) -> None:
    """py-spy reaches local pids only: on another host, ``f`` goes through the agent."""
    from gpulens.core.model import JobInfo
    from gpulens.ipc.request_schema import ProfileAnswer
    from gpulens.tui.screens.flame import FlameScreen
    from tests.fakes.request_source import Answered, FakeAgent
    from tests.fakes.tui_fakes import AgentSource

    folded = tmp_path / "profile-far.folded"
    folded.write_bytes(b"main;train;matmul 30\nmain;train;load 10\n")
    job = JobInfo(pid=777, tree_id="slurmstepd/python", cmdline="python train.py", user="u",
                  start_time=FROZEN - 100, cpu_percent=99.0)
    sample = _cpu_sample("far-host", FROZEN).sample
    sample = HostSample(host=sample.host, time=sample.time, cpu=sample.cpu, memory=sample.memory,
                        network=sample.network, storage=sample.storage, jobs=(job,))
    agent = FakeAgent({"profile": Answered(ProfileAnswer(files=(folded.name,)), {folded.name: folded})})
    asked = agent.asked
    app = GpulensApp(source=AgentSource([SampleEvent(sample)], agent), clock=frozen_clock)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        app.jump("host far-host")
        await settle(app, pilot)
        await pilot.press("f")
        deadline = time.monotonic() + 10  # a worker asks the agent and pushes the flame graph
        while not isinstance(app.screen, FlameScreen) and time.monotonic() < deadline:
            await pilot.pause(0.05)
        assert asked == [("far-host", "profile", {"pids": [777], "duration_s": 5.0, "rate_hz": 100})]
        assert isinstance(app.screen, FlameScreen)
        assert app.screen.profile.total == 40


@sync
async def test_d_dumps_each_local_process_and_opens_one_flame_graph() -> None:
    """``d``: one py-spy dump per local pid, merged under ``process PID`` frames; remote: a notice."""
    from gpulens.analysis.flame.model import build_from_stacks
    from gpulens.core.model import JobInfo
    from gpulens.tui.screens.flame import FlameScreen

    dumped: list[int] = []

    def fake_dump(pid: int) -> Any:
        dumped.append(pid)
        return build_from_stacks([([f"thread {pid}", "main", "step"], 1)], "samples", f"dump {pid}")

    jobs = tuple(JobInfo(pid=pid, tree_id="slurmstepd/python", cmdline="python train.py", user="u",
                         start_time=FROZEN - 100, cpu_percent=50.0) for pid in (501, 502))
    events_ = []
    for host in ("near-host", "far-host"):
        base = _cpu_sample(host, FROZEN).sample
        events_.append(SampleEvent(HostSample(host=base.host, time=base.time, cpu=base.cpu, memory=base.memory,
                                              network=base.network, storage=base.storage, jobs=jobs)))
    app = GpulensApp(source=ProfilingSource(events_, FakeProfiler(dump=fake_dump)), clock=frozen_clock,
                     hostname="near-host")
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        app.jump("host near-host")
        await settle(app, pilot)
        assert "Quick look" in [c.title for c in app.get_system_commands(app.screen)]
        await pilot.press("d")
        deadline = time.monotonic() + 10  # a worker dumps each process and pushes the flame graph
        while not isinstance(app.screen, FlameScreen) and time.monotonic() < deadline:
            await pilot.pause(0.05)
        assert dumped == [501, 502]
        assert isinstance(app.screen, FlameScreen)
        assert app.screen.profile.total == 2
        roots = {frames[0] for frames, _ in app.screen.profile.stacks()}
        assert roots == {"process 501", "process 502"}
        await pilot.press("escape")
        app.jump("host far-host")
        await settle(app, pilot)
        await pilot.press("d")
        await pilot.pause()
        assert any("local only" in str(n.message) for n in app._notifications)
        assert dumped == [501, 502]  # nothing dumped for the remote host


def test_recording_and_multi_sources_pass_requests_through() -> None:
    from gpulens.ipc.errors import RequestFailed
    from gpulens.ipc.request_schema import (
        ProfileAnswer,
        ProfileParams,
        TraceAnswer,
        TraceParams,
        answer_to_wire,
    )
    from gpulens.sources.local import RecordingSource
    from tests.fakes.request_source import FakeAgent, Script
    from tests.fakes.tui_fakes import AgentSource

    def known_only(answer: ProfileAnswer | TraceAnswer) -> Script:
        return lambda host, params: answer if host == "known" else RequestFailed(f"unknown host {host!r}")

    agent = FakeAgent({"profile": known_only(ProfileAnswer(files=("ok",))), "trace": known_only(TraceAnswer())})
    multi = MultiSource([StaticSource([]), AgentSource([], agent)])
    assert multi.request("known", ProfileParams(pids=(1,)), 1.0).result().result == answer_to_wire(ProfileAnswer(files=("ok",)))
    with pytest.raises(RequestFailed, match="unknown host"):
        multi.request("other", ProfileParams(pids=(1,)), 1.0).result()

    class NoFile:
        def write(self, event: Any) -> None: ...
        def close(self) -> None: ...

    rec = RecordingSource(AgentSource([], agent), NoFile())  # type: ignore[arg-type]
    assert rec.request("known", TraceParams(), 1.0).result().result == answer_to_wire(TraceAnswer())
    with pytest.raises(RequestFailed, match="no source can send requests"):
        RecordingSource(StaticSource([]), NoFile()).request("x", ProfileParams(pids=(1,)), 1.0).result()  # type: ignore[arg-type]


@sync
async def test_command_palette_lists_the_screen_actions_too() -> None:
    app = demo_app(backfill_s=60)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert {"Filter", "Reverse sort"} <= set(titles) and "Profile" not in titles
        assert titles.count("Keys") == 1  # Textual's own "Keys" panel is not listed beside ours
        app.jump("host gpu-node01")
        await settle(app, pilot)
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert {"Profile", "Back"} <= set(titles) and "Filter" not in titles


@sync
async def test_header_keeps_paused_and_clock_when_the_crumbs_are_long() -> None:
    from gpulens.tui.widgets.header import AppHeader

    app = demo_app(backfill_s=60)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        header = app.screen.query_one(AppHeader)
        header.crumbs = ("gpulens", "Overview", "gpu-node12.cluster.example.org", "job gpu-node12:11100")
        header.paused = True
        await pilot.pause()
        text = header.render().plain
        assert "PAUSED" in text and text.rstrip().endswith(header.clock)  # were cropped off
        assert "job gpu-node12:11100" in text and "gpu-node12.cluster" not in text  # oldest crumbs go


@sync
async def test_throttle_reasons_fit_at_160_and_80_columns() -> None:
    for size in ((160, 45), (80, 24)):
        app = demo_app(backfill_s=60)
        async with app.run_test(size=size) as pilot:
            await settle(app, pilot)
            app.jump("host gpu-node05")  # GPU 2 throttles for heat
            await settle(app, pilot)
            gpus = app.screen.query_one(GpuTable)
            assert "SW-therm,HW-therm" in line_text(gpus, 3)  # was 'sw_therma…'


@sync
async def test_filter_line_takes_q_colon_and_slash_as_text() -> None:
    app = demo_app(backfill_s=60)
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(app, pilot)
        await pilot.press("slash", "q", "colon", "slash", "x")
        await settle(app, pilot)
        assert app.screen.query_one(Input).value == "q:/x"  # ':' and '/' are priority keys elsewhere
        assert isinstance(app.screen, OverviewScreen) and app.is_running


@sync
async def test_recording_says_rec_and_how_much_in_the_header(tmp_path: Path) -> None:
    from gpulens.sources.local import Recorder, RecordingSource
    from gpulens.tui.widgets.header import AppHeader

    path = tmp_path / "run.gpulens"
    source = RecordingSource(DemoSource(seed=7, clock=frozen_clock, live=False, backfill_s=5),
                             Recorder(str(path), "demo", True))
    app = GpulensApp(source, clock=frozen_clock)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        written = source.recorder.bytes
        assert written > 1000
        header = str(app.screen.query_one(AppHeader).render())
        assert f"demo · REC {fmt.size(written)}" in header, header
    source.recorder.close()
    assert path.stat().st_size == source.recorder.bytes
