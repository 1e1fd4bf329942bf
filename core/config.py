"""Configuration: ``$XDG_CONFIG_HOME/gpulens/config.toml``, overridden by flags.

Example::

    interval_s = 1.0
    job_pattern = 'systemd.*/([a-z]*sh|containerd-shim-runc-v2|slurmstepd)/.*python[0-9.]*$'
    history_minutes = 15
    window = "5m"
    job_key_env = ["SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"]
    signal_ssh = ["ssh", "-o", "ConnectTimeout=5"]  # [] = local only

    [cache]            # traces and downloads ($XDG_CACHE_HOME/gpulens, /tmp/gpulens-UID)
    max_mib = 1024     # oldest removed first above this
    max_age_days = 7   # removed at start-up when older

    [thresholds]       # colours and markers (! critical, ▲ warning) in tables and plots
    temp_warn_c = 80
    temp_crit_c = 90

    [prometheus]       # for --prometheus URL (flags win; a user in the URL wins over both)
    bearer_token_file = "~/.config/gpulens/prom-token"
    # username = "me"; password_file = "~/.config/gpulens/prom-password"
    ca_file = "/etc/ssl/certs/corp-ca.pem"
    headers = { "X-Scope-OrgID" = "team-a" }   # Mimir, Thanos, Cortex tenants

    [[panels]]
    title = "NCCL bytes"
    unit = "B/s"
    expr = 'rate(nccl_bytes_total{host="$host"}[1m])'   # Prometheus source
    # metric = "gpu.power_w"                             # direct streams

A bad value gives one line naming the file, the key and what was expected.
An unknown key is not fatal (as in btop and k9s): it is ignored with a
warning naming the closest known key (``Config.warnings``).
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpulens.core.errors import ConfigError
from gpulens.core.jobs_pattern import (
    DEFAULT_JOB_KEY_ENV,
    DEFAULT_JOB_PATTERN,
    RE2_AVAILABLE,
    compile_job_pattern,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

WINDOWS = {"1m": 60, "5m": 300, "15m": 900, "1h": 3600}
INTERVAL_S = (0.05, 3600.0)
"""The seconds an interval may be: ``--interval``, config ``interval_s`` and the TUI's ``:interval``."""
MAX_CONFIG_BYTES = 1 << 20
DEFAULT_SIGNAL_SSH = ("ssh", "-o", "ConnectTimeout=5")
"""ssh as the user; gpulens adds its guards (no prompt, no new host key, nothing forwarded)."""


@dataclass(frozen=True, slots=True)
class Panel:
    """A user-defined time-series panel on host and job screens."""

    title: str
    unit: str = ""
    expr: str | None = None
    metric: str | None = None


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Where a value turns warning (▲, yellow) or critical (!, red): ``[thresholds]``."""

    util_low_percent: float = 10.0
    """A GPU holding processes below this utilization is a warning (paid for, idle)."""
    temp_warn_c: float = 80.0
    temp_crit_c: float = 90.0
    mem_warn_percent: float = 90.0
    mem_crit_percent: float = 98.0
    power_warn_percent: float = 90.0
    """Of the GPU's power limit."""
    power_crit_percent: float = 100.0


THRESHOLD_KEYS = tuple(Thresholds.__dataclass_fields__)


# ---- [prometheus]: how to reach a Prometheus that asks who you are (Prometheus' own key names)
@dataclass(frozen=True, slots=True)
class PrometheusAccess:
    """``[prometheus]``: credentials by file (never inline), a CA file, extra headers."""

    bearer_token_file: str | None = None
    username: str | None = None
    password_file: str | None = None
    ca_file: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    """Extra request headers, e.g. ``X-Scope-OrgID`` for Mimir and Thanos."""


PROMETHEUS_KEYS = ("bearer_token_file", "username", "password_file", "ca_file", "headers")


