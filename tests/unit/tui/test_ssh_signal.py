"""Signals to another host's processes through the user's own ssh: the host name never reaches ssh
unchecked, the remote check-and-kill runs in dash and bash, refuses a pid that changed, exited or is
someone else's, and every ssh failure reads as one line. Last, the real thing: a real sshd on loopback."""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.app import App

from gpulens.core.config import DEFAULT_SIGNAL_SSH, parse_config
from gpulens.core.errors import ConfigError, ConfigProblem
from gpulens.core.events import SampleEvent
from gpulens.core.model import JobInfo
from gpulens.sources import ssh_signal as _ssh_signal
from gpulens.sources.local import Recorder
from gpulens.sources.replay import ReplaySource
from gpulens.sources.signals import start_time
from gpulens.sources.ssh_signal import (
    GUARDS,
    NoSsh,
    NoSshKind,
    look_over_ssh,
    no_ssh,
    send_over_ssh,
    ssh_argv,
)
from gpulens.tui.screens.process import ConfirmSignal, ProcessScreen
from tests.fakes.tui_fakes import FakeContext, StaticSource, demo_app, sync
from tests.unit.store.test_store import T0, sample

HOSTILE = ("-oProxyCommand=touch /tmp/pwned", "node01;id", "node 01", "", "user@node01", "$(id)",
           "node01\n", "nöde", "-", ".hidden", "a" * 300, "node01:22")


def fake_ssh(tmp_path: Path, shell: str = "/bin/sh", body: str = "") -> list[str]:
    """An ``ssh`` test double: skips options up to ``--``, logs the host, runs the command in ``shell``
    here, as sshd hands a command to the login shell (``$SHELL -c``)."""
    script = tmp_path / "fake-ssh"
    script.write_text("#!/bin/sh\n"
                      'while [ "$1" != "--" ]; do shift; done; shift\n'
                      f'echo "$1" >> "{tmp_path}/hosts"; shift\n'
                      f"{body}\n"
                      f'exec {shell} -c "$*"\n')
    script.chmod(0o700)
    return [str(script), "-T", "-o", "BatchMode=yes"]


def job_of(proc: subprocess.Popen[bytes], start: float | None = None) -> JobInfo:
    started = start if start is not None else start_time(proc.pid)
    assert started is not None
    return JobInfo(pid=proc.pid, tree_id="t", cmdline="sleep", user="me", start_time=started)


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    time.sleep(0.05)
    yield child
    child.kill()
    child.wait()


@pytest.mark.parametrize("host", HOSTILE)
def test_a_host_name_that_could_be_an_option_or_a_shell_word_never_reaches_ssh(
        tmp_path: Path, host: str, sleeper: subprocess.Popen[bytes]) -> None:
    ssh = fake_ssh(tmp_path)
    assert no_ssh(host, ssh) == NoSsh(NoSshKind.BAD_HOST, host)
    with pytest.raises(ValueError):
        ssh_argv(ssh, host, job_of(sleeper), "SIGTERM")
    assert send_over_ssh(ssh, host, job_of(sleeper), "SIGTERM") == f"not sent: {NoSsh(NoSshKind.BAD_HOST, host)}"
    assert not (tmp_path / "hosts").exists() and sleeper.poll() is None


def test_the_command_is_ssh_options_then_the_guards_then_the_host_then_one_quoted_word() -> None:
    job = JobInfo(pid=4711, tree_id="t", cmdline="x", user="me", start_time=1_700_000_123.9)
    argv = ssh_argv(DEFAULT_SIGNAL_SSH, "node01.cluster", job, "SIGTERM")
    n = len(DEFAULT_SIGNAL_SSH) + len(GUARDS)
    assert argv[:n] == [*DEFAULT_SIGNAL_SSH, *GUARDS]  # the user's options first: ssh keeps the first value
    assert argv[n:n + 2] == ["--", "node01.cluster"] and len(argv) == n + 3
    assert argv[-1].startswith("sh -c '") and argv[-1].endswith("' gpulens-signal 4711 1700000123 TERM send")
    assert ssh_argv(["/usr/bin/ssh"], "h", job, "SIGINT", "look")[1:1 + len(GUARDS)] == list(GUARDS)
    assert ssh_argv(["my-ssh-wrapper", "-x"], "h", job, "SIGINT")[:3] == ["my-ssh-wrapper", "-x", "--"]
    assert not any(c in _ssh_signal.SCRIPT for c in "!'\\\n")  # what csh or fish would read differently


