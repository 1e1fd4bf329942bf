"""Conventions a user of other CLI tools expects: -V, one pid/host spelling, logs, completion, XDG dirs."""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gpulens.cli import build_parser, main
from gpulens.commands._args import add_pid_argument, add_remote_arguments, pids_of, remote_target
from gpulens.core import dirs, logbook
from gpulens.core.config import Config
from gpulens.core.errors import ConfigError, ConfigProblem
from tests.fakes.cli_helpers import refusal

EXE = str(Path(sys.executable).with_name("gpulens"))


def run(*args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EXE, *args], capture_output=True, text=True, timeout=60, check=False, **kw)


def test_short_version_flag() -> None:
    from gpulens import __version__

    out = run("-V")
    assert out.returncode == 0 and out.stdout.strip() == f"gpulens {__version__}"


def test_pid_lists_add_up_in_every_spelling() -> None:
    parser = argparse.ArgumentParser()
    add_pid_argument(parser, required=True, help="processes")
    args = parser.parse_args(["--pid", "10,11", "--pid", "12", "--pid", "10"])
    assert pids_of(args) == (10, 11, 12)  # a repeat never replaces; duplicates once
    for bad in ("x", "1,,2", ""):
        with pytest.raises(SystemExit):
            parser.parse_args(["--pid", bad])
    for bad in ("0", "-3", str(1 << 22)):
        with pytest.raises(ConfigError) as info:
            pids_of(parser.parse_args(["--pid", bad]))
        assert (info.value.where, info.value.got, info.value.problem) == ("--pid", int(bad), ConfigProblem.OUT_OF_RANGE)


@pytest.mark.parametrize("command", ["profile", "trace"])
def test_profile_and_trace_take_the_same_pid_list(command: str) -> None:
    subparsers = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    sub: argparse.ArgumentParser = subparsers.choices[command]
    ns = sub.parse_args(["--pid", "1,2", "--pid", "3", "-o", "x", "--duration", "1"]
                        if command == "profile" else ["--pid", "1,2", "--pid", "3"])
    flat = [p for item in ns.pid for p in (item if isinstance(item, (list, tuple)) else [item])]
    assert flat == [1, 2, 3]


def test_remote_host_spellings() -> None:
    parser = argparse.ArgumentParser()
    add_remote_arguments(parser, what="sample")
    assert remote_target(parser.parse_args(["--connect", "n1:7000"])) == "n1:7000"
    assert remote_target(parser.parse_args(["--ssh", "node03"])) == "ssh:node03"
    assert remote_target(parser.parse_args(["--host", "ssh:node03"])) == "ssh:node03"  # old spelling kept
    assert remote_target(parser.parse_args([])) is None
    with pytest.raises(ConfigError) as both:
        remote_target(parser.parse_args(["--connect", "a:1", "--ssh", "b"]))
    assert (both.value.where, both.value.problem) == ("--connect and --ssh", ConfigProblem.CONFLICT)
    with pytest.raises(ConfigError) as many:
        remote_target(parser.parse_args(["--ssh", "node[01-02]"]))
    assert (many.value.got, many.value.expected, many.value.problem) == ("node[01-02]", "one node",
                                                                          ConfigProblem.BAD_FORMAT)
    with pytest.raises(ConfigError) as empty:
        remote_target(parser.parse_args(["--connect", " "]))
    assert (empty.value.where, empty.value.problem) == ("--connect", ConfigProblem.MISSING)


