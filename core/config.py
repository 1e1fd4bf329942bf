"""Configuration: ``$XDG_CONFIG_HOME/gpulens/config.toml``, overridden by flags.

Example::

    interval_s = 1.0
    job_pattern = 'systemd.*/([a-z]*sh|containerd-shim-runc-v2)/.*python[0-9.]*$'
    history_minutes = 15
    window = "5m"
    job_key_env = ["SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"]

    [[panels]]
    title = "NCCL bytes"
    unit = "B/s"
    expr = 'rate(nccl_bytes_total{host="$host"}[1m])'   # Prometheus source
    # metric = "gpu.power_w"                             # direct streams

A bad value gives one line naming the file, the key and what was expected.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpulens.core.errors import ConfigError
from gpulens.core.jobs_pattern import DEFAULT_JOB_KEY_ENV, DEFAULT_JOB_PATTERN

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

WINDOWS = {"1m": 60, "5m": 300, "15m": 900, "1h": 3600}
MAX_CONFIG_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class Panel:
    """A user-defined time-series panel on host and job screens."""

    title: str
    unit: str = ""
    expr: str | None = None
    metric: str | None = None


@dataclass(frozen=True, slots=True)
class Config:
    """Every setting, with its default."""

    interval_s: float = 1.0
    job_pattern: str = DEFAULT_JOB_PATTERN
    history_minutes: int = 15
    window: str = "5m"
    job_key_env: tuple[str, ...] = DEFAULT_JOB_KEY_ENV
    panels: tuple[Panel, ...] = ()
    source_path: str | None = field(default=None, compare=False)


def default_path() -> Path:
    """``$XDG_CONFIG_HOME/gpulens/config.toml`` (``~/.config`` when unset)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpulens" / "config.toml"


def _expect(path: str, key: str, what: str, got: Any) -> ConfigError:
    return ConfigError(f"{path}: key '{key}': expected {what}, got {got!r}")


def _check_pattern(where: str, key: str, pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as err:
        raise ConfigError(f"{where}: key '{key}': expected a regular expression: {err}") from err
    return pattern


def parse_config(data: Mapping[str, Any], where: str) -> Config:
    """Validate a parsed TOML table; raises ConfigError naming ``where`` and the key."""
    cfg = Config(source_path=where)
    known = {"interval_s", "job_pattern", "history_minutes", "window", "job_key_env", "panels"}
    for key in data:
        if key not in known:
            raise ConfigError(f"{where}: unknown key '{key}' (known: {', '.join(sorted(known))})")
    if "interval_s" in data:
        v = data["interval_s"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.05 <= v <= 3600:
            raise _expect(where, "interval_s", "a number of seconds between 0.05 and 3600", v)
        cfg = replace(cfg, interval_s=float(v))
    if "job_pattern" in data:
        v = data["job_pattern"]
        if not isinstance(v, str):
            raise _expect(where, "job_pattern", "a string (regular expression)", v)
        cfg = replace(cfg, job_pattern=_check_pattern(where, "job_pattern", v))
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
    if "panels" in data:
        cfg = replace(cfg, panels=_parse_panels(data["panels"], where))
    return cfg


def _parse_panels(value: Any, where: str) -> tuple[Panel, ...]:
    if not isinstance(value, list):
        raise _expect(where, "panels", "an array of tables ([[panels]])", value)
    panels = []
    for i, item in enumerate(value):
        key = f"panels[{i}]"
        if not isinstance(item, dict):
            raise _expect(where, key, "a table", item)
        for k in item:
            if k not in ("title", "unit", "expr", "metric"):
                raise ConfigError(f"{where}: unknown key '{key}.{k}' (known: title, unit, expr, metric)")
        title = item.get("title")
        if not isinstance(title, str) or not title:
            raise _expect(where, f"{key}.title", "a non-empty string", title)
        for k in ("unit", "expr", "metric"):
            if k in item and not isinstance(item[k], str):
                raise _expect(where, f"{key}.{k}", "a string", item[k])
        if "expr" not in item and "metric" not in item:
            raise ConfigError(f"{where}: key '{key}': expected 'expr' (PromQL) or 'metric' (gpulens metric name)")
        panels.append(Panel(title=title, unit=item.get("unit", ""), expr=item.get("expr"), metric=item.get("metric")))
    return tuple(panels)


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
            if not 0.05 <= interval <= 3600:
                raise ConfigError(f"--interval: expected seconds between 0.05 and 3600, got {interval}")
            cfg = replace(cfg, interval_s=float(interval))
        pattern = getattr(args, "pattern", None)
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as err:
                raise ConfigError(f"--pattern {pattern!r}: expected a regular expression: {err}") from err
            cfg = replace(cfg, job_pattern=pattern)
        window = getattr(args, "window", None)
        if window is not None:
            if window not in WINDOWS:
                raise ConfigError(f"--window: expected one of {', '.join(WINDOWS)}, got {window!r}")
            cfg = replace(cfg, window=window)
    return cfg