@pytest.mark.skipif(shutil.which("ssh") is None, reason="no ssh client on this machine")
def test_the_real_ssh_client_reads_the_host_as_the_destination() -> None:
    job = JobInfo(pid=1, tree_id="t", cmdline="x", user="me", start_time=0.0)
    argv = ssh_argv(DEFAULT_SIGNAL_SSH, "node01.cluster", job, "SIGTERM")
    cut = argv.index("--")
    # -G: print the configuration ssh would use for this command line, and connect nowhere.
    done = subprocess.run([*argv[:cut], "-G", *argv[cut:]], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    config = done.stdout.splitlines()
    for line in ("hostname node01.cluster", "batchmode yes", "stricthostkeychecking true", "forwardagent no",
                 "clearallforwardings yes", "permitlocalcommand no", "controlmaster false"):
        assert line in config, line


@pytest.mark.parametrize("shell", [s for s in ("dash", "bash") if shutil.which(s)])
def test_the_remote_check_sends_only_to_the_same_live_process(
        tmp_path: Path, shell: str, sleeper: subprocess.Popen[bytes]) -> None:
    ssh = fake_ssh(tmp_path, shutil.which(shell) or shell)
    seen = look_over_ssh(ssh, "node01", job_of(sleeper))
    assert seen.ok and seen.text == f"{sys.executable} -c import time; time.sleep(60)"  # as that host reads it
    assert sleeper.poll() is None
    changed = job_of(sleeper, (start_time(sleeper.pid) or 0.0) - 3600)
    assert send_over_ssh(ssh, "node01", changed, "SIGKILL") == (
        f"not sent: node01 pid {sleeper.pid} is now another process (its start time changed)")
    assert sleeper.poll() is None
    assert send_over_ssh(ssh, "node01", job_of(sleeper), "SIGTERM") == f"SIGTERM sent to node01 pid {sleeper.pid}"
    assert sleeper.wait(5) == -15
    assert send_over_ssh(ssh, "node01", job_of(sleeper, 0.0), "SIGTERM") == (
        f"not sent: node01 pid {sleeper.pid} has exited")
    assert not look_over_ssh(ssh, "node01", job_of(sleeper, 0.0)).ok
    assert (tmp_path / "hosts").read_text().split() == ["node01"] * 5


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root and setpriv to start a process as another user (CI runs as root)")
def test_the_remote_check_refuses_another_users_process(tmp_path: Path) -> None:
    other = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                              sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.2)
        said = send_over_ssh(fake_ssh(tmp_path), "node01", job_of(other), "SIGKILL")
        assert said == (f"not sent: node01 pid {other.pid} belongs to uid 65534, not to you (uid 0 on node01): "
                        "gpulens signals only your own")
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_ssh_failures_read_as_one_line(tmp_path: Path, sleeper: subprocess.Popen[bytes],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    job = job_of(sleeper)
    refused = fake_ssh(tmp_path, body="echo 'alice@node01: Permission denied (publickey).' >&2; exit 255")
    assert send_over_ssh(refused, "node01", job, "SIGTERM") == (
        "not sent: ssh node01: alice@node01: Permission denied (publickey).")
    # An exit status the check uses, without the line it prints (a login script, a ForceCommand): ssh's failure.
    for code in (3, 4, 5):
        odd = fake_ssh(tmp_path, body=f"echo 'welcome to node01'; exit {code}")
        assert send_over_ssh(odd, "node01", job, "SIGTERM") == f"not sent: ssh node01: exit status {code}"
    assert send_over_ssh(["/nonexistent/ssh"], "node01", job, "SIGTERM") == (
        "not sent: '/nonexistent/ssh' not found (config: signal_ssh)")
    assert send_over_ssh([], "node01", job, "SIGTERM") == (  # pinned on purpose: the one ssh refusal in words
        "not sent: signals to other hosts are off (config: signal_ssh = [])")
    monkeypatch.setattr(_ssh_signal, "TIMEOUT_S", 0.5)
    helper = tmp_path / "helper.pid"
    hung = fake_ssh(tmp_path, body=f"sleep 300 & echo $! > {helper}; wait")  # ssh with a ProxyCommand child
    started = time.monotonic()
    assert send_over_ssh(hung, "node01", job, "SIGTERM") == (
        "not sent: no answer from node01 in 0.5 s (it may have been sent)")
    assert time.monotonic() - started < 20
    assert sleeper.poll() is None
    left = int(helper.read_text())
    for _ in range(50):  # the whole session is killed, the helper too
        if not Path(f"/proc/{left}").exists() or "Z" in Path(f"/proc/{left}/stat").read_text().split()[2]:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"ssh's child {left} outlived the timeout")


