"""Issue 31 item 7: every process of a host is reachable, not only the jobs' (``:ps``, ``P``, ``:proc PID``).

Driven through the real app on the demo fleet (whose hosts list their job
processes and a few system ones: ``sources.demo``), and on this machine's
own collector with its real /proc (``LocalSource`` with ``ProcessLister``).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from typing import Any, cast

from gpulens.collectors.processes import ProcessLister
from gpulens.core.config import Config
from gpulens.core.events import HostSampler
from gpulens.core.model import CpuSample, HostSample, MemorySample, NetworkSample, StorageSample
from gpulens.sources.local import LocalSource
from gpulens.sources.processes import decode_rows
from gpulens.tui.app import GpulensApp
from gpulens.tui.screens.host import HostScreen
from gpulens.tui.screens.jump import parse_jump
from gpulens.tui.screens.process import ProcessScreen
from gpulens.tui.screens.processes import HostProcessTable, ProcessesView, ProcView
from tests.fakes.tui_fakes import demo_app, settle, sync

SIZE = (160, 45)


async def until(pilot: Any, done: Any, what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await pilot.pause(0.05)


def test_the_commands_parse() -> None:
    assert parse_jump(":ps") == ("ps", "")
    assert parse_jump("ps gpu-node01") == ("ps", "gpu-node01")
    assert parse_jump("proc 4711") == ("proc", "4711")
    assert parse_jump("proc gpu-node01:4711") == ("proc", "gpu-node01:4711")
    assert isinstance(parse_jump("proc"), str)
    assert "expected a pid" in str(parse_jump("proc x4"))
    assert "expected a pid" in str(parse_jump("proc 0"))


@sync
async def test_ps_lists_every_process_gpu_ones_first_and_sorts_and_opens_one() -> None:
    app = demo_app(backfill_s=30)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        app.jump("ps gpu-node01")
        await settle(app, pilot)
        view = app.screen
        assert isinstance(view, ProcessesView) and view.host == "gpu-node01"
        table = view.query_one(HostProcessTable)
        await until(pilot, lambda: table.order, "the process rows")
        pids = [int(k.rsplit(":", 1)[1]) for k in table.order]
        latest = app.store.latest("gpu-node01")
        assert latest is not None
        jobs = {j.pid for j in latest.jobs}
        assert 1 in pids and 812 in pids  # systemd and sshd: no job pattern matches them
        assert set(pids[: len(jobs)]) == jobs  # the GPU processes (the job's ranks) first
        await pilot.press("C")  # sort by CPU, busiest first
        await settle(app, pilot)
        cpu = [view.rows[[r.pid for r in view.rows].index(p)].cpu_percent or 0.0
               for p in (int(k.rsplit(":", 1)[1]) for k in table.order)]
        assert cpu == sorted(cpu, reverse=True)
        await pilot.press("slash", *"sshd", "enter")
        await settle(app, pilot)
        assert [k for k in table.order] == ["gpu-node01:812"]
        table.focus()
        await pilot.press("enter")
        await settle(app, pilot)
        screen = app.screen
        assert isinstance(screen, ProcessScreen) and screen.pid == 812
        info = str(screen.query_one("#proc-info").render())
        assert "root" in info and "process table" in info  # its figures, though no job has it
        assert "job -" in info  # and no job named after it
        assert "not in the host's newest sample" not in info


@sync
async def test_p_on_a_host_screen_and_proc_pid_reach_a_process_outside_every_job() -> None:
    app = demo_app(backfill_s=30)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        app.push_screen(HostScreen("gpu-node02", context=app))
        await settle(app, pilot)
        await pilot.press("P")
        await settle(app, pilot)
        assert isinstance(app.screen, ProcessesView) and app.screen.host == "gpu-node02"
        app.jump("proc 1204")  # the shown screen's host
        await settle(app, pilot)
        screen = app.screen
        assert isinstance(screen, ProcView) and (screen.host, screen.pid) == ("gpu-node02", 1204)
        await until(pilot, lambda: screen.listed.row is not None, "the process's row")
        await settle(app, pilot)
        assert "nvidia-persistenced" in str(screen.query_one("#proc-who").render())
        app.jump("proc gpu-node03:424242")  # no such process
        await settle(app, pilot)
        gone = app.screen
        assert isinstance(gone, ProcView)
        await until(pilot, lambda: gone.listed.why is not None, "the answer")
        await settle(app, pilot)
        assert "is not running" in str(gone.query_one("#proc-info").render())


@sync
async def test_proc_without_a_host_on_a_fleet_asks_which_host() -> None:
    app = demo_app(backfill_s=30)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        app.jump("proc 812")  # the overview shows 16 hosts, none of them this machine
        await settle(app, pilot)
        assert isinstance(app.screen, ProcView) and app.screen.host == ""
        assert "which host" in str(app.screen.query_one("#proc-info").render())


class OneSample:
    """A test double of the sampler: one bare sample of this machine, named as the app names it."""

    def __init__(self, host: str) -> None:
        self.host = host

    def sample(self) -> HostSample:
        return HostSample(host=self.host, time=time.time(), cpu=CpuSample(total_percent=1.0),
                          memory=MemorySample(total_bytes=1, used_bytes=1), network=NetworkSample(None, None),
                          storage=StorageSample(None, None), unavailable={"gpus": "no NVML here (test double)"})


@sync
async def test_this_machines_real_processes_are_listed_and_a_stray_one_can_be_opened() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "gpulens-stray"])
    try:
        # cast: OneSample has no close(), which LocalSource calls only where a sampler has one
        probe = GpulensApp(source=LocalSource(Config(), lambda: cast(HostSampler, OneSample("x"))), cfg=Config())
        host = probe.hostname
        app = GpulensApp(source=LocalSource(Config(interval_s=0.2), lambda: cast(HostSampler, OneSample(host)),
                                             ProcessLister().listing),
                         cfg=Config(interval_s=0.2))
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.store.latest(host) is not None, "the first sample")
            await settle(app, pilot)
            app.jump("ps")  # one host: it
            await settle(app, pilot)
            view = app.screen
            assert isinstance(view, ProcessesView) and view.host == host
            await until(pilot, lambda: any(r.pid == child.pid for r in view.rows), "the stray child")
            row = next(r for r in view.rows if r.pid == child.pid)
            assert row.cmdline.endswith("gpulens-stray") and row.ancestors[-1] == os.getpid()
            await settle(app, pilot)
            cells = view.query_one(HostProcessTable)._cells[f"{host}:{child.pid}"]
            assert "n/a" in cells  # no NVML on this host: GPU memory n/a, not 0 B
            app.jump(f"proc {child.pid}")
            await settle(app, pilot)
            screen = app.screen
            assert isinstance(screen, ProcView)
            await until(pilot, lambda: screen.listed.row is not None, "the polled row")
            await settle(app, pilot)
            assert "I: SIGINT" in str(screen.query_one("#proc-actions").render())  # our own: signals offered
            await asyncio.sleep(0)
    finally:
        child.kill()
        child.wait()


def test_a_malformed_answer_is_one_line_not_a_crash() -> None:
    bad: object
    for bad in (None, {}, {"processes": "x"}, {"processes": [{"pid": "one"}]}, {"processes": [{}]}):
        try:
            decode_rows(bad)
        except ValueError as err:
            assert "\n" not in str(err)
        else:
            raise AssertionError(f"accepted {bad!r}")


def test_a_peers_words_reach_the_table_cleaned() -> None:
    row = {"pid": 7, "tree_id": "init/x\x1b]52;c;aGk=\x07", "cmdline": "evil\nline\x1b[2J", "user": "u\x1b[31m",
           "start_time": 0.0}
    (got,), total, hidden = decode_rows({"processes": [row], "total": 1, "hidden": 0})
    for text in (got.tree_id, got.cmdline, got.user):
        assert "\x1b" not in text and "\x07" not in text and "\n" not in text
    assert (total, hidden) == (1, 0)
