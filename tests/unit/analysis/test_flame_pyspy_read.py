"""py-spy's output read into profiles (analysis.flame.pyspy), apart from running it (collectors.pyspy); the TUI's
own machine gets py-spy from its source (sources.profiling), wired by the command line."""

from __future__ import annotations

import argparse
import ast
import json
from collections.abc import Callable
from typing import Any

import pytest

from gpulens.analysis.flame.pyspy import dump_profile, sampled
from gpulens.core.config import Config
from gpulens.core.pyspy import ProfilerError, ProfilerPermissionError, Recording
from gpulens.sources.local import LocalSource, MultiSource
from gpulens.sources.profiling import local_profiler
from tests.paths import ROOT


def test_one_process_keeps_its_stacks_and_counts_idle_samples() -> None:
    rec = Recording((7,), 2, 100, ((7, b"main (a.py:1);step (a.py:5) 30\nmain (a.py:1) 10\n"),), threads={7: 3})
    run = sampled(rec)
    assert run.profile.title == "py-spy 100 Hz x 2 s: 7"
    assert run.profile.total == run.recorded == 40
    assert run.idle_dropped == 3 * 200 - 40
    assert {tuple(f) for f, _ in run.profile.stacks()} == {("main (a.py:1)", "step (a.py:5)"), ("main (a.py:1)",)}


def test_several_processes_sit_under_their_pid_and_one_failure_does_not_hide_the_others() -> None:
    gone = ProfilerError("process 9 does not exist (or exited)")
    rec = Recording((7, 8, 9), 1, 50, ((7, b"a 1\n"), (8, b"b 2\n")), (gone,), {7: 1, 8: None, 9: 1})
    run = sampled(rec)
    assert {f[0] for f, _ in run.profile.stacks()} == {"process 7", "process 8"}
    assert run.threads is None  # pid 8's threads were not countable
    assert run.profile.title.endswith(": 7, 8, 9")


def test_nothing_sampled_raises_the_first_error() -> None:
    denied = ProfilerPermissionError("cannot attach to process 7")
    with pytest.raises(ProfilerPermissionError, match="cannot attach"):
        sampled(Recording((7,), 1, 100, (), (denied,)))
    assert sampled(Recording((7,), 1, 100, ((7, b""),))).profile.total == 0  # sampled, idle: an empty graph


def test_dump_json_becomes_one_stack_per_thread() -> None:
    threads = [{"os_thread_id": 11, "thread_name": "MainThread",
                "frames": [{"name": "step", "short_filename": "t.py", "line": 9},
                           {"name": "<module>", "filename": "/x/t.py", "line": 1}]},
               {"thread_id": 12, "frames": []}]
    profile = dump_profile(5, json.dumps(threads).encode())
    assert profile.title == "py-spy dump of 5" and profile.total == 2
    assert {tuple(f) for f, _ in profile.stacks()} == {
        ("thread 11 (MainThread)", "<module> (/x/t.py:1)", "step (t.py:9)"), ("thread 12",)}
    with pytest.raises(ProfilerError, match="py-spy dump gave unreadable JSON"):
        dump_profile(5, b"{not json")


def test_analysis_runs_no_process() -> None:
    for path in sorted((ROOT / "analysis").rglob("*.py")):
        tree = ast.parse(path.read_text())
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert "subprocess" not in names, f"{path}: analysis/ reads output; running programs is collectors'"


class _Prof:
    def sample_counted(self, pids: list[int], duration_s: float, rate_hz: int = 100, *,
                       count_threads: bool = True, cancel: Callable[[], bool] | None = None) -> Any:
        raise AssertionError

    def dump(self, pid: int) -> Any:
        raise AssertionError


def _sampler() -> Any:
    raise AssertionError


def test_the_profiler_is_found_in_any_part_of_the_source() -> None:
    prof = _Prof()
    local = LocalSource(Config(), _sampler, profiler=prof)
    assert local_profiler(local) is prof
    assert local_profiler(MultiSource([LocalSource(Config(), _sampler), local])) is prof
    assert local_profiler(LocalSource(Config(), _sampler)) is None
    assert local_profiler(object()) is None


def test_the_command_line_gives_this_machines_source_py_spy(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpulens import sources_from_args
    from gpulens.agent import pyspy

    monkeypatch.setattr(sources_from_args, "_local_gpumem", lambda: None)
    source = sources_from_args.build_source(argparse.Namespace(), Config())
    assert isinstance(source, LocalSource) and local_profiler(source) is pyspy
