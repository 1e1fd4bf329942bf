"""Config file: defaults, values, flags overriding, and one-line errors that
name the file, the key and what was expected."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpulens.core.config import Config, ConfigFlags, default_path, load_config
from gpulens.core.errors import ConfigError, ConfigProblem
from gpulens.core.jobs_pattern import DEFAULT_JOB_PATTERN


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return str(path)


def test_missing_default_file_gives_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert default_path() == tmp_path / "gpulens" / "config.toml"
    assert load_config(None) == Config()
    assert Config().job_pattern == DEFAULT_JOB_PATTERN


def test_values_and_flag_overrides(tmp_path: Path) -> None:
    path = write(tmp_path, """
interval_s = 2
job_pattern = 'bash/python$'
window = "15m"
job_key_env = ["MY_JOB"]
[[panels]]
title = "NCCL"
expr = 'rate(x[1m])'
""")
    cfg = load_config(path)
    assert (cfg.interval_s, cfg.job_pattern, cfg.window, cfg.job_key_env) == (2.0, "bash/python$", "15m", ("MY_JOB",))
    assert cfg.panels[0].title == "NCCL"
    flags = ConfigFlags(interval=0.5, pattern="x$", window="1m")
    cfg = load_config(path, flags)
    assert (cfg.interval_s, cfg.job_pattern, cfg.window) == (0.5, "x$", "1m")


P = ConfigProblem


@pytest.mark.parametrize(
    ("text", "key", "problem", "expected"),
    [
        ("interval_s = 'fast'", "interval_s", P.WRONG_TYPE, "a number of seconds between 0.05 and 3600"),
        ("interval_s = 0", "interval_s", P.OUT_OF_RANGE, "a number of seconds between 0.05 and 3600"),
        ("interval_s = true", "interval_s", P.WRONG_TYPE, "a number of seconds between 0.05 and 3600"),
        ("job_pattern = 'pyth(on'", "job_pattern", P.BAD_PATTERN, "a regular expression"),
        ("job_pattern = 3", "job_pattern", P.WRONG_TYPE, "a string (regular expression)"),
        ("window = '2m'", "window", P.OUT_OF_RANGE, "one of 1m, 5m, 15m, 1h"),
        ("history_minutes = 0", "history_minutes", P.OUT_OF_RANGE, "an integer from 1 to 1440"),
        ("job_key_env = 'SLURM_JOB_ID'", "job_key_env", P.WRONG_TYPE, "a list of environment variable names"),
        ("panels = 3", "panels", P.WRONG_TYPE, "an array of tables ([[panels]])"),
        ("[[panels]]\nunit = 'B'", "panels[0].title", P.MISSING, "a non-empty string"),
        ("[[panels]]\ntitle = 'x'", "panels[0]", P.MISSING, "'expr' (PromQL) or 'metric' (gpulens metric name)"),
        ("[[panels]]\ntitle = 'x'\nexpr = 1", "panels[0].expr", P.WRONG_TYPE, "a string"),
    ],
)
def test_errors_name_file_key_and_expectation(tmp_path: Path, text: str, key: str, problem: ConfigProblem,
                                              expected: str) -> None:
    path = write(tmp_path, text + "\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    err = info.value
    assert (err.where, err.key, err.problem, err.expected) == (path, key, problem, expected)
    assert "\n" not in str(err)


def test_unreadable_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(str(tmp_path / "nope.toml"))
    assert (info.value.where, info.value.problem) == (str(tmp_path / "nope.toml"), ConfigProblem.UNREADABLE)
    path = write(tmp_path, "interval_s = = 1")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert (info.value.where, info.value.key, info.value.problem) == (path, None, ConfigProblem.NOT_TOML)
    bad = tmp_path / "bin.toml"
    bad.write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError) as info:
        load_config(str(bad))
    assert (info.value.where, info.value.problem) == (str(bad), ConfigProblem.NOT_TOML)
    big = tmp_path / "big.toml"
    big.write_bytes(b"#" * (2 << 20))
    with pytest.raises(ConfigError) as info:
        load_config(str(big))
    assert (info.value.where, info.value.problem) == (str(big), ConfigProblem.TOO_LARGE)
    with pytest.raises(ConfigError) as info:
        load_config("  ")
    assert (info.value.where, info.value.problem) == ("--config", ConfigProblem.MISSING)


def test_bad_flags(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, ConfigFlags(interval=0.0, pattern=None, window=None))
    assert (info.value.where, info.value.key, info.value.got, info.value.problem) == (
        "--interval", None, 0.0, ConfigProblem.OUT_OF_RANGE)
    with pytest.raises(ConfigError) as info:
        load_config(None, ConfigFlags(interval=None, pattern=None, window="2m"))
    assert (info.value.where, info.value.got, info.value.problem) == ("--window", "2m", ConfigProblem.OUT_OF_RANGE)
    with pytest.raises(ConfigError) as info:
        load_config(None, ConfigFlags(interval=None, pattern="(", window=None))
    assert (info.value.where, info.value.got, info.value.problem) == ("--pattern '('", "(", ConfigProblem.BAD_PATTERN)


def test_cli_reports_one_line(tmp_path: Path) -> None:
    cfg = tmp_path / "gpulens" / "config.toml"
    cfg.parent.mkdir()
    cfg.write_text("window = 'forever'\n")
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path)}
    result = subprocess.run([sys.executable, "-m", "gpulens", "jobs"], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"gpulens: configuration error: {cfg}: key 'window': expected one of 1m, 5m, 15m, 1h, got 'forever'"
    )


@pytest.mark.parametrize(
    ("text", "warning"),
    [
        ("intervl_s = 2", "unknown key 'intervl_s' ignored (did you mean 'interval_s'?)"),
        ("colour = 'red'", "unknown key 'colour' ignored (known: cache, history_minutes,"),
        ("[cache]\nmax_mb = 5", "unknown key 'cache.max_mb' ignored (did you mean 'cache.max_mib'?)"),
        ("[[panels]]\ntitle = 'x'\nmetric = 'gpu.power_w'\nunits = 'W'",
         "unknown key 'panels[0].units' ignored (did you mean 'panels[0].unit'?)"),
    ],
)
def test_unknown_keys_warn_with_the_closest_known_key(tmp_path: Path, text: str, warning: str) -> None:
    path = write(tmp_path, text + "\n")
    cfg = load_config(path)  # not fatal, as in btop and k9s
    assert len(cfg.warnings) == 1
    assert cfg.warnings[0].startswith(path + ": ")
    assert warning in cfg.warnings[0]


def test_cache_section(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, "[cache]\nmax_mib = 64\nmax_age_days = 0.5\n"))
    assert (cfg.cache_max_mib, cfg.cache_max_age_days, cfg.warnings) == (64, 0.5, ())
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, "[cache]\nmax_mib = 0\n"))
    assert (info.value.key, info.value.got, info.value.problem) == ("cache.max_mib", 0, ConfigProblem.OUT_OF_RANGE)
