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

The file is checked against a schema (:class:`_File`, msgspec): each key's
type, bounds and default, and in ``description`` what an error says was
expected. A bad value gives one line naming the file, the key and that.
An unknown key is not fatal (as in btop and k9s): it is ignored with a
warning naming the closest known key (``Config.warnings``).
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from gpulens.core.errors import ConfigError, ConfigProblem
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

_Text = Annotated[str, Meta(description="a string")]
_NonEmpty = Annotated[str, Meta(pattern=r"\S", description="a non-empty string")]
_Level = Annotated[float, Meta(ge=0, le=1000, description="a number from 0 to 1000")]


@dataclass(frozen=True, slots=True)
class Panel:
    """A user-defined time-series panel on host and job screens."""

    title: Annotated[str, Meta(min_length=1, description="a non-empty string")]
    unit: _Text = ""
    expr: _Text | None = None
    metric: _Text | None = None


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Where a value turns warning (▲, yellow) or critical (!, red): ``[thresholds]``."""

    util_low_percent: _Level = 10.0
    """A GPU holding processes below this utilization is a warning (paid for, idle)."""
    temp_warn_c: _Level = 80.0
    temp_crit_c: _Level = 90.0
    mem_warn_percent: _Level = 90.0
    mem_crit_percent: _Level = 98.0
    power_warn_percent: _Level = 90.0
    """Of the GPU's power limit."""
    power_crit_percent: _Level = 100.0


THRESHOLD_KEYS = tuple(Thresholds.__dataclass_fields__)


@dataclass(frozen=True, slots=True)
class PrometheusAccess:
    """``[prometheus]``: credentials by file (never inline), a CA file, extra headers (Prometheus' key names)."""

    bearer_token_file: str | None = None
    username: str | None = None
    password_file: str | None = None
    ca_file: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    """Extra request headers, e.g. ``X-Scope-OrgID`` for Mimir and Thanos."""


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


@dataclass(frozen=True, slots=True)
class ConfigFlags:
    """The command-line flags that override the file; None where not given."""

    interval: float | None = None
    pattern: str | None = None
    window: str | None = None


# ---- the file's schema: defaults are Config's, ``description`` is an error's "expected ..."
_DEFAULT = Config()
_SSH_EXPECTED = ('a command as a list of strings (e.g. ["ssh", "-o", "BatchMode=yes"]), '
                 "or [] for no signals to other hosts")
_Seconds = Annotated[float, Meta(ge=INTERVAL_S[0], le=INTERVAL_S[1],
                                 description=f"a number of seconds between {INTERVAL_S[0]:g} and {INTERVAL_S[1]:g}")]
_Window = Annotated[str, Meta(pattern=f"^(?:{'|'.join(map(re.escape, WINDOWS))})$",
                              description=f"one of {', '.join(WINDOWS)}")]
_Argv = Annotated[tuple[Annotated[str, Meta(min_length=1, pattern="^[^\0]*$")], ...],
                  Meta(max_length=64, description=_SSH_EXPECTED)]
_Panels = Annotated[tuple[Annotated[Panel, Meta(description="a table")], ...],
                    Meta(description="an array of tables ([[panels]])")]
_Headers = Annotated[dict[str, str], Meta(description='a table of strings, e.g. {"X-Scope-OrgID" = "team-a"}')]
_HEADER_NAME = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]{1,256}")


class _Cache(msgspec.Struct, frozen=True):
    max_mib: Annotated[int, Meta(ge=1, le=1 << 20, description="an integer number of MiB from 1 to 1048576")] = (
        _DEFAULT.cache_max_mib)
    max_age_days: Annotated[float, Meta(gt=0, le=3650, description="a number of days from 0 to 3650")] = (
        _DEFAULT.cache_max_age_days)


class _Prometheus(msgspec.Struct, frozen=True):
    bearer_token_file: _NonEmpty | None = None
    username: _NonEmpty | None = None
    password_file: _NonEmpty | None = None
    ca_file: _NonEmpty | None = None
    headers: _Headers = msgspec.field(default_factory=dict)