def _parse_prometheus(cfg: Config, value: Any, where: str) -> Config:
    if not isinstance(value, dict):
        raise _expect(where, "prometheus", "a table ([prometheus])", value)
    cfg = replace(cfg, warnings=cfg.warnings + _unknown_keys(value, set(PROMETHEUS_KEYS), where, "prometheus."))
    got: dict[str, Any] = {}
    for key in PROMETHEUS_KEYS[:-1]:
        if key in value:
            v = value[key]
            if not isinstance(v, str) or not v.strip():
                raise _expect(where, f"prometheus.{key}", "a non-empty string", v)
            got[key] = os.path.expanduser(v) if key.endswith("_file") else v
    if "headers" in value:
        h = value["headers"]
        if not isinstance(h, dict) or not all(isinstance(k, str) and isinstance(x, str) for k, x in h.items()):
            raise _expect(where, "prometheus.headers", 'a table of strings, e.g. {"X-Scope-OrgID" = "team-a"}', h)
        bad = [k for k, x in h.items() if not re.fullmatch(r"[A-Za-z0-9!#$%&'*+.^_`|~-]{1,256}", k)
               or any(c in x for c in "\r\n\0")]
        if bad:
            raise ConfigError(f"{where}: key 'prometheus.headers': {bad[0]!r} is not a header name with a one-line value")
        got["headers"] = tuple(h.items())
    return replace(cfg, prometheus=PrometheusAccess(**got))
# ---- end [prometheus]


@dataclass(frozen=True, slots=True)
class Config:
    """Every setting, with its default."""

    interval_s: float = 1.0
    job_pattern: str = DEFAULT_JOB_PATTERN
    history_minutes: int = 15
    window: str = "5m"
    job_key_env: tuple[str, ...] = DEFAULT_JOB_KEY_ENV
    panels: tuple[Panel, ...] = ()
    cache_max_mib: int = 1024
    cache_max_age_days: float = 7.0
    thresholds: Thresholds = Thresholds()
    prometheus: PrometheusAccess = PrometheusAccess()
    signal_ssh: tuple[str, ...] = DEFAULT_SIGNAL_SSH
    """The ssh command that signals a process on another host, as the user (``[]``: no remote signals)."""
    source_path: str | None = field(default=None, compare=False)
    warnings: tuple[str, ...] = field(default=(), compare=False)
    """Unknown keys, each as one line naming the closest known key; shown, then ignored."""


