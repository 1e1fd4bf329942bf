"""``gpulens trace`` flags and exit statuses without torch: what ``--help`` promises is what it does."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from gpulens.cli import build_parser, main

EXE = str(Path(sys.executable).with_name("gpulens"))


def _trace_parser() -> argparse.ArgumentParser:
    subparsers = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser: argparse.ArgumentParser = subparsers.choices["trace"]
    return parser


def test_help_lists_the_exit_statuses_and_the_remote_spellings() -> None:
    out = subprocess.run([EXE, "trace", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    for line in ("exit status:", "  0  every process asked for was traced", "  1  a process (or host) could not",
                 "  2  bad arguments", "--connect HOST:PORT", "--ssh NODE", "--job KEY", "--hosts A,B", "--children"):
        assert line in out.stdout, line


def test_pid_repeats_add_up() -> None:
    ns = _trace_parser().parse_args(["--pid", "5,6", "--pid", "7"])
    assert ns.pid == [5, 6, 7]


def test_output_under_a_missing_directory_is_refused_before_anything_runs(tmp_path: Path) -> None:
    target = tmp_path / "nonexistent" / "dir" / "x.json"
    code = main(["trace", "--pid", str(os.getpid()), "-o", str(target)])
    assert code == 2
    assert not (tmp_path / "nonexistent").exists()


def test_bad_arguments_exit_2(capsys: object) -> None:
    assert main(["trace", "--pid", "1", "--hosts", "a:1,b:2"]) == 2  # --hosts goes with --job
    assert main(["trace", "--job", "x y"]) == 2
    assert main(["trace", "--job", "k", "--iterations", "3"]) == 2
    assert main(["trace", "--pid", "1", "--duration-ms", "0"]) == 2


def test_unreachable_agent_is_a_failure_not_bad_usage(tmp_path: Path) -> None:
    out = subprocess.run([EXE, "trace", "--connect", "127.0.0.1:9", "--pid", "1"], capture_output=True, text=True,
                         timeout=90, env={**os.environ, "HOME": str(tmp_path), "GPULENS_NO_PRUNE": "1"})
    assert out.returncode == 1, out.stderr
    assert "127.0.0.1:9" in out.stderr and "Traceback" not in out.stderr
    dep = subprocess.run([EXE, "trace", "--host", "127.0.0.1:9", "--pid", "1"], capture_output=True, text=True,
                         timeout=90, env={**os.environ, "HOME": str(tmp_path), "GPULENS_NO_PRUNE": "1"})
    assert dep.returncode == 1 and "--host is deprecated" in dep.stderr
