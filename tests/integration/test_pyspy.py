"""Real py-spy sampling of a program whose hot function is known (run: collectors.pyspy, read: analysis.flame.pyspy,
both in one call: agent.pyspy)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpulens.agent.pyspy import dump, sample_pids
from gpulens.analysis.flame.importers import load_profile
from gpulens.analysis.flame.query import function_table
from gpulens.cli import main
from gpulens.collectors.pyspy import PERMISSION_FIX, classify_failure
from gpulens.core.pyspy import ProfilerError, ProfilerPermissionError

PROGRAM = """
import os
import time

def hot_function():
    total = 0
    for i in range(200_000):
        total += i * i
    return total

def cold_function():
    time.sleep(0)
    return sum(range(2_000))

class Driver:
    def loop(self):
        parent = os.getppid()
        while os.getppid() == parent:  # busy however slow the tests are: the fixture kills it (or its test is gone)
            hot_function()
            cold_function()

print("ready", flush=True)
Driver().loop()
"""


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    path = tmp_path_factory.mktemp("pyspy") / "busy.py"
    path.write_text(PROGRAM)
    proc = subprocess.Popen([sys.executable, str(path)], stdout=subprocess.PIPE, text=True)
    try:  # it never exits by itself: killed here whatever happens
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.2)
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def _sample_or_skip(pid: int) -> object:
    try:
        return sample_pids([pid], 1.0, rate_hz=100)
    except ProfilerPermissionError as err:
        pytest.skip(f"ptrace not permitted here: {err}")


def test_hot_function_holds_most_samples(target: int) -> None:
    profile = _sample_or_skip(target)
    from gpulens.analysis.flame.model import Profile

    assert isinstance(profile, Profile)
    assert profile.unit == "samples" and profile.total >= 20
    rows = function_table(profile)
    assert rows[0].name == "hot_function"
    assert rows[0].self_value / profile.total > 0.5
    loop = next(r for r in rows if r.name == "Driver.loop")
    assert loop.label == "Driver > loop"
    assert loop.total_value / profile.total > 0.9


def test_dump_shows_the_stack_now(target: int) -> None:
    try:
        profile = dump(target)
    except ProfilerPermissionError as err:
        pytest.skip(f"ptrace not permitted here: {err}")
    names = {r.name for r in function_table(profile)}
    assert "Driver.loop" in names and "<module>" in names


def test_cli_profile_writes_folded(target: int, tmp_path: Path) -> None:
    out = tmp_path / "busy.folded"
    try:
        code = main(["profile", "--pid", str(target), "--duration", "1", "-o", str(out)])
    except ProfilerPermissionError as err:
        pytest.skip(f"ptrace not permitted here: {err}")
    assert code == 0
    profile = load_profile(str(out))
    assert function_table(profile)[0].name == "hot_function"


def test_missing_process_is_a_clear_error() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    with pytest.raises(ProfilerError, match=f"process {proc.pid} does not exist"):
        sample_pids([proc.pid], 1.0)


def test_permission_failure_explains_the_fix() -> None:
    err = classify_failure(42, 1, "Error: Permission Denied: Try running again with elevated permissions")
    assert isinstance(err, ProfilerPermissionError)
    assert "ptrace_scope" in str(err) and "CAP_SYS_PTRACE" in str(err)
    assert PERMISSION_FIX in str(err)
    err = classify_failure(42, 1, "Error: Operation not permitted (os error 1)")
    assert isinstance(err, ProfilerPermissionError)


@pytest.mark.slow
def test_cli_profile_through_an_agent(target: int, tmp_path: Path, gpulens_exe: str) -> None:
    """``gpulens profile --host`` asks a real agent (loopback TCP) to sample; folded stacks come back."""
    from tests.fakes.agent_helpers import AgentProc

    agent = AgentProc(gpulens_exe, tmp_path, "profhost", token=True, extra=["--interval", "0.5", "--simulated-gpus", "0"])
    out = tmp_path / "remote.folded"
    try:
        code = main(["profile", "--host", agent.address, "--token-file", str(agent.token_file), "--pid", str(target),
                     "--duration", "1", "-o", str(out)])
    except Exception as err:
        if "permission" in str(err).lower() or "ptrace" in str(err).lower():
            pytest.skip(f"py-spy cannot attach here: {err}")
        raise
    finally:
        agent.stop()
    assert code == 0
    assert function_table(load_profile(str(out)))[0].name == "hot_function"


def test_profile_host_without_agent_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpulens.commands import profile as cmd_profile
    monkeypatch.setattr(cmd_profile, "AGENT_WAIT_S", 1.0)
    assert main(["profile", "--pid", "1", "--host", "127.0.0.1:9", "-o", str(tmp_path / "x")]) == 2
    assert "no gpulens agent answered at 127.0.0.1:9" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_a_cancelled_sampling_kills_py_spy_at_once(target: int) -> None:
    # Issue 31, item 1: quitting while py-spy sampled for 20 s left the app blank until it ended.
    from gpulens.agent.pyspy import sample_counted
    from gpulens.core.pyspy import SamplingCancelled

    started = time.monotonic()
    with pytest.raises(SamplingCancelled):
        sample_counted([target], 30.0, cancel=lambda: time.monotonic() - started > 0.5)
    spent = time.monotonic() - started
    leftover = subprocess.run(["pgrep", "-f", f"py-spy record .*-p {target}"], capture_output=True, text=True)
    assert leftover.stdout.strip() == "", "a py-spy child outlived the cancelled sampling"
    assert spent < 30.0, f"it sampled the whole 30 s ({spent:.1f} s) instead of stopping when cancelled"
