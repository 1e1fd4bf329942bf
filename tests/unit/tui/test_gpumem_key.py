"""Issue 28 in the TUI: ``m`` opens the GPU-memory flame graph of a host's or job's processes through their agent."""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from gpulens.core.events import SampleEvent
from gpulens.core.model import (
    CpuSample,
    HostSample,
    JobInfo,
    MemorySample,
    NetworkSample,
    StorageSample,
)
from gpulens.ipc.request_schema import GpuMemAnswer
from gpulens.tui.app import GpulensApp
from tests.fakes.request_source import Answered, FakeAgent
from tests.fakes.tui_fakes import FROZEN, AgentSource, StaticSource, frozen_clock, settle, sync

FOLDED = ("<module> (serve.py:40);Runner > _allocate_kv_cache_tensors (runner.py:212);cudaMalloc;cuMemAlloc_v2 "
          "59055800320\n<module> (serve.py:40);Model > __init__ (model.py:88);cuMemAlloc_v2 1048576\n")


class GpuMemAgent(AgentSource):
    """A source whose agent answers ``gpumem`` as ``gpulens agent`` does: one folded bytes file."""

    def __init__(self, events: list[Any], folded: Path) -> None:
        super().__init__(events, FakeAgent({"gpumem": lambda host, params: self._gpumem()}), name="fake agent")
        self.folded = folded
        self.asked = self.agent.asked

    def _gpumem(self) -> Answered:
        name = "gpumem-far-host-1.bytes.folded"
        download = self.folded.with_name(f"download-{len(self.asked)}.bytes.folded")  # as a StreamSource saves it
        download.write_bytes(self.folded.read_bytes())
        return Answered(GpuMemAnswer(files=(name,), python={"777": None}, lost=0), {name: download})


async def _flame_opens(app: GpulensApp, pilot: Any) -> None:
    """Wait (up to 5 s) for the flame screen the key opens."""
    for _ in range(100):
        if type(app.screen).__name__ == "FlameScreen":
            return
        await pilot.pause(0.05)


def _sample(host: str) -> HostSample:
    job = JobInfo(pid=777, tree_id="systemd/containerd-shim-runc-v2/python3", cmdline="python serve.py", user="u",
                  start_time=FROZEN - 100, cpu_percent=99.0, job_key="pod=5e1f")
    return HostSample(host=host, time=FROZEN, cpu=CpuSample(total_percent=1.0),
                      memory=MemorySample(total_bytes=100, used_bytes=50),
                      network=NetworkSample(rx_bytes_per_s=1.0, tx_bytes_per_s=1.0),
                      storage=StorageSample(read_bytes_per_s=1.0, write_bytes_per_s=1.0), jobs=(job,))


@sync
async def test_m_on_a_job_opens_its_gpu_memory_flame_through_the_agent(tmp_path: Path) -> None:
    folded = tmp_path / "g.bytes.folded"
    folded.write_text(FOLDED)
    source = GpuMemAgent([SampleEvent(_sample("far-host"))], folded)
    app = GpulensApp(source=source, clock=frozen_clock)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        app.jump("job pod=5e1f")
        await settle(app, pilot)
        await pilot.press("m")
        await _flame_opens(app, pilot)
        assert type(app.screen).__name__ == "FlameScreen"
        profile = app.screen.profile  # type: ignore[attr-defined]
        assert profile.unit == "bytes" and profile.total == 59055800320 + 1048576
        asked = [a for a in source.asked if a[1] == "gpumem"]  # the job screen also asks trace_diagnose
        assert asked == [("far-host", "gpumem", {"pids": [777], "mode": "live", "duration_s": 5.0})]


