"""Issue 33 item 3: the commands' flag checks refuse with the flag and the reason as values.

Each refusal is a ConfigError whose ``where`` names the flag (with its value where the sentence shows
it) and whose ``problem`` says why; the tests compare those, not the sentence (``gpulens agent``'s
checks are in test_agent_flag_reasons.py, ``gpulens analyze``'s in tests/unit/analysis/test_analyze_cli.py).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from gpulens.cli import build_parser
from gpulens.commands import gpumem, jobs, trace, trace_job
from gpulens.core.config import Config
from gpulens.core.errors import ConfigError, ConfigProblem
from gpulens.ipc.kineto.requests import TraceRequest
from tests.fakes.cli_helpers import refusal

OUT_OF_RANGE, CONFLICT, MISSING = ConfigProblem.OUT_OF_RANGE, ConfigProblem.CONFLICT, ConfigProblem.MISSING


def _parsed(*argv: str) -> argparse.Namespace:
    args = build_parser().parse_args(list(argv))
    args.cfg = Config()
    return args


# --- the TUI's sources ---------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--append", "--force"])
def test_append_and_force_go_with_record(flag: str) -> None:
    from gpulens.launch import launch

    with pytest.raises(ConfigError) as info:
        launch(_parsed("--demo", flag))
    assert (info.value.where, info.value.expected, info.value.problem) == (flag, "--record FILE", CONFLICT)


@pytest.mark.parametrize("real", [["--prometheus", "http://127.0.0.1:9"], ["--connect", "127.0.0.1:9"]])
def test_demo_is_never_mixed_with_real_sources(real: list[str]) -> None:
    from gpulens.sources_from_args import build_source

    with pytest.raises(ConfigError) as info:
        build_source(_parsed("--demo", *real), Config())
    assert (info.value.where, info.value.problem) == ("--demo", CONFLICT)


# --- sample, jobs, snapshot ------------------------------------------------------------------


def test_sample_count_below_zero() -> None:
    err = refusal("sample", "--count=-1")
    assert (err.where, err.got, err.problem) == ("--count", -1, OUT_OF_RANGE)


def test_jobs_pattern_that_config_did_not_check() -> None:
    with pytest.raises(ConfigError) as info:
        jobs.run(argparse.Namespace(cfg=Config(job_pattern="pyth(on"), json=True))
    assert (info.value.where, info.value.got, info.value.problem) == ("--pattern", "pyth(on", ConfigProblem.BAD_PATTERN)


@pytest.mark.parametrize("timeout", ["0", "-1", "3601", "nan"])
def test_snapshot_timeout_out_of_range(timeout: str) -> None:
    err = refusal("snapshot", f"--timeout={timeout}")
    assert (err.where, err.problem) == ("--timeout", OUT_OF_RANGE)
    assert str(err.got) == str(float(timeout))


@pytest.mark.parametrize(
    ("args", "flag", "needs"),
    [
        (("--ssh-command", "ssh -J jump"), "--ssh-command", "--ssh or --slurm-job"),
        (("--tls-ca", "ca.pem", "--connect", "127.0.0.1:1"), "--tls-ca", "--connect tls://HOST:PORT"),
        (("--prom-selector", '{a="b"}'), "--prom-selector", "--prometheus"),
        (("--token-file", "t"), "--token-file", "--connect, --ssh or --slurm-job"),
    ],
    ids=["ssh-command", "tls-ca", "prom-selector", "token-file"],
)
def test_snapshot_modifier_without_its_source_is_refused(args: tuple[str, ...], flag: str, needs: str) -> None:
    err = refusal("snapshot", "--json", "--timeout", "2", *args)  # nothing on stdout: not a snapshot of this machine
    assert (err.where, err.expected, err.problem) == (flag, needs, CONFLICT)


# --- flame, profile, gpumem ------------------------------------------------------------------


def test_flame_refusals(tmp_path: Path) -> None:
    folded = tmp_path / "s.folded"
    folded.write_text("main;work;hot 3\n")
    top = refusal("flame", str(folded), "--top", "0", "--json")
    assert (top.where, top.got, top.problem) == ("--top", 0, OUT_OF_RANGE)
    both = refusal("flame", str(folded), "--pyroscope", "http://127.0.0.1:9", "--query", "q")
    assert (both.where, both.got, both.problem) == ("--pyroscope", str(folded), CONFLICT)
    no_query = refusal("flame", "--pyroscope", "http://127.0.0.1:9")
    assert (no_query.where, no_query.expected, no_query.problem) == ("--pyroscope", "--query", CONFLICT)
    nothing = refusal("flame", "--json")
    assert (nothing.where, nothing.problem) == ("FILE", MISSING)


@pytest.mark.parametrize(
    ("args", "flag", "got"),
    [(("--duration", "0"), "--duration", 0.0), (("--duration", "86401"), "--duration", 86401.0),
     (("--rate", "0"), "--rate", 0), (("--rate", "10001"), "--rate", 10001)],
)
def test_profile_checks_arguments_before_sampling(tmp_path: Path, args: tuple[str, ...], flag: str,
                                                  got: float) -> None:
    err = refusal("profile", "--pid", str(os.getpid()), *args, "-o", str(tmp_path / "x.folded"))
    assert (err.where, err.got, err.problem) == (flag, got, OUT_OF_RANGE)
    assert not (tmp_path / "x.folded").exists()


@pytest.mark.parametrize(
    ("pid", "problem"),
    [("1,x", ConfigProblem.BAD_FORMAT), ("1.5", ConfigProblem.BAD_FORMAT), ("0", OUT_OF_RANGE),
     ("5,-2", OUT_OF_RANGE), ("", MISSING), (" , ", MISSING)],
)
def test_gpumem_pids(pid: str, problem: ConfigProblem) -> None:
    with pytest.raises(ConfigError) as info:
        gpumem._pids(argparse.Namespace(pid=pid, job=None, cfg=Config()))
    assert (info.value.where, info.value.got, info.value.problem) == (f"--pid {pid!r}", pid, problem)


def test_gpumem_job_not_here() -> None:
    with pytest.raises(ConfigError) as info:
        gpumem._pids(argparse.Namespace(pid=None, job="no-such-job-0x33", cfg=Config()))
    assert (info.value.got, info.value.problem) == ("no-such-job-0x33", ConfigProblem.NOT_FOUND)


# --- trace, trace --job ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "flag", "problem"),
    [
        (["--pid", "1", "--wait", "5"], "--wait", CONFLICT),
        (["--pid", "1", "--hosts", "a:1,b:2"], "--hosts", CONFLICT),
        (["--job", "k", "--iterations", "3"], "--iterations", CONFLICT),
        (["--pid", "1", "--duration-ms", "0"], "--duration-ms", OUT_OF_RANGE),
        (["--pid", "1", "--iterations", "100001"], "--iterations", OUT_OF_RANGE),
        (["--pid", "1", "--warmup-s", "400"], "--warmup-s", OUT_OF_RANGE),
        (["--pid", "1", "--timeout", "0"], "--timeout", OUT_OF_RANGE),
        (["--pid", ",".join(str(p) for p in range(1, 1026))], "--pid", OUT_OF_RANGE),
    ],
    ids=["wait", "hosts", "job-iterations", "duration", "iterations", "warmup", "timeout", "pids"],
)
def test_trace_refusals_name_the_flag(argv: list[str], flag: str, problem: ConfigProblem) -> None:
    with pytest.raises(ConfigError) as info:
        trace._run(_parsed("trace", *argv))
    assert (info.value.where, info.value.problem) == (flag, problem)


def test_trace_request_refusal_keeps_the_requests_sentence() -> None:
    """The sentence is TraceRequest.validate's (names the field); the flag and the reason are added."""
    with pytest.raises(ConfigError) as info:
        trace._run(_parsed("trace", "--pid", "1", "--duration-ms", "0"))
    with pytest.raises(ValueError) as plain:
        TraceRequest(pids=(1,), duration_ms=0).validate()
    assert str(info.value) == str(plain.value)


