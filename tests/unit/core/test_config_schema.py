"""The config file's schema (msgspec): every key's error is one line with the file, the key,
what was expected and the value given, at any depth; unknown keys warn; flags are typed."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from gpulens.core.config import Config, ConfigFlags, PrometheusAccess, load_config, parse_config
from gpulens.core.errors import UNSET, ConfigError, ConfigProblem


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("[thresholds]\ntemp_warn_c = 'hot'",
         "key 'thresholds.temp_warn_c': expected a number from 0 to 1000, got 'hot'"),
        ("[cache]\nmax_age_days = 0",
         "key 'cache.max_age_days': expected a number of days from 0 to 3650, got 0"),
        ("[cache]\nmax_mib = true",
         "key 'cache.max_mib': expected an integer number of MiB from 1 to 1048576, got True"),
        ("[[panels]]\ntitle = 'a'\nmetric = 'm'\n[[panels]]\ntitle = 3\nmetric = 'm'",
         "key 'panels[1].title': expected a non-empty string, got 3"),
        ("[[panels]]\nunit = 'W'\nmetric = 'm'",  # a missing required key reads as None
         "key 'panels[0].title': expected a non-empty string, got None"),
        ("panels = [1]", "key 'panels[0]': expected a table, got 1"),
        ("cache = 5", "key 'cache': expected a table ([cache]), got 5"),
        ("[prometheus]\nusername = '  '", "key 'prometheus.username': expected a non-empty string, got '  '"),
        # a value inside a list or table of plain values names the whole list or table
        ("[prometheus]\nheaders = { X-A = 1 }",
         "key 'prometheus.headers': expected a table of strings, e.g. {\"X-Scope-OrgID\" = \"team-a\"}, "
         "got {'X-A': 1}"),
        ("job_key_env = ['A', 2]", "key 'job_key_env': expected a list of environment variable names, got ['A', 2]"),
        ("signal_ssh = ['ssh', '']", "key 'signal_ssh': expected a command as a list of strings"),
        ("history_minutes = 15.0", "key 'history_minutes': expected an integer from 1 to 1440, got 15.0"),
        ("window = 5", "key 'window': expected one of 1m, 5m, 15m, 1h, got 5"),
        ("interval_s = nan", "key 'interval_s': expected a number of seconds between 0.05 and 3600, got nan"),
    ],
)
def test_a_wrong_value_at_any_depth_is_one_line_with_file_and_key(tmp_path: Path, text: str, line: str) -> None:
    path = write(tmp_path, text + "\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: {line}")


def test_every_key_says_what_it_expects() -> None:
    wrong = datetime.date(2024, 1, 1)  # a TOML date: no key takes one
    tables = {"cache": ("max_mib", "max_age_days"), "prometheus": ("bearer_token_file", "username", "headers"),
              "thresholds": ("temp_warn_c", "util_low_percent")}
    keys = [("interval_s",), ("job_pattern",), ("history_minutes",), ("window",), ("job_key_env",),
            ("signal_ssh",), ("panels",), *((t,) for t in tables), *((t, k) for t, ks in tables.items() for k in ks)]
    for key in keys:
        data: dict[str, object] = {key[0]: wrong} if len(key) == 1 else {key[0]: {key[1]: wrong}}
        with pytest.raises(ConfigError) as info:
            parse_config(data, "c.toml")
        head = f"c.toml: key '{'.'.join(key)}': expected "
        assert str(info.value).startswith(head) and str(info.value).endswith(f", got {wrong!r}"), info.value
        assert len(str(info.value)) > len(head) + len(f", got {wrong!r}") + 3  # a description, not nothing
        assert (info.value.key, info.value.got, info.value.problem) == (".".join(key), wrong, ConfigProblem.WRONG_TYPE)


@pytest.mark.parametrize(
    ("data", "key", "got", "problem"),
    [
        ({"signal_ssh": ["-oX"]}, "signal_ssh", ["-oX"], ConfigProblem.BAD_FORMAT),
        ({"thresholds": {"mem_warn_percent": 99}}, "thresholds.mem_warn_percent", 99, ConfigProblem.OUT_OF_RANGE),
        ({"prometheus": {"headers": {"Bad Name": "x"}}}, "prometheus.headers", "Bad Name", ConfigProblem.BAD_FORMAT),
        ({"panels": [{"title": "x"}]}, "panels[0]", UNSET, ConfigProblem.MISSING),
    ],
)
def test_the_checks_msgspec_cannot_express_name_key_value_and_reason(
        data: dict[str, object], key: str, got: object, problem: ConfigProblem) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(data, "c.toml")
    assert (info.value.where, info.value.key, info.value.got, info.value.problem) == ("c.toml", key, got, problem)


def test_the_checks_msgspec_cannot_express_keep_their_words() -> None:
    """The rendered sentence, pinned once (the other tests assert the reason, not the words)."""
    with pytest.raises(ConfigError) as info:
        parse_config({"thresholds": {"mem_warn_percent": 99}}, "c.toml")
    assert str(info.value) == ("c.toml: key 'thresholds.mem_warn_percent': expected at most "
                               "thresholds.mem_crit_percent (98), got 99")
    assert info.value.expected == "at most thresholds.mem_crit_percent (98)"


def test_an_empty_file_is_the_defaults_and_values_keep_their_types(tmp_path: Path) -> None:
    assert parse_config({}, "c.toml") == Config()
    cfg = parse_config({"interval_s": 2, "job_key_env": ["A"], "signal_ssh": [], "panels": [{"title": "t", "expr": "e"}],
                        "prometheus": {"ca_file": "~/ca.pem", "headers": {"X-Scope-OrgID": "a"}}}, "c.toml")
    assert isinstance(cfg.interval_s, float) and cfg.interval_s == 2.0
    assert (cfg.job_key_env, cfg.signal_ssh, cfg.panels[0].unit, cfg.panels[0].metric) == (("A",), (), "", None)
    assert cfg.prometheus == PrometheusAccess(ca_file=str(Path.home() / "ca.pem"), headers=(("X-Scope-OrgID", "a"),))


def test_unknown_keys_in_every_table_warn_and_the_rest_still_applies() -> None:
    cfg = parse_config({"thresholds": {"temp_warn": 1, "temp_warn_c": 70}, "prometheus": {"user": "me"},
                        "cache": {"max_mib": 5, "maxage": 1}}, "c.toml")
    assert cfg.warnings == (
        "c.toml: unknown key 'cache.maxage' ignored (did you mean 'cache.max_age_days'?)",
        "c.toml: unknown key 'thresholds.temp_warn' ignored (did you mean 'thresholds.temp_warn_c'?)",
        "c.toml: unknown key 'prometheus.user' ignored (did you mean 'prometheus.username'?)",
    )
    assert (cfg.thresholds.temp_warn_c, cfg.cache_max_mib, cfg.prometheus.username) == (70.0, 5, None)


def test_typed_flags_override_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "interval_s = 2\nwindow = '15m'\n")
    assert load_config(path, ConfigFlags()) == load_config(path)
    cfg = load_config(path, ConfigFlags(window="1h"))
    assert (cfg.interval_s, cfg.window) == (2.0, "1h")
    with pytest.raises(ConfigError) as info:
        load_config(path, ConfigFlags(interval=0.01))
    assert str(info.value) == "--interval: expected seconds between 0.05 and 3600, got 0.01"
    assert (info.value.where, info.value.expected, info.value.got, info.value.problem) == (
        "--interval", "seconds between 0.05 and 3600", 0.01, ConfigProblem.OUT_OF_RANGE)