@sync
async def test_the_open_gpu_memory_flame_is_refreshed_from_the_agent(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from gpulens.tui import gpumem_flame

    monkeypatch.setattr(gpumem_flame, "REFRESH_S", 0.2)
    folded = tmp_path / "g.bytes.folded"
    folded.write_text(FOLDED)
    source = GpuMemAgent([SampleEvent(_sample("far-host"))], folded)
    app = GpulensApp(source=source, clock=frozen_clock)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        app.jump("host far-host")
        await settle(app, pilot)
        await pilot.press("m")
        await _flame_opens(app, pilot)
        flame = app.screen
        assert flame.profile.total == 59055800320 + 1048576  # type: ignore[attr-defined]
        folded.write_text(FOLDED + "<module> (serve.py:40);Runner > grow (runner.py:300);cuMemCreate 2097152\n")
        for _ in range(100):
            if flame.profile.total == 59055800320 + 1048576 + 2097152:  # type: ignore[attr-defined]
                break
            await pilot.pause(0.05)
        assert flame.profile.total == 59055800320 + 1048576 + 2097152  # type: ignore[attr-defined]
        assert app.screen is flame  # refreshed in place, not a new screen

        asked = len([a for a in source.asked if a[1] == "gpumem"])
        await pilot.press("escape")
        await pilot.pause(0.8)
        assert len([a for a in source.asked if a[1] == "gpumem"]) <= asked + 1  # closed: no more asking
        assert not list(tmp_path.glob("download-*"))  # each refresh's download was read, then removed


@sync
async def test_m_on_this_machine_without_an_agent_says_how() -> None:
    app = GpulensApp(source=StaticSource([SampleEvent(_sample("this-host"))]), clock=frozen_clock,
                     hostname="this-host")
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        app.jump("host this-host")
        await settle(app, pilot)
        await pilot.press("m")
        await pilot.pause()
        said = [str(n.message) for n in app._notifications]
        assert any("gpulens agent --gpumem" in s and "sudo gpulens gpumem --pid 777" in s for s in said), said


class RootLocal(StaticSource):
    """A test double of this machine's collector in a TUI run as root: it reads GPU memory itself."""

    def __init__(self, events: list[Any], answers: tuple[str, ...] = (FOLDED,)) -> None:
        super().__init__(events, name="local")
        self.asked: list[list[int]] = []
        self.answers = answers

    def gpu_memory_stacks(self, pids: list[int]) -> Future[tuple[str, dict[str, Any]]]:
        self.asked.append(list(pids))
        fut: Future[tuple[str, dict[str, Any]]] = Future()
        text = self.answers[min(len(self.asked), len(self.answers)) - 1]
        fut.set_result((text, {"python": {"777": None}, "lost": 0}))
        return fut


@sync
async def test_m_on_this_machine_as_root_reads_it_here_without_an_agent() -> None:
    source = RootLocal([SampleEvent(_sample("this-host"))])
    app = GpulensApp(source=source, clock=frozen_clock, hostname="this-host")
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        app.jump("host this-host")
        await settle(app, pilot)
        await pilot.press("m")
        await _flame_opens(app, pilot)
        assert type(app.screen).__name__ == "FlameScreen"
        profile = app.screen.profile  # type: ignore[attr-defined]
        assert profile.unit == "bytes" and profile.total == 59055800320 + 1048576
        assert profile.title == "GPU memory live here: 777"
        assert source.asked[0] == [777]


@sync
async def test_a_refresh_here_updates_the_graph_and_its_title(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpulens.tui import gpumem_flame

    monkeypatch.setattr(gpumem_flame, "REFRESH_S", 0.2)
    grown = ("<module> (serve.py:40);allocate (serve.py:9);cuMemAlloc_v2 1048576\n",
             "<module> (serve.py:40);allocate (serve.py:9);cuMemAlloc_v2 3145728\n")
    source = RootLocal([SampleEvent(_sample("this-host"))], grown)
    app = GpulensApp(source=source, clock=frozen_clock, hostname="this-host")
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        app.jump("host this-host")
        await settle(app, pilot)
        await pilot.press("m")
        await _flame_opens(app, pilot)
        flame = app.screen
        for _ in range(100):
            if flame.profile.total == 3145728:  # type: ignore[attr-defined]
                break
            await pilot.pause(0.05)
        await pilot.pause()
        title = str(flame.query_one("#flame-title").render())
        assert title.startswith("3.0 MiB"), title  # the title's total follows the refresh, not the first answer