def test_unknown_config_key_warns_on_stderr_and_the_command_runs(tmp_path: Path) -> None:
    cfg = tmp_path / "gpulens" / "config.toml"
    cfg.parent.mkdir()
    cfg.write_text("intervl_s = 2\n")
    out = run("jobs", env={**os.environ, "XDG_CONFIG_HOME": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    assert f"gpulens: warning: {cfg}: unknown key 'intervl_s' ignored (did you mean 'interval_s'?)" in out.stderr


def test_log_file_and_debug(tmp_path: Path) -> None:
    log = tmp_path / "g.log"
    cfg = tmp_path / "c.toml"
    cfg.write_text("colr = 1\n")
    out = run("--log-file", str(log), "--config", str(cfg), "jobs")
    assert out.returncode == 0, out.stderr
    text = log.read_text()
    assert "WARNING gpulens.config" in text and "unknown key 'colr'" in text
    assert (log.stat().st_mode & 0o777) == 0o600
    # --debug alone writes the state directory's log ($XDG_STATE_HOME), and is accepted after the command
    out = run("jobs", "--debug", env={**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")})
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "state" / "gpulens" / "gpulens.log").is_file()
    missing = tmp_path / "missing" / "x.log"
    bad = refusal("--log-file", str(missing), "jobs")
    assert (bad.where, bad.problem) == (f"--log-file {missing}", ConfigProblem.UNAVAILABLE)
    for empty in ("", "  "):
        assert refusal("--log-file", empty, "jobs").problem is ConfigProblem.MISSING


def test_log_file_never_follows_a_link(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    link = tmp_path / "g.log"
    link.symlink_to(victim)
    refused = refusal("--log-file", str(link), "jobs")
    assert (refused.where, refused.problem) == (f"--log-file {link}", ConfigProblem.UNSAFE)
    assert victim.read_text() == "keep\n"


def test_logbook_ring_keeps_sanitized_warnings() -> None:
    logbook.install(None, debug=False)
    before = logbook.version()
    logging.getLogger("gpulens.test").warning("agent said \x1b[31mred\x1b[0m %s", "x")
    logging.getLogger("gpulens.test").info("not kept without --debug")
    logbook.note("shown in the TUI")
    kept = logbook.entries()[-2:]
    assert [e.message for e in kept] == ["agent said red x", "shown in the TUI"]
    assert logbook.version() == before + 2
    assert kept[0].level == "WARNING"


def test_completion_script_lists_the_commands() -> None:
    out = run("--print-completion", "bash")
    assert out.returncode == 0
    for command in ("trace", "analyze", "flame", "snapshot"):
        assert command in out.stdout
    assert "--print-completion" in run("--help").stdout


def test_xdg_dirs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "c"))
    monkeypatch.setenv("XDG_STATE_HOME", "relative/ignored")  # the spec: relative values are ignored
    assert dirs.cache_dir() == tmp_path / "c" / "gpulens"
    assert dirs.state_dir() == Path.home() / ".local" / "state" / "gpulens"


def _file(path: Path, size: int, age_s: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    t = time.time() - age_s
    os.utime(path, (t, t))


def test_prune_removes_old_then_oldest_and_never_follows_links(tmp_path: Path) -> None:
    top = tmp_path / "traces"
    _file(top / "a" / "old.json", 100, 10 * 86400)
    _file(top / "b" / "mid.json", 300, 3600)
    _file(top / "b" / "new.json", 300, 10)
    outside = tmp_path / "outside"
    _file(outside / "precious", 5000, 30 * 86400)
    (top / "fresh-empty").mkdir()  # a trace directory handed to a target that has not written yet
    (top / "old-empty").mkdir()
    os.utime(top / "old-empty", (time.time() - 30 * 86400,) * 2)
    (top / "link").symlink_to(outside, target_is_directory=True)
    (top / "filelink").symlink_to(outside / "precious")
    result = dirs.prune(top, max_bytes=400, max_age_s=7 * 86400)
    assert (result.removed_files, result.removed_bytes, result.kept_bytes) == (2, 400, 300)
    assert not (top / "a").exists()  # emptied directory removed
    assert (top / "fresh-empty").is_dir() and not (top / "old-empty").exists()
    assert (top / "b" / "new.json").exists() and not (top / "b" / "mid.json").exists()
    assert (outside / "precious").read_bytes() == b"x" * 5000
    assert dirs.prune(tmp_path / "missing", 1, 1).removed_files == 0


def test_housekeeping_prunes_the_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from gpulens.housekeeping import prune_caches, pruned_dirs

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    _file(tmp_path / "gpulens" / "downloads" / "old", 10, 2 * 86400)
    _file(tmp_path / "gpulens" / "downloads" / "new", 10, 60)
    assert tmp_path / "gpulens" / "downloads" in pruned_dirs()
    prune_caches(Config(cache_max_age_days=1.0))
    assert sorted(p.name for p in (tmp_path / "gpulens" / "downloads").iterdir()) == ["new"]


def test_main_accepts_global_flags_after_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["jobs", "--log-file", str(tmp_path / "l.log")]) == 0
    assert (tmp_path / "l.log").exists()


def test_only_the_commands_that_fill_the_caches_prune_them(monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path) -> None:
    import gpulens.housekeeping as hk

    started: list[str] = []
    monkeypatch.setattr(hk, "start_thread", lambda target, name: started.append(name))
    monkeypatch.delenv("GPULENS_NO_PRUNE", raising=False)
    # analyze forks its rank workers only from a single-threaded process: no prune thread there
    assert main(["jobs"]) == 0 and main(["analyze", str(tmp_path / "missing.json")]) != 0
    assert started == []
    assert main(["profile", "--pid", "1", "--duration", "1", "-o", str(tmp_path / "no" / "x")]) == 2
    assert started == ["gpulens-prune"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the directory to another owner")
def test_prune_leaves_a_directory_another_user_owns_alone(tmp_path: Path) -> None:
    top = tmp_path / "squatted"
    _file(top / "old.json", 10, 30 * 86400)
    os.chown(top, 65534, 65534)  # e.g. /tmp/gpulens-0 made first by someone else
    assert dirs.prune(top, max_bytes=0, max_age_s=1).removed_files == 0
    assert (top / "old.json").exists()
