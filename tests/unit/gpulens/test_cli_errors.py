"""The command line as a demanding user meets it: every failure is ONE clear line.

Each test runs the real ``gpulens`` executable (next to ``sys.executable``)
and checks the exit code and stderr: bad flags, bad paths, ports in use,
closed or full stdout, SIGTERM, empty host lists, many ssh children.
Why a command's own flag checks refuse is asserted by the reason, in
process, in test_flag_reasons.py.
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpulens.cli import COMMANDS

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="signals, /dev/full and poll are Linux behaviour")


def run(exe: str, *args: str, timeout: float = 60, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout, check=False, **kw)


def one_line(stderr: str) -> str:
    """The single stderr line of a failure (no traceback, no second line)."""
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert "Traceback" not in stderr, stderr
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.fixture
def busy_port() -> Iterator[int]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    try:
        yield s.getsockname()[1]
    finally:
        s.close()


# --- help, version, parsing ----------------------------------------------------


def test_help_lists_every_command_and_version_works(gpulens_exe: str) -> None:
    out = run(gpulens_exe, "--help")
    assert out.returncode == 0
    for name in COMMANDS:
        assert any(line.strip().startswith(name + " ") for line in out.stdout.splitlines()), name
    version = run(sys.executable, "-m", "gpulens", "--version")
    assert version.returncode == 0 and version.stdout.startswith("gpulens ")


def test_unknown_flag_is_reported_with_the_commands_own_usage(gpulens_exe: str) -> None:
    out = run(gpulens_exe, "sample", "--bogus")
    assert out.returncode == 2
    # One line that says what is wrong and where to look (issue 31 item 17: 11 usage lines came first).
    assert out.stderr == "gpulens sample: error: unrecognized arguments: --bogus\nsee 'gpulens sample --help'\n"
    top = run(gpulens_exe, "--bogus")
    assert top.returncode == 2 and top.stderr.splitlines() == [
        "gpulens: error: unrecognized arguments: --bogus", "see 'gpulens --help'"]


def test_tui_flag_before_a_command_is_refused_not_ignored(gpulens_exe: str) -> None:
    out = run(gpulens_exe, "--interval", "0.2", "sample", "--count", "1")
    assert out.returncode == 2
    assert "--interval before 'sample' would be ignored" in out.stderr
    assert out.stdout == ""


def test_bad_pattern_names_the_flag_once(gpulens_exe: str) -> None:
    out = run(gpulens_exe, "jobs", "--pattern", "(")
    assert out.returncode == 2
    line = one_line(out.stderr)
    assert "--pattern '(': expected a regular expression" in line and "key 'pattern'" not in line


def test_config_bad_key_names_file_key_and_expectation(gpulens_exe: str, tmp_path: Path) -> None:
    cfg = tmp_path / "gpulens" / "config.toml"
    cfg.parent.mkdir()
    cfg.write_text("window = 5\n")
    out = run(gpulens_exe, "jobs", env={**os.environ, "XDG_CONFIG_HOME": str(tmp_path)})
    assert out.returncode == 2
    line = one_line(out.stderr)
    assert str(cfg) in line and "'window'" in line and "expected one of 1m, 5m, 15m, 1h" in line


def test_empty_config_path_is_an_error_not_the_default_file(gpulens_exe: str) -> None:
    out = run(gpulens_exe, "--config", "", "jobs")
    assert out.returncode == 2
    assert "--config: expected a file name" in one_line(out.stderr)


def test_endless_config_file_is_refused_not_read_into_memory(gpulens_exe: str) -> None:
    out = run(gpulens_exe, "--config", "/dev/zero", "jobs", timeout=30)
    assert out.returncode == 2
    assert "/dev/zero: larger than 1048576 bytes" in one_line(out.stderr)


# --- stdout: closed pipe, closed fd, full disk ----------------------------------


@pytest.mark.parametrize(
    "args",
    [("jobs", "--pattern", ".", "--json"), ("jobs", "--pattern", "."), ("snapshot", "--json", "--timeout", "5")],
    ids=["jobs-json", "jobs-table", "snapshot-json"],
)
def test_reader_that_closed_the_pipe_ends_the_command_quietly(gpulens_exe: str, args: tuple[str, ...]) -> None:
    r, w = os.pipe()
    os.close(r)  # like `| true`: the reader is gone before the first write
    try:
        out = subprocess.run([gpulens_exe, *args], stdout=w, stderr=subprocess.PIPE, text=True, timeout=60, check=False)
    finally:
        os.close(w)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""


def test_sample_piped_to_head_exits_zero_without_noise(gpulens_exe: str) -> None:
    cmd = f"set -o pipefail; {shlex.quote(gpulens_exe)} sample --json --count 5 --interval 0.1 | head -1"
    out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith('{"host"') and out.stdout.count("\n") == 1
    assert out.stderr == ""


def test_closed_stdout_fd_is_one_line(gpulens_exe: str) -> None:
    out = subprocess.run(
        [gpulens_exe, "jobs", "--json"],
        stdout=None,
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
        check=False,
        preexec_fn=lambda: os.close(1),
    )
    assert out.returncode == 1
    assert "standard output is closed" in one_line(out.stderr)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_full_disk_on_stdout_is_one_line(gpulens_exe: str) -> None:
    with open("/dev/full", "w") as full:
        out = subprocess.run([gpulens_exe, "jobs", "--json"], stdout=full, stderr=subprocess.PIPE, text=True,
                             timeout=60, check=False)
    assert out.returncode == 1
    assert "No space left on device" in one_line(out.stderr)


# --- signals ----------------------------------------------------------------------


def test_sigterm_unwinds_and_exits_143(gpulens_exe: str) -> None:
    proc = subprocess.Popen([gpulens_exe, "sample", "--json", "--count", "0", "--interval", "0.1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith('{"host"')  # running, past start-up
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, err
    assert "Traceback" not in err


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_sigterm_on_snapshot_stops_its_ssh_children(gpulens_exe: str, tmp_path: Path) -> None:
    """ssh children run in their own session: only gpulens' cleanup can end them."""
    stand_in = f"sh -c 'echo $$ > {tmp_path}/{{host}}.pid; exec sleep 60'"
    proc = subprocess.Popen([gpulens_exe, "snapshot", "--timeout", "60", "--ssh", "n[1-2]", "--ssh-command", stand_in],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pids: list[int] = []
    try:
        for _ in range(300):
            files = list(tmp_path.glob("*.pid"))
            if len(files) == 2 and all(f.read_text().strip() for f in files):
                pids = [int(f.read_text()) for f in files]
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.1)
        assert len(pids) == 2, "the stand-in ssh commands did not start"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 143, err
        for _ in range(50):
            if not any(_alive(p) for p in pids):
                break
            time.sleep(0.1)
        assert not any(_alive(p) for p in pids), "ssh children outlived gpulens"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


