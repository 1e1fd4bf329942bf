"""The commands turn the parsed flags into the typed options core and sources take:
every field of those options is filled from the real parser's flag of that name."""

from __future__ import annotations

import argparse

import pytest

from gpulens.cli import build_parser
from gpulens.commands._args import flags_of, limits_from_args
from gpulens.core.config import ConfigFlags
from gpulens.core.errors import ConfigError, ConfigProblem
from gpulens.core.limits import InputLimits, MiB
from gpulens.sources.prometheus.access import PromFlags
from gpulens.sources.stream.source import StreamFlags
from gpulens.sources_from_args import prom_flags


def _command(name: str) -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser = sub.choices[name]
    assert isinstance(parser, argparse.ArgumentParser)
    return parser


def test_the_tui_flags_fill_every_field() -> None:
    args = build_parser().parse_args([
        "--connect", "h:1", "--ssh", "n[1-2]", "--slurm-job", "7", "--ssh-command", "c {host}", "--token-file", "t",
        "--tls-ca", "ca.pem", "--interval", "2", "--pattern", "p$", "--window", "1h",
        "--prometheus", "http://p:9090", "--prom-bearer-token-file", "b", "--prom-user", "u",
        "--prom-password-file", "pw", "--prom-ca-file", "pc", "--prom-header", "A: 1", "--prom-header", "B: 2",
    ])
    assert flags_of(StreamFlags, args) == StreamFlags(
        connect="h:1", ssh="n[1-2]", slurm_job="7", ssh_command="c {host}", token_file="t", tls_ca="ca.pem")
    assert flags_of(ConfigFlags, args) == ConfigFlags(interval=2.0, pattern="p$", window="1h")
    assert prom_flags(args) == PromFlags(bearer_token_file="b", user="u", password_file="pw", ca_file="pc",
                                         headers=("A: 1", "B: 2"))


def test_a_command_without_a_flag_gives_none() -> None:
    args = build_parser().parse_args(["jobs", "--pattern", "x$"])
    assert flags_of(ConfigFlags, args) == ConfigFlags(pattern="x$")
    assert flags_of(StreamFlags, build_parser().parse_args([])) == StreamFlags()
    assert prom_flags(build_parser().parse_args([])) == PromFlags()


@pytest.mark.parametrize("command", ["flame", "analyze"])
def test_input_limits_from_the_flags(command: str) -> None:
    parser = _command(command)
    args = parser.parse_args(["f", "--max-mib", "8", "--max-ratio", "3", "--max-events", "9"])
    assert limits_from_args(args) == InputLimits(max_bytes=8 * MiB, max_ratio=3.0, max_events=9)
    for flag, value in (("--max-mib", "0"), ("--max-ratio", "nan"), ("--max-events", "0")):
        with pytest.raises(ConfigError) as info:
            limits_from_args(parser.parse_args(["f", flag, value]))
        assert (info.value.where, info.value.problem) == (flag, ConfigProblem.OUT_OF_RANGE)
        assert str(info.value.got) == str(float(value) if flag == "--max-ratio" else int(value))
