"""End to end: the real ``gpulens`` (local source) in a real tmux, driven with send-keys."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = [pytest.mark.tmux, pytest.mark.slow]


def _tmux(sock: str, *args: str) -> str:
    out = subprocess.run(["tmux", "-L", sock, *args], capture_output=True, text=True, timeout=10)
    return out.stdout


def _wait_for(sock: str, pane: str, predicate: Callable[[str], object], timeout_s: float = 40.0) -> str:
    deadline = time.monotonic() + timeout_s
    screen = ""
    while time.monotonic() < deadline:
        screen = _tmux(sock, "capture-pane", "-p", "-t", pane)
        if predicate(screen):
            return screen
        time.sleep(0.3)
    raise AssertionError(f"timed out; the pane shows:\n{screen}")


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_gpulens_in_tmux(gpulens_exe: str, tmp_path: Path) -> None:
    sock = f"gpulens-test-{uuid.uuid4().hex[:8]}"
    status = tmp_path / "exit"
    host = socket.gethostname()
    cmd = f"{gpulens_exe} --interval 1; echo $? > {status}; sleep 30"
    _tmux(sock, "new-session", "-d", "-s", "t", "-x", "160", "-y", "45", cmd)
    pane = "t:0.0"
    try:
        screen = _wait_for(sock, pane, lambda s: host[:12] in s and "CPU" in s and "%" in s
                           and "Overview" in s)
        line = next(ln for ln in screen.splitlines() if host[:12] in ln and "%" in ln)
        assert any(tok.endswith("%") and tok[:-1].replace(".", "").isdigit() for tok in line.split())
        _tmux(sock, "send-keys", "-t", pane, "Enter")
        _wait_for(sock, pane, lambda s: "Utilization" in s and f"Overview › {host[:12]}" in s)
        _tmux(sock, "send-keys", "-t", pane, "Escape")
        _wait_for(sock, pane, lambda s: "Utilization" not in s and "Hosts" in s)
        _tmux(sock, "send-keys", "-t", pane, "q")
        deadline = time.monotonic() + 15
        while not status.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert status.read_text().strip() == "0"
    finally:
        _tmux(sock, "kill-server")


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_record_then_replay_and_ctrl_c(gpulens_exe: str, tmp_path: Path) -> None:
    sock = f"gpulens-test-{uuid.uuid4().hex[:8]}"
    rec = tmp_path / "demo.gpulens"
    status = tmp_path / "exit"
    cmd = f"{gpulens_exe} --demo --record {rec}; echo $? > {status}; sleep 30"
    _tmux(sock, "new-session", "-d", "-s", "t", "-x", "160", "-y", "45", cmd)
    try:
        _wait_for(sock, "t:0.0", lambda s: "SIMULATED" in s and "gpu-node01" in s)
        time.sleep(1.5)
        _tmux(sock, "send-keys", "-t", "t:0.0", "C-c")
        deadline = time.monotonic() + 15
        while not status.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert status.read_text().strip() == "130"  # as --help promises (issue 31 item 19); q gives 0
        assert rec.stat().st_size > 10_000
        status.unlink()
        cmd = f"{gpulens_exe} --replay {rec}; echo $? > {status}; sleep 30"
        _tmux(sock, "new-window", "-t", "t", cmd)
        screen = _wait_for(sock, "t:1.0", lambda s: "replay demo.gpulens" in s and "gpu-node01" in s)
        assert "SIMULATED" in screen  # a recording of the demo stays marked as simulated
        _tmux(sock, "send-keys", "-t", "t:1.0", "q")
        deadline = time.monotonic() + 15
        while not status.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert status.read_text().strip() == "0"
    finally:
        _tmux(sock, "kill-server")


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_fast_typing_and_resize_in_a_real_terminal(gpulens_exe: str, tmp_path: Path) -> None:
    """Keys sent in one burst (as a paste or a fast typist) all land; 80x24 cuts no column."""
    sock = f"gpulens-test-{uuid.uuid4().hex[:8]}"
    status = tmp_path / "exit"
    cmd = f"NO_COLOR=1 {gpulens_exe} --demo; echo $? > {status}; sleep 30"
    _tmux(sock, "new-session", "-d", "-s", "t", "-x", "80", "-y", "24", cmd)
    pane = "t:0.0"
    try:
        _wait_for(sock, pane, lambda s: "gpu-node01" in s and "4711" in s)
        # A Backspace in the burst edits where it was typed (Textual alone ran it after the 2: 'node1x').
        _tmux(sock, "send-keys", "-t", pane, "/node1x", "BSpace", "2")
        _wait_for(sock, pane, lambda s: "filter 'node12'" in s)  # no key went to the table
        _tmux(sock, "send-keys", "-t", pane, "Enter", "G")  # shift+g: the GPUs column
        screen = _wait_for(sock, pane, lambda s: "sort GPUs ↓ · filter 'node12'" in s)  # a figure: largest first
        assert "Runtime" in screen  # the jobs header fits at 80 columns
        _tmux(sock, "resize-window", "-t", "t", "-x", "160", "-y", "45")
        _wait_for(sock, pane, lambda s: "keys u a m w t" in s and "gpu-node12" in s)
        _tmux(sock, "send-keys", "-t", pane, "q")
        deadline = time.monotonic() + 15
        while not status.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert status.read_text().strip() == "0"
    finally:
        _tmux(sock, "kill-server")


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_replay_scrubs_on_its_own_clock_and_reaches_a_job(gpulens_exe: str, tmp_path: Path) -> None:
    """A recording replays from its start: space pauses, → seeks, ] speeds up, :job opens a job, q quits."""
    sock = f"gpulens-test-{uuid.uuid4().hex[:8]}"
    rec = tmp_path / "demo.gpulens"
    status = tmp_path / "exit"
    cmd = f"{gpulens_exe} --demo --record {rec}; echo $? > {status}; sleep 30"
    _tmux(sock, "new-session", "-d", "-s", "t", "-x", "160", "-y", "45", cmd)
    pane = "t:0.0"
    try:
        _wait_for(sock, pane, lambda s: "SIMULATED" in s and "gpu-node01" in s)
        time.sleep(1.5)
        _tmux(sock, "send-keys", "-t", pane, "q")
        deadline = time.monotonic() + 15
        while not status.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        status.unlink()
        bad = subprocess.run([gpulens_exe, "--replay", str(tmp_path)], capture_output=True, text=True, timeout=30)
        assert bad.returncode != 0 and "is a directory" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
        cmd = f"{gpulens_exe} --replay {rec}; echo $? > {status}; sleep 30"
        _tmux(sock, "new-window", "-t", "t", cmd)
        pane = "t:1.0"
        _wait_for(sock, pane, lambda s: "▶ 1x" in s and "gpu-node01" in s)
        _tmux(sock, "send-keys", "-t", pane, "Space")
        _wait_for(sock, pane, lambda s: "❚❚ 1x" in s)
        _tmux(sock, "send-keys", "-t", pane, "]", "]")
        _wait_for(sock, pane, lambda s: "❚❚ 4x" in s)
        _tmux(sock, "send-keys", "-t", pane, ":job 4711", "Enter")
        _wait_for(sock, pane, lambda s: "job 4711" in s.splitlines()[0] and "❚❚ 4x" in s)
        _tmux(sock, "send-keys", "-t", pane, "q")
        deadline = time.monotonic() + 15
        while not status.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert status.read_text().strip() == "0"
    finally:
        _tmux(sock, "kill-server")


@pytest.mark.parametrize(("sig", "code"), [("TERM", 143), ("HUP", 129), ("INT", 130)])
def test_a_signal_gives_the_terminal_back(gpulens_exe: str, tmp_path: Path, sig: str, code: int) -> None:
    """Issue 31 item 8: SIGTERM (Slurm, systemd, tmux kill-session) left tmux on the alternate screen,
    mouse tracking on and the cursor hidden. Now it ends the TUI as q does, with 128 + the signal."""
    sock = f"gpulens-test-{uuid.uuid4().hex[:8]}"
    status = tmp_path / "exit"
    pidfile = tmp_path / "pid"
    cmd = f"NO_COLOR=1 {gpulens_exe} --demo & echo $! > {pidfile}; wait $!; echo $? > {status}; sleep 30"
    _tmux(sock, "new-session", "-d", "-s", "t", "-x", "100", "-y", "30", cmd)
    pane = "t:0.0"
    try:
        _wait_for(sock, pane, lambda s: "gpu-node01" in s)
        assert _tmux(sock, "display-message", "-p", "-t", pane, "#{alternate_on}").strip() == "1"
        subprocess.run(["kill", f"-{sig}", pidfile.read_text().strip()], check=True)
        deadline = time.monotonic() + 15
        while not status.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert status.read_text().strip() == str(code)
        flags = _tmux(sock, "display-message", "-p", "-t", pane, "#{alternate_on} #{mouse_any_flag} #{cursor_flag}")
        assert flags.split() == ["0", "0", "1"], flags  # main screen, no mouse tracking, cursor shown
    finally:
        _tmux(sock, "kill-server")


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
@pytest.mark.parametrize(("keys", "code"), [("C-c", "130"), ("q", "0")])
def test_the_flame_tui_exits_as_help_promises(gpulens_exe: str, tmp_path: Path, keys: str, code: str) -> None:
    """Issue 31 item 19: Ctrl-C in ``gpulens flame`` gave 0; it gives 130, ``q`` gives 0."""
    folded = Path(__file__).resolve().parents[1] / "data/stacks/perf-rust-Yamakaky-dcpu.collapsed"
    sock = f"gpulens-test-{uuid.uuid4().hex[:8]}"
    status = tmp_path / "exit"
    cmd = f"NO_COLOR=1 {gpulens_exe} flame {folded}; echo $? > {status}; sleep 30"
    _tmux(sock, "new-session", "-d", "-s", "t", "-x", "120", "-y", "30", cmd)
    pane = "t:0.0"
    try:
        _wait_for(sock, pane, lambda s: "all" in s and "samples" in s)
        _tmux(sock, "send-keys", "-t", pane, keys)
        deadline = time.monotonic() + 15
        while not status.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert status.read_text().strip() == code
        flags = _tmux(sock, "display-message", "-p", "-t", pane, "#{alternate_on} #{mouse_any_flag} #{cursor_flag}")
        assert flags.split() == ["0", "0", "1"], flags
    finally:
        _tmux(sock, "kill-server")