# --- agent --------------------------------------------------------------------------


def test_agent_port_in_use_is_one_line(gpulens_exe: str, busy_port: int) -> None:
    out = run(gpulens_exe, "agent", "--listen", str(busy_port), "--no-trace", "--quiet")
    assert out.returncode == 2
    line = one_line(out.stderr)
    assert f"--listen {busy_port}: cannot listen: Address already in use" in line


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--port-file", "/nonexistent-dir/port"), "--port-file /nonexistent-dir/port: cannot write"),
        (("--history-minutes", "-1"), "--history-minutes: expected minutes in (0, 1440]"),
        (("--metrics-port", "99999"), "--metrics-port: expected a port from 1 to 65535"),
        (("--tls-cert", "/", "--tls-key", "/"), "--tls-cert /: not a readable file"),
        (("--hostname", ""), "--hostname: expected a name"),
    ],
    ids=["port-file", "history", "metrics-port", "tls-dir", "empty-hostname"],
)
def test_agent_bad_flags_are_one_line(gpulens_exe: str, args: tuple[str, ...], expected: str) -> None:
    out = run(gpulens_exe, "agent", "--listen", "0", "--no-trace", "--quiet", *args, timeout=30)
    assert out.returncode == 2, out.stderr
    assert expected in one_line(out.stderr)


def test_agent_listen_host_alone_uses_the_viewers_default_port() -> None:
    from gpulens.commands.agent import parse_listen
    from gpulens.core.errors import ConfigError, ConfigProblem
    from gpulens.sources.stream.source import DEFAULT_PORT, tcp_target

    assert parse_listen("node1") == ("node1", DEFAULT_PORT) == (tcp_target("node1").host, tcp_target("node1").port)
    assert parse_listen("[::1]") == ("::1", DEFAULT_PORT)
    assert parse_listen("0") == ("127.0.0.1", 0)
    assert parse_listen("[::1]:0") == ("::1", 0)
    for bad, problem in (("", ConfigProblem.MISSING), ("a:b", ConfigProblem.BAD_FORMAT),
                         ("[::1]x", ConfigProblem.BAD_FORMAT), ("99999", ConfigProblem.OUT_OF_RANGE)):
        with pytest.raises(ConfigError) as info:
            parse_listen(bad)
        assert (info.value.where, info.value.problem) == ("--listen", problem)