def test_the_config_key_takes_a_command_or_nothing() -> None:
    assert parse_config({"signal_ssh": ["ssh", "-i", "~/.ssh/cluster"]}, "c.toml").signal_ssh == (
        "ssh", "-i", "~/.ssh/cluster")
    assert parse_config({"signal_ssh": []}, "c.toml").signal_ssh == ()
    for bad, problem in (("ssh", ConfigProblem.WRONG_TYPE), (["-oProxyCommand=x"], ConfigProblem.BAD_FORMAT),
                         ([""], ConfigProblem.OUT_OF_RANGE), (["ssh", 3], ConfigProblem.WRONG_TYPE),
                         (["ssh\0"], ConfigProblem.OUT_OF_RANGE)):
        with pytest.raises(ConfigError) as err:
            parse_config({"signal_ssh": bad}, "c.toml")
        assert (err.value.where, err.value.key, err.value.got, err.value.problem) == ("c.toml", "signal_ssh", bad, problem)


# --- a real sshd on loopback ------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[list[str]]:
    """A real sshd on 127.0.0.1 that lets this user in with a key made here; the ssh command for it."""
    daemon = shutil.which("sshd") or ("/usr/sbin/sshd" if Path("/usr/sbin/sshd").exists() else None)
    if daemon is None or shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        pytest.skip("needs openssh-server and openssh-client (.ci/run installs them on Debian)")
    if os.geteuid() != 0:
        pytest.skip("sshd needs root to switch to the logged-in user (CI runs as root)")
    d = tmp_path / "sshd"
    d.mkdir(mode=0o700)
    for name in ("host", "client"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)], check=True, timeout=30)
    (d / "authorized").write_text((d / "client.pub").read_text())
    port = _free_port()
    (d / "config").write_text(
        f"ListenAddress 127.0.0.1:{port}\nHostKey {d / 'host'}\nAuthorizedKeysFile {d / 'authorized'}\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
        "PermitRootLogin prohibit-password\nPidFile none\n")
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation directory
    server = subprocess.Popen([daemon, "-D", "-e", "-f", str(d / "config")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if server.poll() is not None:  # this machine's sshd cannot run (no privsep user, ...)
                    pytest.skip(f"sshd exited at start: {server.stderr.read().decode()[-300:] if server.stderr else ''}")
                if time.monotonic() > deadline:
                    pytest.fail("sshd runs but does not accept connections within 10 s")
                time.sleep(0.1)
        yield ["ssh", "-T", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "-o", "StrictHostKeyChecking=no",
               "-o", f"UserKnownHostsFile={d / 'known_hosts'}", "-o", "IdentitiesOnly=yes",
               "-i", str(d / "client"), "-p", str(port)]
    finally:
        server.terminate()
        server.wait(10)


def test_a_real_sshd_carries_the_signal_and_a_wrong_key_is_refused(
        sshd: list[str], sleeper: subprocess.Popen[bytes], tmp_path: Path) -> None:
    job = job_of(sleeper)
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True, timeout=30)
    wrong = [*sshd[:-3], str(stranger), *sshd[-2:]]
    said = send_over_ssh(wrong, "127.0.0.1", job, "SIGTERM")
    assert said.startswith("not sent: ssh 127.0.0.1: ") and "Permission denied" in said
    assert sleeper.poll() is None
    # gpulens' guards: without the test's own StrictHostKeyChecking=no, an unknown host key is refused.
    at = sshd.index("StrictHostKeyChecking=no")
    strict = [f"UserKnownHostsFile={tmp_path / 'none'}" if a.startswith("UserKnownHostsFile=") else a
              for a in sshd[: at - 1] + sshd[at + 1:]]  # without that "-o" and its value; no key known yet
    said = send_over_ssh(strict, "127.0.0.1", job, "SIGTERM")
    assert said.startswith("not sent: ssh 127.0.0.1: ") and "Host key verification failed" in said, said
    assert sleeper.poll() is None
    seen = look_over_ssh(sshd, "127.0.0.1", job)
    assert seen.ok and "time.sleep(60)" in seen.text
    stale = job_of(sleeper, job.start_time - 3600)
    assert "is now another process" in send_over_ssh(sshd, "127.0.0.1", stale, "SIGTERM")
    assert sleeper.poll() is None
    assert send_over_ssh(sshd, "127.0.0.1", job, "SIGTERM") == f"SIGTERM sent to 127.0.0.1 pid {sleeper.pid}"
    assert sleeper.wait(5) == -15


# --- the process screen -----------------------------------------------------------------------


async def open_remote(pilot: Any, tmp_path: Path, job: JobInfo) -> None:
    """The process screen of ``job`` on node07 (another host), its signals through :func:`fake_ssh`."""
    there = dataclasses.replace(sample(T0, host="node07"), jobs=(job,))
    ctx = FakeContext(StaticSource([SampleEvent(there)]), [SampleEvent(there)])
    ctx.cfg = dataclasses.replace(ctx.cfg, signal_ssh=tuple(fake_ssh(tmp_path)))
    pilot.app.push_screen(ProcessScreen("node07", job.pid, context=ctx))
    await pilot.pause()


async def until(pilot: Any, cond: Callable[[], bool]) -> None:
    """Let the app run until ``cond`` holds, 5 s at most (the caller asserts what it waited for)."""
    for _ in range(100):
        if cond():
            return
        await pilot.pause(0.05)


@sync
async def test_t_then_y_on_another_hosts_process_signals_it_through_ssh(
        tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    app: App[None] = App()
    async with app.run_test(size=(120, 35)) as pilot:
        await open_remote(pilot, tmp_path, job_of(sleeper))
        screen = app.screen
        assert isinstance(screen, ProcessScreen)
        assert screen.check_action("signal", ("SIGTERM",)) is True
        assert "I: SIGINT" in str(screen.query_one("#proc-actions").render())
        await pilot.press("T")  # first a look over ssh, then the question with what node07 itself reports
        await until(pilot, lambda: isinstance(app.screen, ConfirmSignal))
        assert isinstance(app.screen, ConfirmSignal) and "on node07" in app.screen.question
        assert f"node07 says it runs: {sys.executable} -c import time; time.sleep(60)" in app.screen.question
        assert "(the stream said: sleep)" in app.screen.question and "-- node07`" in app.screen.question
        assert sleeper.poll() is None
        await pilot.press("y")
        await until(pilot, lambda: any("sent to" in str(n.message) for n in app._notifications))
        messages = [str(n.message) for n in app._notifications]
        assert f"SIGTERM sent to node07 pid {sleeper.pid}" in messages
        assert sleeper.wait(5) == -15
        assert (tmp_path / "hosts").read_text().split() == ["node07", "node07"]  # look, then send


@sync
async def test_the_demo_and_a_recording_offer_no_remote_signals(tmp_path: Path) -> None:
    there = sample(T0, host="node07", jobs=(JobInfo(pid=4242, tree_id="t", cmdline="x", user="me",
                                                    start_time=T0 - 60),))
    rec = Recorder(str(tmp_path / "r.gpulens"), "test")
    rec.write(SampleEvent(there))
    rec.close()
    for source, why in ((demo_app().source, "SIMULATED"), (ReplaySource(str(tmp_path / "r.gpulens")), "a recording")):
        ctx = FakeContext(source, [SampleEvent(there)])
        ctx.cfg = dataclasses.replace(ctx.cfg, signal_ssh=tuple(fake_ssh(tmp_path)))
        app: App[None] = App()
        async with app.run_test(size=(120, 35)) as pilot:
            app.push_screen(ProcessScreen("node07", 4242, context=ctx))
            await pilot.pause()
            assert why in str(app.screen.query_one("#proc-actions").render())
            await pilot.press("T")
            await pilot.pause()
            assert not isinstance(app.screen, ConfirmSignal)
    assert not (tmp_path / "hosts").exists()


@sync
async def test_a_look_that_fails_asks_nothing_and_says_why(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    stale = job_of(sleeper, (start_time(sleeper.pid) or 0.0) - 3600)  # the stream's pid is now another process
    app: App[None] = App()
    async with app.run_test(size=(120, 35)) as pilot:
        await open_remote(pilot, tmp_path, stale)
        await pilot.press("K")
        want = f"SIGKILL not sent: node07 pid {sleeper.pid} is now another process (its start time changed)"
        await until(pilot, lambda: any(str(n.message) == want for n in app._notifications))
        assert want in [str(n.message) for n in app._notifications]
        assert not isinstance(app.screen, ConfirmSignal) and sleeper.poll() is None