class _File(msgspec.Struct, frozen=True):
    """config.toml as written."""

    interval_s: _Seconds = _DEFAULT.interval_s
    job_pattern: Annotated[str, Meta(description="a string (regular expression)")] = _DEFAULT.job_pattern
    history_minutes: Annotated[int, Meta(ge=1, le=24 * 60, description="an integer from 1 to 1440")] = (
        _DEFAULT.history_minutes)
    window: _Window = _DEFAULT.window
    job_key_env: Annotated[tuple[str, ...], Meta(description="a list of environment variable names")] = (
        _DEFAULT.job_key_env)
    signal_ssh: _Argv = _DEFAULT.signal_ssh
    panels: _Panels = ()
    cache: Annotated[_Cache, Meta(description="a table ([cache])")] = _Cache()
    thresholds: Annotated[Thresholds, Meta(description="a table ([thresholds])")] = _DEFAULT.thresholds
    prometheus: Annotated[_Prometheus, Meta(description="a table ([prometheus])")] = _Prometheus()


_TABLES = (msgspec.inspect.StructType, msgspec.inspect.DataclassType)


@cache
def _schema() -> msgspec.inspect.StructType | msgspec.inspect.DataclassType:
    """:class:`_File` as msgspec describes it (built once: it takes about a millisecond)."""
    info = msgspec.inspect.type_info(_File)
    if not isinstance(info, _TABLES):
        raise TypeError(f"config: {_File.__name__} is not a table: {info!r}")
    return info