def test_agent_token_file_readable_by_others_is_one_line(gpulens_exe: str, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("0123456789abcdef0123456789abcdef\n")
    token.chmod(0o644)
    out = run(gpulens_exe, "agent", "--listen", "0.0.0.0:0", "--no-trace", "--token-file", str(token), timeout=30)
    assert out.returncode == 2
    assert f"has mode 0644; it must be readable by its owner only: run 'chmod 600 {token}'" in one_line(out.stderr)


def test_agent_stdio_refuses_tcp_only_flags(gpulens_exe: str, tmp_path: Path) -> None:
    out = run(gpulens_exe, "agent", "--stdio", "--no-trace", "--port-file", str(tmp_path / "p"), stdin=subprocess.DEVNULL)
    assert out.returncode == 2
    assert "--port-file: only with --listen" in one_line(out.stderr)
    assert out.stdout == ""


# --- snapshot / viewer sources --------------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "expected"),
    [("--connect", "--connect: expected HOST:PORT"), ("--ssh", "--ssh: hostlist is empty")],
)
def test_empty_host_list_is_an_error_not_this_machine(gpulens_exe: str, flag: str, expected: str) -> None:
    out = run(gpulens_exe, "snapshot", "--json", "--timeout", "2", flag, "")
    assert out.returncode == 2
    assert out.stdout == ""
    assert expected in one_line(out.stderr)


def test_ssh_children_beyond_fd_1024_still_stream(gpulens_exe: str) -> None:
    """Hundreds of ssh children push pipe fds past select()'s 1024 limit."""
    fds = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        agent = f"{shlex.quote(gpulens_exe)} agent --stdio --no-trace --quiet --simulated-gpus 1 --hostname {{host}}"
        out = run(gpulens_exe, "snapshot", "--json", "--timeout", "30", "--ssh", "hi-fd",
                  "--ssh-command", f"sh -c {shlex.quote('exec ' + agent)}", pass_fds=fds)
    finally:
        for fd in fds:
            os.close(fd)
    assert "filedescriptor out of range" not in out.stdout + out.stderr
    assert out.returncode == 0, out.stdout + out.stderr
    assert '"host":"hi-fd","up":true' in out.stdout


# --- flame / profile ------------------------------------------------------------------


@pytest.fixture
def folded(tmp_path: Path) -> Path:
    path = tmp_path / "s.folded"
    path.write_text("main;work;hot 3\nmain;work 2\n")
    return path


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--export-folded", "/nonexistent-dir/x"), "--export-folded /nonexistent-dir/x: directory /nonexistent-dir does not exist"),
        (("--export-speedscope", "/"), "--export-speedscope /: is a directory"),
        (("--metric", "live", "--json"), "metric 'live' does not apply to folded stacks"),
    ],
    ids=["export-missing-dir", "export-dir", "metric-mismatch"],
)
def test_flame_bad_requests_are_one_line(gpulens_exe: str, folded: Path, args: tuple[str, ...], expected: str) -> None:
    out = run(gpulens_exe, "flame", str(folded), *args)
    assert out.returncode == 2
    assert expected in one_line(out.stderr)
    assert out.stdout == ""


def test_flame_refuses_devices_at_once(gpulens_exe: str) -> None:
    out = run(gpulens_exe, "flame", "/dev/zero", "--json", timeout=30)
    assert out.returncode == 2
    assert "/dev/zero: a device, not a profile file" in one_line(out.stderr)


def test_flame_refuses_an_endless_pipe() -> None:
    """A pipe could feed the reader forever: it is refused at once, saying what to do."""
    code = (
        "import gpulens.analysis.flame.importers as m\n"
        "try:\n    m.load_profile('/dev/stdin')\n"
        "except m.FlameFormatError as e:\n    print(e)\n"
    )
    out = subprocess.run(f"yes | {shlex.quote(sys.executable)} -c {shlex.quote(code)}", shell=True,
                         capture_output=True, text=True, timeout=20, check=False)
    assert "/dev/stdin: a pipe (FIFO), not a profile file" in out.stdout, (out.stdout, out.stderr)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("-o", "/nonexistent-dir/out.folded"), "-o/--output /nonexistent-dir/out.folded: directory /nonexistent-dir does not exist"),
        (("-o", "/"), "-o/--output /: is a directory"),
        (("--pid", "0", "-o", "x.folded"), "--pid: expected process ids from 1 to 4194303, got 0"),
    ],
    ids=["output-missing-dir", "output-dir", "pid"],
)
def test_profile_checks_arguments_before_sampling(
    gpulens_exe: str, tmp_path: Path, args: tuple[str, ...], expected: str
) -> None:
    out = run(gpulens_exe, "profile", "--pid", str(os.getpid()), "--duration", "1", *args, cwd=tmp_path)
    assert out.returncode == 2
    assert expected in one_line(out.stderr)
