"""Issue 27 item 6 as an attack by a real second uid: an impostor agent that names itself like this host.

mallory (a throwaway uid) serves a fake agent on loopback that declares this
machine's host name and lists the victim's real process under a forged
command line. The victim's TUI is connected to it. Before the fix the signal
was local (``host == hostname``) and the confirmation showed the forged
text; now a host the stream reports is never signalled from here: it takes
the ssh way (here off: ``signal_ssh = []``), and the victim's process lives.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from dataclasses import replace

import pytest

from gpulens.core.config import Config
from gpulens.core.model import (
    CpuSample,
    HostSample,
    JobInfo,
    MemorySample,
    NetworkSample,
    StorageSample,
)
from gpulens.ipc import stream
from gpulens.ipc.serialize import sample_to_dict
from gpulens.ipc.stream_frames import pack_sample, sample_frame
from gpulens.sources.signals import start_time
from gpulens.sources.ssh_signal import NoSsh, NoSshKind
from gpulens.sources.stream.link import LinkOptions
from gpulens.sources.stream.source import StreamSource, tcp_target
from gpulens.tui.app import GpulensApp
from gpulens.tui.screens.process import ConfirmSignal, ProcessScreen
from tests.fakes import security_helpers
from tests.fakes.security_helpers import User, demote
from tests.fakes.tui_fakes import settle, sync

two_users = security_helpers.two_users  # the fixture, visible to pytest in this module

pytestmark = pytest.mark.timeout(120)

FORGED = "python stale_zombie.py --leaked-gpu-mem"


def _impostor(user: User, host: str, victim: JobInfo) -> tuple[int, int]:
    """Fork mallory's fake agent; (its pid, its port)."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # mallory: never returns into pytest
        try:
            os.close(rfd)
            demote(user)
            listener = socket.create_server(("127.0.0.1", 0))
            os.write(wfd, str(listener.getsockname()[1]).encode())
            os.close(wfd)
            conn, _ = listener.accept()
            conn.sendall(stream.encode(stream.Hello(proto=1, role="agent", host=host, interval_s=0.5)))
            conn.recv(65536)
            for _ in range(120):
                s = HostSample(host=host, time=time.time(), cpu=CpuSample(total_percent=5.0),
                               memory=MemorySample(total_bytes=100, used_bytes=50),
                               network=NetworkSample(rx_bytes_per_s=0.0, tx_bytes_per_s=0.0),
                               storage=StorageSample(read_bytes_per_s=0.0, write_bytes_per_s=0.0),
                               jobs=(victim,))
                conn.sendall(sample_frame(pack_sample(sample_to_dict(s))))
                time.sleep(0.5)
        finally:
            os._exit(0)
    os.close(wfd)
    port = int(os.read(rfd, 16).decode())
    os.close(rfd)
    return pid, port


@sync
async def test_an_impostor_agent_of_another_uid_cannot_make_a_signal_local(two_users: tuple[User, User]) -> None:
    _alice, mallory = two_users
    victim = subprocess.Popen(["sleep", "120"])  # the TUI user's own process
    time.sleep(0.05)
    started = start_time(victim.pid)
    assert started is not None
    host = socket.gethostname()
    job = JobInfo(pid=victim.pid, tree_id="systemd/python", cmdline=FORGED, user="mallory-says", start_time=started,
                  gpu_mem_bytes={"0": 65 << 30})
    fake_pid, port = _impostor(mallory, host, job)
    source = StreamSource([tcp_target(f"127.0.0.1:{port}")], LinkOptions(backoff_min_s=30))
    app = GpulensApp(source=source, cfg=replace(Config(), signal_ssh=()), hostname=host)
    try:
        async with app.run_test(size=(160, 45)) as pilot:
            for _ in range(100):
                await settle(app, pilot)
                if app.store.latest(host) is not None:
                    break
            assert app.store.latest(host) is not None, "the impostor's sample never arrived"
            assert not app.collects_here
            app.push_screen(ProcessScreen(host, victim.pid, context=app))
            await settle(app, pilot)
            screen = app.screen
            assert isinstance(screen, ProcessScreen) and not screen.signals_here()
            said: list[str] = []
            screen.notify = lambda message, **kw: said.append(str(message))  # type: ignore[method-assign]
            await pilot.press("K")
            await pilot.pause()
            assert not isinstance(app.screen, ConfirmSignal)
            assert said and said[0].startswith(f"SIGKILL not sent: {NoSsh(NoSshKind.OFF)}"), said
    finally:
        source.stop()
        os.kill(fake_pid, 9)
        os.waitpid(fake_pid, 0)
        alive = victim.poll() is None
        victim.kill()
        victim.wait()
    assert alive  # the victim's process was never signalled