def default_path() -> Path:
    """``$XDG_CONFIG_HOME/gpulens/config.toml`` (``~/.config`` when unset)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpulens" / "config.toml"


def _expect(path: str, key: str, what: str, got: object, problem: ConfigProblem) -> ConfigError:
    return ConfigError(where=path, key=key, expected=what, got=got, problem=problem)


def _check_pattern(where: str, key: str | None, pattern: str) -> tuple[str, ...]:
    """Raises ConfigError for a bad pattern; one warning when RE2 refuses it (matched with ``re``)."""
    label = where if key is None else f"{where}: key '{key}'"
    try:
        compiled = compile_job_pattern(pattern)
    except re.error as err:
        raise ConfigError(where=where, key=key, expected="a regular expression", got=pattern,
                          problem=ConfigProblem.BAD_PATTERN, detail=f"expected a regular expression: {err}") from err
    if compiled.engine == "re2" or not RE2_AVAILABLE:
        return ()  # without google-re2 the sampler says so itself: not this pattern's fault
    return (f"{label}: {compiled.why_not_re2}; matched with Python's re instead, whose time is not "
            "linear in the process tree: without lookaround and backreferences it would be",)


def parse_config(data: Mapping[str, Any], where: str) -> Config:
    """Validate a parsed TOML table; raises ConfigError naming ``where`` and the key."""
    try:
        file = msgspec.convert(dict(data), _File)
    except msgspec.ValidationError as err:
        raise _schema_error(err, data, where) from None
    notes = _check_pattern(where, "job_pattern", file.job_pattern) if "job_pattern" in data else ()
    argv = data.get("signal_ssh", ())
    if argv and argv[0].startswith("-"):
        raise _expect(where, "signal_ssh", _SSH_EXPECTED, argv, ConfigProblem.BAD_FORMAT)
    for i, panel in enumerate(file.panels):
        if panel.expr is None and panel.metric is None:
            raise ConfigError(where=where, key=f"panels[{i}]", problem=ConfigProblem.MISSING,
                              expected="'expr' (PromQL) or 'metric' (gpulens metric name)")
    _check_levels(file.thresholds, where)
    return Config(
        interval_s=file.interval_s, job_pattern=file.job_pattern, history_minutes=file.history_minutes,
        window=file.window, job_key_env=file.job_key_env, panels=file.panels, cache_max_mib=file.cache.max_mib,
        cache_max_age_days=file.cache.max_age_days, thresholds=file.thresholds,
        prometheus=_access(file.prometheus, where), signal_ssh=file.signal_ssh, source_path=where,
        warnings=_unknown(data, _schema(), where, "") + notes,
    )


def _check_levels(t: Thresholds, where: str) -> None:
    """Each warning level at most its critical one."""
    for kind in ("temp", "mem", "power"):
        warn, crit = [k for k in THRESHOLD_KEYS if k.startswith(f"{kind}_")]
        if getattr(t, warn) > getattr(t, crit):
            expected = f"at most thresholds.{crit} ({getattr(t, crit):g})"
            raise ConfigError(where=where, key=f"thresholds.{warn}", expected=expected, got=getattr(t, warn),
                              problem=ConfigProblem.OUT_OF_RANGE,
                              detail=f"expected {expected}, got {getattr(t, warn):g}")


def _access(table: _Prometheus, where: str) -> PrometheusAccess:
    """``[prometheus]``: header names HTTP tokens with one-line values; ``~`` expanded in file names."""
    bad = [k for k, v in table.headers.items() if not _HEADER_NAME.fullmatch(k) or any(c in v for c in "\r\n\0")]
    if bad:
        raise ConfigError(where=where, key="prometheus.headers", expected="a header name with a one-line value",
                          got=bad[0], problem=ConfigProblem.BAD_FORMAT,
                          detail=f"{bad[0]!r} is not a header name with a one-line value")

    def home(path: str | None) -> str | None:
        return None if path is None else os.path.expanduser(path)

    return PrometheusAccess(
        bearer_token_file=home(table.bearer_token_file), username=table.username,
        password_file=home(table.password_file), ca_file=home(table.ca_file), headers=tuple(table.headers.items()),
    )


# ---- msgspec's error in today's words: the key, what the schema says is expected, the value given
_AT = re.compile(r"(.*?)(?: - at `\$(.*)`)?", re.DOTALL)
_STEP = re.compile(r"\.(\w+)|\[(\d+)\]")
_MISSING = re.compile(r"Object missing required field `(\w+)`")


def _schema_error(err: msgspec.ValidationError, data: Mapping[str, Any], where: str) -> ConfigError:
    """``Expected `int` >= 1 - at `$.cache.max_mib``` as ``FILE: key 'cache.max_mib': expected ..., got 0``."""
    m = _AT.fullmatch(str(err))
    assert m is not None  # the pattern matches any text
    steps: list[str | int] = [int(i) if i else name for name, i in _STEP.findall(m[2] or "")]
    missing = _MISSING.fullmatch(m[1])
    if missing is not None:
        steps.append(missing[1])
    steps, expected = _expected(steps)
    got: Any = data
    for step in steps:
        got = got.get(step) if isinstance(got, Mapping) else got[step]
    key = "".join(f"[{s}]" if isinstance(s, int) else f".{s}" for s in steps)
    return _expect(where, key.lstrip("."), expected, got, _problem(m[1], missing is not None))


def _problem(said: str, missing: bool) -> ConfigProblem:
    """msgspec's words as a reason: ``Expected `int`, got `str``` is the wrong type, a broken constraint is out of range."""
    if missing:
        return ConfigProblem.MISSING
    return ConfigProblem.WRONG_TYPE if ", got `" in said else ConfigProblem.OUT_OF_RANGE


def _expected(steps: list[str | int]) -> tuple[list[str | int], str]:
    """The steps down to the key an error names, and that key's description.

    A value in a list or table of plain values (``signal_ssh[1]``) is named by its list, as a whole.
    """
    node: msgspec.inspect.Type = _schema()
    for n, step in enumerate(steps):
        inner, what = _unwrap(node)
        if isinstance(step, str) and isinstance(inner, _TABLES):
            node = next(f.type for f in inner.fields if f.name == step)
        elif (isinstance(step, int) and isinstance(inner, msgspec.inspect.VarTupleType)
              and isinstance(_unwrap(inner.item_type)[0], _TABLES)):
            node = inner.item_type
        else:
            return steps[:n], what
    return steps, _unwrap(node)[1]


