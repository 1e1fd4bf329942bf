"""Issue 27 item 6: an agent that names itself like this machine cannot turn a remote signal into a local one.

mallory's fake agent listed alice's real process under a forged command line;
``host == hostname`` made the signal local and alice killed her own job. A
signal is local only for this machine's own collector, and the confirmation
shows the command line read from /proc when asked, not the sample's text.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import replace

from textual.app import App

from gpulens.core.events import SampleEvent
from gpulens.core.model import JobInfo
from gpulens.sources.signals import proc_cmdline, start_time
from gpulens.sources.ssh_signal import NoSsh, NoSshKind
from gpulens.tui.screens.process import ConfirmSignal, ProcessScreen
from tests.fakes.tui_fakes import FakeContext, StaticSource, sync
from tests.unit.store.test_store import T0, sample

FORGED = "python stale_zombie.py --leaked-gpu-mem"


def _victim() -> tuple[subprocess.Popen[bytes], JobInfo]:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "alice-training-job"])
    time.sleep(0.05)
    started = start_time(child.pid)
    assert started is not None
    return child, JobInfo(pid=child.pid, tree_id="x/python", cmdline=FORGED, user="alice", start_time=started)


def _context(job: JobInfo, *, collects_here: bool) -> FakeContext:
    s = sample(T0, host="this-host", jobs=(job,))
    ctx = FakeContext(StaticSource([SampleEvent(s)]), [SampleEvent(s)], hostname="this-host")
    ctx.collects_here = collects_here
    ctx.cfg = replace(ctx.cfg, signal_ssh=())
    return ctx


def test_proc_cmdline_reads_what_runs_now() -> None:
    child, _ = _victim()
    try:
        assert proc_cmdline(child.pid) == f"{sys.executable} -c import time; time.sleep(60) alice-training-job"
    finally:
        child.kill()
        child.wait()
    assert proc_cmdline(child.pid) is None


@sync
async def test_a_stream_host_named_like_this_machine_is_not_signalled_locally() -> None:
    child, job = _victim()
    try:
        app: App[None] = App()
        async with app.run_test(size=(120, 35)) as pilot:
            app.push_screen(ProcessScreen("this-host", job.pid, context=_context(job, collects_here=False)))
            await pilot.pause()
            screen = app.screen
            assert isinstance(screen, ProcessScreen)
            assert not screen.signals_here()
            # Remote rules apply: here signal_ssh is off, so nothing can be sent, and it says why.
            assert str(NoSsh(NoSshKind.OFF)) in (screen.why_not() or "")
            said: list[str] = []
            screen.notify = lambda message, **kw: said.append(str(message))  # type: ignore[method-assign]
            await pilot.press("K")
            await pilot.pause()
            assert said and said[0].startswith(f"SIGKILL not sent: {NoSsh(NoSshKind.OFF)}"), said
            assert not isinstance(app.screen, ConfirmSignal)
        assert child.poll() is None  # alice's process lives
    finally:
        child.kill()
        child.wait()


@sync
async def test_the_local_confirmation_shows_the_command_line_from_proc() -> None:
    child, job = _victim()
    try:
        app: App[None] = App()
        async with app.run_test(size=(160, 40)) as pilot:
            app.push_screen(ProcessScreen("this-host", job.pid, context=_context(job, collects_here=True)))
            await pilot.pause()
            await pilot.press("T")
            await pilot.pause()
            confirm = app.screen
            assert isinstance(confirm, ConfirmSignal)
            question = confirm.question
            assert "alice-training-job" in question  # the real program, from /proc
            assert f"the sample said: {FORGED}" in question  # and the forged text, named as such
            await pilot.press("n")
            await pilot.pause()
        assert child.poll() is None
    finally:
        child.kill()
        child.wait()