def test_trace_output_under_a_missing_directory(tmp_path: Path) -> None:
    target = tmp_path / "nonexistent" / "x.json"
    with pytest.raises(ConfigError) as info:
        trace._run(_parsed("trace", "--pid", "1", "-o", str(target)))
    assert (info.value.where, info.value.got, info.value.problem) == (
        f"-o {target}", str(target.parent), ConfigProblem.NOT_FOUND)


@pytest.mark.parametrize("key", ["x y", "", "a" * 65, "a/b"])
def test_trace_job_key(key: str) -> None:
    args = _parsed("trace", "--job", "k")
    args.job = key
    with pytest.raises(ConfigError) as info:
        trace_job.run_job(args, TraceRequest(pids=(1,)), [])
    assert (info.value.where, info.value.got, info.value.problem) == (f"--job {key!r}", key, ConfigProblem.BAD_FORMAT)


def test_trace_job_output_directory(tmp_path: Path) -> None:
    a_file = tmp_path / "f"
    a_file.write_text("")
    with pytest.raises(ConfigError) as not_dir:
        trace_job._output_dir(str(a_file), "k")
    assert (not_dir.value.where, not_dir.value.problem) == (f"-o {a_file}", ConfigProblem.NOT_A_DIRECTORY)
    with pytest.raises(ConfigError) as no_parent:
        trace_job._output_dir(str(tmp_path / "missing" / "d"), "k")
    assert (no_parent.value.got, no_parent.value.problem) == (str(tmp_path / "missing"), ConfigProblem.NOT_FOUND)
    with pytest.raises(ConfigError) as cannot:
        trace_job._make_dir(a_file / "d", default=True)
    assert (cannot.value.where, cannot.value.problem) == (f"-o {a_file / 'd'}", ConfigProblem.UNAVAILABLE)