def _unwrap(node: msgspec.inspect.Type) -> tuple[msgspec.inspect.Type, str]:
    """A schema node without its Optional and Annotated wrappers, and its ``description``."""
    if isinstance(node, msgspec.inspect.UnionType):
        node = next(t for t in node.types if not isinstance(t, msgspec.inspect.NoneType))
    if isinstance(node, msgspec.inspect.Metadata):
        return node.type, (node.extra_json_schema or {}).get("description", "")
    return node, ""


def _unknown(data: Mapping[str, Any], node: msgspec.inspect.StructType | msgspec.inspect.DataclassType,
             where: str, prefix: str) -> tuple[str, ...]:
    """Warnings for a table's unknown keys, then for those of the tables in it (data the schema accepted)."""
    fields = {f.name: _unwrap(f.type)[0] for f in node.fields}
    out = _unknown_keys(data, set(fields), where, prefix)
    for name, inner in fields.items():
        if isinstance(inner, _TABLES) and name in data:
            out += _unknown(data[name], inner, where, f"{prefix}{name}.")
        elif isinstance(inner, msgspec.inspect.VarTupleType) and isinstance(item := _unwrap(inner.item_type)[0], _TABLES):
            for i, table in enumerate(data.get(name, ())):
                out += _unknown(table, item, where, f"{prefix}{name}[{i}].")
    return out


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


def load_config(path: str | None, flags: ConfigFlags | None = None) -> Config:
    """Read the config file (missing default file = defaults), then apply ``flags``."""
    if path is not None and not path.strip():
        raise ConfigError(where="--config", expected="a file name", got=path, problem=ConfigProblem.MISSING,
                          detail="expected a file name, got an empty string")
    file = Path(path) if path else default_path()
    cfg = parse_config(_read_toml(file), str(file)) if file.exists() or path else Config()
    return cfg if flags is None else _with_flags(cfg, flags)


def _read_toml(file: Path) -> dict[str, Any]:
    try:
        with open(file, "rb") as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)  # bounded: --config /dev/zero must not fill memory
    except OSError as err:
        raise ConfigError(where=str(file), problem=ConfigProblem.UNREADABLE,
                          detail=f"cannot read: {err.strerror}") from err
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(where=str(file), expected=f"at most {MAX_CONFIG_BYTES} bytes", problem=ConfigProblem.TOO_LARGE,
                          detail=f"larger than {MAX_CONFIG_BYTES} bytes; not a gpulens config file")
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(where=str(file), expected="TOML", problem=ConfigProblem.NOT_TOML,
                          detail=f"not valid TOML: {err}") from err


def _with_flags(cfg: Config, flags: ConfigFlags) -> Config:
    if flags.interval is not None:
        if not INTERVAL_S[0] <= flags.interval <= INTERVAL_S[1]:
            expected = f"seconds between {INTERVAL_S[0]:g} and {INTERVAL_S[1]:g}"
            raise ConfigError(where="--interval", expected=expected, got=flags.interval,
                              problem=ConfigProblem.OUT_OF_RANGE, detail=f"expected {expected}, got {flags.interval}")
        cfg = replace(cfg, interval_s=float(flags.interval))
    if flags.pattern is not None:
        notes = _check_pattern(f"--pattern {flags.pattern!r}", None, flags.pattern)
        cfg = replace(cfg, job_pattern=flags.pattern, warnings=cfg.warnings + notes)
    if flags.window is not None:
        if flags.window not in WINDOWS:
            raise ConfigError(where="--window", expected=f"one of {', '.join(WINDOWS)}", got=flags.window,
                              problem=ConfigProblem.OUT_OF_RANGE)
        cfg = replace(cfg, window=flags.window)
    return cfg
