"""Issue 31 item 5: on a host without NVML a process's GPU memory is n/a with the reason, never 0 B."""

from __future__ import annotations

from textual.app import App

from gpulens.core.events import SampleEvent
from gpulens.core.model import (
    CpuSample,
    HostSample,
    JobInfo,
    MemorySample,
    NetworkSample,
    StorageSample,
)
from gpulens.store.views import gpu_unreadable
from gpulens.tui.screens.job import JobScreen
from gpulens.tui.screens.process import ProcessScreen
from gpulens.tui.widgets.plot import TimeSeriesPlot
from gpulens.tui.widgets.process_table import ProcessTable
from tests.fakes.tui_fakes import FROZEN, FakeContext, StaticSource, sync
from tests.unit.store.test_store import sample

NO_NVML = "NVML init failed: NVML Shared Library Not Found"


def _no_gpu_host() -> HostSample:
    job = JobInfo(pid=42, tree_id="systemd/sshd/bash/python", cmdline="python train.py", user="u",
                  start_time=FROZEN - 60, cpu_percent=50.0, rss_bytes=1 << 30, job_key="JOB_ID=7")
    return HostSample(host="cpu-node", time=FROZEN, cpu=CpuSample(total_percent=50.0),
                      memory=MemorySample(total_bytes=100, used_bytes=50),
                      network=NetworkSample(rx_bytes_per_s=1.0, tx_bytes_per_s=1.0),
                      storage=StorageSample(read_bytes_per_s=1.0, write_bytes_per_s=1.0), jobs=(job,),
                      unavailable={"gpus": NO_NVML})


def test_the_reason_is_the_samples_own() -> None:
    assert gpu_unreadable(_no_gpu_host()) == NO_NVML
    assert gpu_unreadable(sample(FROZEN)) is None  # a host with a GPU
    assert gpu_unreadable(None) is None


@sync
async def test_job_table_and_process_screen_say_na_not_zero() -> None:
    s = _no_gpu_host()
    ctx = FakeContext(StaticSource([SampleEvent(s)]), [SampleEvent(s)], hostname="cpu-node")
    app: App[None] = App()
    async with app.run_test(size=(160, 45)) as pilot:
        app.push_screen(JobScreen("JOB_ID=7", context=ctx))
        await pilot.pause()
        table = app.screen.query_one(ProcessTable)
        row = table._cells["cpu-node:42"]
        assert row[7] == "n/a" and row[6] == "n/a" and "0B" not in row  # GPU mem, GPU#
        app.push_screen(ProcessScreen("cpu-node", 42, context=ctx))
        await pilot.pause()
        info = str(app.screen.query_one("#proc-info").render())
        assert "GPU mem n/a" in info
        plot = app.screen.query_one("#proc-gpumem", TimeSeriesPlot)
        assert NO_NVML in str(plot.data.reason)


@sync
async def test_a_down_hosts_process_screen_says_down_and_refuses_signals() -> None:
    """Issue 31 item 6: 11 s after its agent died the process screen looked live and offered I/T/K."""
    from gpulens.core.events import HostStatusEvent

    s = _no_gpu_host()
    ctx = FakeContext(StaticSource([SampleEvent(s)]), [SampleEvent(s),
                      HostStatusEvent(host="cpu-node", up=False, reason="connection lost", time=FROZEN + 5)],
                      hostname="other-host")
    ctx.down_since = lambda host: FROZEN + 5 if host == "cpu-node" else None  # type: ignore[method-assign]
    app: App[None] = App()
    async with app.run_test(size=(160, 45)) as pilot:
        app.push_screen(ProcessScreen("cpu-node", 42, context=ctx))
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ProcessScreen)
        down = str(screen.query_one("#proc-down").render())
        assert down.startswith("host cpu-node DOWN since ") and "connection lost" in down
        assert screen.query_one("#proc-down").display and screen.has_class("-down")
        assert (screen.why_not() or "").startswith("host cpu-node DOWN since ")
        assert "signals: host cpu-node DOWN" in str(screen.query_one("#proc-actions").render())


@sync
async def test_a_jobs_down_host_is_named_on_the_job_screen() -> None:
    from gpulens.core.events import HostStatusEvent

    s = _no_gpu_host()
    ctx = FakeContext(StaticSource([SampleEvent(s)]), [SampleEvent(s),
                      HostStatusEvent(host="cpu-node", up=False, reason="connection lost", time=FROZEN + 5)])
    ctx.down_since = lambda host: FROZEN + 5  # type: ignore[method-assign]
    app: App[None] = App()
    async with app.run_test(size=(160, 45)) as pilot:
        app.push_screen(JobScreen("JOB_ID=7", context=ctx))
        await pilot.pause()
        line = app.screen.query_one("#job-down")
        assert line.display and str(line.render()).startswith("cpu-node DOWN since ")
        assert app.screen.has_class("-down")