def default_path() -> Path:
    """``$XDG_CONFIG_HOME/gpulens/config.toml`` (``~/.config`` when unset)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpulens" / "config.toml"


def _expect(path: str, key: str, what: str, got: Any) -> ConfigError:
    return ConfigError(f"{path}: key '{key}': expected {what}, got {got!r}")


def _check_pattern(label: str, pattern: str) -> tuple[str, ...]:
    """Raises ConfigError for a bad pattern; one warning when RE2 refuses it (matched with ``re``)."""
    try:
        compiled = compile_job_pattern(pattern)
    except re.error as err:
        raise ConfigError(f"{label}: expected a regular expression: {err}") from err
    if compiled.engine == "re2" or not RE2_AVAILABLE:
        return ()  # without google-re2 the sampler says so itself: not this pattern's fault
    return (f"{label}: {compiled.why_not_re2}; matched with Python's re instead, whose time is not "
            "linear in the process tree: without lookaround and backreferences it would be",)


def parse_config(data: Mapping[str, Any], where: str) -> Config:
    """Validate a parsed TOML table; raises ConfigError naming ``where`` and the key."""
    cfg = Config(source_path=where)
    known = {"interval_s", "job_pattern", "history_minutes", "window", "job_key_env", "panels", "cache",
             "thresholds", "prometheus", "signal_ssh"}
    warnings = _unknown_keys(data, known, where, "")
    if warnings:
        cfg = replace(cfg, warnings=warnings)
    if "interval_s" in data:
        v = data["interval_s"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not INTERVAL_S[0] <= v <= INTERVAL_S[1]:
            raise _expect(where, "interval_s", f"a number of seconds between {INTERVAL_S[0]:g} and {INTERVAL_S[1]:g}", v)
        cfg = replace(cfg, interval_s=float(v))
    if "job_pattern" in data:
        v = data["job_pattern"]
        if not isinstance(v, str):
            raise _expect(where, "job_pattern", "a string (regular expression)", v)
        cfg = replace(cfg, job_pattern=v, warnings=cfg.warnings + _check_pattern(f"{where}: key 'job_pattern'", v))
    if "history_minutes" in data:
        v = data["history_minutes"]
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 24 * 60:
            raise _expect(where, "history_minutes", "an integer from 1 to 1440", v)
        cfg = replace(cfg, history_minutes=v)
    if "window" in data:
        v = data["window"]
        if v not in WINDOWS:
            raise _expect(where, "window", f"one of {', '.join(WINDOWS)}", v)
        cfg = replace(cfg, window=v)
    if "job_key_env" in data:
        v = data["job_key_env"]
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise _expect(where, "job_key_env", "a list of environment variable names", v)
        cfg = replace(cfg, job_key_env=tuple(v))
    if "signal_ssh" in data:
        v = data["signal_ssh"]
        if (not isinstance(v, list) or not all(isinstance(x, str) and x and "\0" not in x for x in v)
                or (v and v[0].startswith("-")) or len(v) > 64):
            raise _expect(where, "signal_ssh", "a command as a list of strings (e.g. [\"ssh\", \"-o\", "
                          "\"BatchMode=yes\"]), or [] for no signals to other hosts", v)
        cfg = replace(cfg, signal_ssh=tuple(v))
    if "panels" in data:
        panels, notes = _parse_panels(data["panels"], where)
        cfg = replace(cfg, panels=panels, warnings=cfg.warnings + notes)
    if "cache" in data:
        cfg = _parse_cache(cfg, data["cache"], where)
    if "thresholds" in data:
        cfg = _parse_thresholds(cfg, data["thresholds"], where)
    if "prometheus" in data:
        cfg = _parse_prometheus(cfg, data["prometheus"], where)
    return cfg


def _parse_thresholds(cfg: Config, value: Any, where: str) -> Config:
    """``[thresholds]``: numbers from 0 to 1000; each warning level below its critical one."""
    if not isinstance(value, dict):
        raise _expect(where, "thresholds", "a table ([thresholds])", value)
    cfg = replace(cfg, warnings=cfg.warnings + _unknown_keys(value, set(THRESHOLD_KEYS), where, "thresholds."))
    got: dict[str, float] = {}
    for key in THRESHOLD_KEYS:
        if key in value:
            v = value[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1000:
                raise _expect(where, f"thresholds.{key}", "a number from 0 to 1000", v)
            got[key] = float(v)
    t = replace(cfg.thresholds, **got)
    for kind in ("temp", "mem", "power"):
        warn, crit = [k for k in THRESHOLD_KEYS if k.startswith(f"{kind}_")]
        if getattr(t, warn) > getattr(t, crit):
            raise ConfigError(f"{where}: key 'thresholds.{warn}': expected at most thresholds.{crit} "
                              f"({getattr(t, crit):g}), got {getattr(t, warn):g}")
    return replace(cfg, thresholds=t)


def _unknown_keys(data: Mapping[str, Any], known: set[str], where: str, prefix: str) -> tuple[str, ...]:
    """One warning per unknown key, naming the closest known one (difflib, as git does)."""
    out = []
    for key in data:
        if key in known:
            continue
        close = difflib.get_close_matches(str(key), sorted(known), n=1, cutoff=0.6)
        hint = f"did you mean '{prefix}{close[0]}'?" if close else f"known: {', '.join(sorted(known))}"
        out.append(f"{where}: unknown key '{prefix}{key}' ignored ({hint})")
    return tuple(out)


def _parse_cache(cfg: Config, value: Any, where: str) -> Config:
    if not isinstance(value, dict):
        raise _expect(where, "cache", "a table ([cache])", value)
    warnings = cfg.warnings + _unknown_keys(value, {"max_mib", "max_age_days"}, where, "cache.")
    cfg = replace(cfg, warnings=warnings)
    if "max_mib" in value:
        v = value["max_mib"]
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 1 << 20:
            raise _expect(where, "cache.max_mib", "an integer number of MiB from 1 to 1048576", v)
        cfg = replace(cfg, cache_max_mib=v)
    if "max_age_days" in value:
        v = value["max_age_days"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 3650:
            raise _expect(where, "cache.max_age_days", "a number of days from 0 to 3650", v)
        cfg = replace(cfg, cache_max_age_days=float(v))
    return cfg


def _parse_panels(value: Any, where: str) -> tuple[tuple[Panel, ...], tuple[str, ...]]:
    if not isinstance(value, list):
        raise _expect(where, "panels", "an array of tables ([[panels]])", value)
    panels = []
    warnings: tuple[str, ...] = ()
    for i, item in enumerate(value):
        key = f"panels[{i}]"
        if not isinstance(item, dict):
            raise _expect(where, key, "a table", item)
        warnings += _unknown_keys(item, {"title", "unit", "expr", "metric"}, where, f"{key}.")
        title = item.get("title")
        if not isinstance(title, str) or not title:
            raise _expect(where, f"{key}.title", "a non-empty string", title)
        for k in ("unit", "expr", "metric"):
            if k in item and not isinstance(item[k], str):
                raise _expect(where, f"{key}.{k}", "a string", item[k])
        if "expr" not in item and "metric" not in item:
            raise ConfigError(f"{where}: key '{key}': expected 'expr' (PromQL) or 'metric' (gpulens metric name)")
        panels.append(Panel(title=title, unit=item.get("unit", ""), expr=item.get("expr"), metric=item.get("metric")))
    return tuple(panels), warnings


def load_config(path: str | None, args: argparse.Namespace | None = None) -> Config:
    """Read the config file (missing default file = defaults), then apply flags.

    Flags read from ``args`` when present: ``interval``, ``pattern``, ``window``.
    """
    if path is not None and not path.strip():
        raise ConfigError("--config: expected a file name, got an empty string")
    file = Path(path) if path else default_path()
    cfg = Config()
    if file.exists() or path:
        try:
            with open(file, "rb") as fh:
                raw = fh.read(MAX_CONFIG_BYTES + 1)  # bounded: --config /dev/zero must not fill memory
        except OSError as err:
            raise ConfigError(f"{file}: cannot read: {err.strerror}") from err
        if len(raw) > MAX_CONFIG_BYTES:
            raise ConfigError(f"{file}: larger than {MAX_CONFIG_BYTES} bytes; not a gpulens config file")
        try:
            data = tomllib.loads(raw.decode("utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
            raise ConfigError(f"{file}: not valid TOML: {err}") from err
        cfg = parse_config(data, str(file))
    if args is not None:
        interval = getattr(args, "interval", None)
        if interval is not None:
            if not INTERVAL_S[0] <= interval <= INTERVAL_S[1]:
                raise ConfigError(f"--interval: expected seconds between {INTERVAL_S[0]:g} and {INTERVAL_S[1]:g}, "
                                  f"got {interval}")
            cfg = replace(cfg, interval_s=float(interval))
        pattern = getattr(args, "pattern", None)
        if pattern is not None:
            notes = _check_pattern(f"--pattern {pattern!r}", pattern)
            cfg = replace(cfg, job_pattern=pattern, warnings=cfg.warnings + notes)
        window = getattr(args, "window", None)
        if window is not None:
            if window not in WINDOWS:
                raise ConfigError(f"--window: expected one of {', '.join(WINDOWS)}, got {window!r}")
            cfg = replace(cfg, window=window)
    return cfg
