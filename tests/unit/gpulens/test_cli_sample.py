"""``gpulens sample`` and ``gpulens jobs`` run as a user runs them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpulens.core.errors import ConfigProblem
from gpulens.ipc.serialize import sample_from_dict
from tests.fakes.cli_helpers import refusal

REQUIRED = ("host", "time", "cpu", "memory", "network", "storage", "gpus", "jobs", "unavailable")


def gpulens(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path)}  # no user config file
    return subprocess.run(
        [sys.executable, "-m", "gpulens", *args], capture_output=True, text=True, env=env, timeout=60
    )


def test_sample_json_lines(tmp_path: Path) -> None:
    result = gpulens(tmp_path, "sample", "--json", "--count", "2", "--interval", "0.3")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 2
    for line in lines:
        data = json.loads(line)
        for key in REQUIRED:
            assert key in data
        # the first line is already a rate over a real interval, not None or missing
        assert isinstance(data["cpu"]["total_percent"], float)
        assert len(data["cpu"]["per_core_percent"]) == os.cpu_count()
        assert data["memory"]["total_bytes"] > data["memory"]["used_bytes"] > 0
        assert isinstance(data["gpus"], list) and isinstance(data["jobs"], list)
        if not data["gpus"]:
            assert data["unavailable"]["gpus"]  # no GPU: the reason, not silence
        sample_from_dict(data)  # the documented schema validates
    assert json.loads(lines[1])["time"] - json.loads(lines[0])["time"] >= 0.25


def test_sample_human_summary(tmp_path: Path) -> None:
    result = gpulens(tmp_path, "sample", "--interval", "0.2")
    assert result.returncode == 0, result.stderr
    assert "cpu" in result.stdout and "memory" in result.stdout
    assert "n/a" in result.stdout or "gpu0" in result.stdout


def _own_tree_id() -> str:
    names, pid = [], os.getpid()
    while pid > 0:
        names.append(Path(f"/proc/{pid}/comm").read_text().rstrip("\n"))
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return "/".join(reversed(names))


def test_jobs_json_finds_a_python_child(tmp_path: Path) -> None:
    # gpulens itself runs as python under this test's process: a pattern for that.
    pattern = re.escape(_own_tree_id()) + r"/python[0-9.]*$"
    result = gpulens(tmp_path, "jobs", "--json", "--pattern", pattern)
    assert result.returncode == 0, result.stderr
    jobs = json.loads(result.stdout)
    assert isinstance(jobs, list)
    mine = [j for j in jobs if "gpulens jobs" in j["cmdline"] or "-m gpulens jobs" in j["cmdline"]]
    assert len(mine) == 1
    for key in ("pid", "tree_id", "cmdline", "user", "job_key", "start_time", "cpu_percent"):
        assert key in mine[0]


@pytest.mark.parametrize("cmd", ["jobs", "sample"])
def test_bad_pattern_is_one_clear_line(tmp_path: Path, cmd: str) -> None:
    args = ["jobs", "--pattern", "pyth(on"] if cmd == "jobs" else ["sample"]
    if cmd == "sample":
        cfg = tmp_path / "gpulens" / "config.toml"
        cfg.parent.mkdir()
        cfg.write_text("job_pattern = 'pyth(on'\n")
    result = gpulens(tmp_path, *args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "regular expression" in lines[0] and "Traceback" not in result.stderr


def test_bad_count_and_interval(tmp_path: Path) -> None:
    count = refusal("sample", "--count", "-1")
    assert (count.where, count.got, count.problem) == ("--count", -1, ConfigProblem.OUT_OF_RANGE)
    result = gpulens(tmp_path, "sample", "--interval", "0")
    assert result.returncode == 2 and "--interval" in result.stderr
