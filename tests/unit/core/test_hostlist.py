"""Slurm hostlist expansion (core/hostlist.py) and the target builders."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpulens.core.errors import UNSET, ConfigError, ConfigProblem
from gpulens.core.hostlist import expand
from gpulens.sources.stream.source import parse_connect, slurm_hosts, ssh_target, tcp_target


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("node1", ["node1"]),
        ("node[1-3]", ["node1", "node2", "node3"]),
        ("node[01-03,10]", ["node01", "node02", "node03", "node10"]),
        ("node[08-11]", ["node08", "node09", "node10", "node11"]),
        ("a,b[1-2],c", ["a", "b1", "b2", "c"]),
        ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
        ("gpu[1-2]-ib", ["gpu1-ib", "gpu2-ib"]),
        ("n[1,1,2]", ["n1", "n2"]),
        ("n[001-002].cluster.local", ["n001.cluster.local", "n002.cluster.local"]),
        (" x[9-10] ", ["x9", "x10"]),
        # python-hostlist skips empty names: expand_hostlist("n1,,n2") == ["n1", "n2"]
        ("n1,,n2", ["n1", "n2"]),
        (",n[1-2],", ["n1", "n2"]),
    ],
)
def test_expand(text: str, hosts: list[str]) -> None:
    assert expand(text) == hosts


def test_expand_sixteen_plus_one() -> None:
    hosts = expand("node[01-16,20]")
    assert len(hosts) == 17 and hosts[0] == "node01" and hosts[15] == "node16" and hosts[16] == "node20"


MISSING, BAD_FORMAT, TOO_LARGE = ConfigProblem.MISSING, ConfigProblem.BAD_FORMAT, ConfigProblem.TOO_LARGE


@pytest.mark.parametrize(
    ("text", "problem", "got"),
    [
        ("", MISSING, ""),
        ("n[1-", BAD_FORMAT, "["),  # '[' without ']'
        ("n1-]", BAD_FORMAT, "]"),  # ']' without '['
        ("n[[1]]", BAD_FORMAT, "["),  # nested
        ("n[3-1]", BAD_FORMAT, "3-1"),  # runs backwards
        ("n[a-b]", BAD_FORMAT, "a-b"),  # not N or LO-HI
        ("n[0-99999999999]", TOO_LARGE, UNSET),
        ("a[0-999]b[0-999]", TOO_LARGE, UNSET),
        ("a;rm -rf /", BAD_FORMAT, "a;rm -rf /"),  # characters no host name has
        (",, ,", MISSING, UNSET),  # no host names
        ("$(id)", BAD_FORMAT, "$(id)"),
        ("-oProxyCommand=x", BAD_FORMAT, "-oProxyCommand=x"),
        ("-oProxyCommand", BAD_FORMAT, "-oProxyCommand"),  # an ssh option, not a host name
    ],
)
def test_expand_refuses(text: str, problem: ConfigProblem, got: object) -> None:
    with pytest.raises(ConfigError) as info:
        expand(text)
    assert (info.value.problem, info.value.got) == (problem, got)


def test_a_hostlist_error_names_the_expression_and_the_part() -> None:
    """The one sentence of this area kept: what a user reads for a bad range."""
    with pytest.raises(ConfigError) as info:
        expand("n[1-3],m[5-x]")
    assert str(info.value) == "hostlist 'm[5-x]': bad range '5-x' (expected N or LO-HI)"


def test_exactly_the_limit_is_allowed() -> None:
    assert len(expand("n[1-100000]")) == 100_000


def test_connect_parsing() -> None:
    a, b, c = parse_connect("node1:7000,[::1]:7001,tls://h.example:9")
    assert (a.host, a.port, a.address, a.tls) == ("node1", 7000, "node1:7000", False)
    assert (b.host, b.port, b.address) == ("::1", 7001, "[::1]:7001")
    assert (c.host, c.tls, c.address) == ("h.example", True, "tls://h.example:9")
    assert tcp_target("node2").port == 7789
    for bad in ("node:x", "node:0", ":5"):
        with pytest.raises(ConfigError):
            tcp_target(bad)


def test_ssh_argv() -> None:
    t = ssh_target("node01")
    assert t.argv[0] == "ssh" and t.argv[-4:] == ("node01", "gpulens", "agent", "--stdio")
    t = ssh_target("node01", "sh -c 'gpulens agent --stdio --hostname {host}'")
    assert t.argv == ("sh", "-c", "gpulens agent --stdio --hostname node01")
    t = ssh_target("node01", "ssh -p 2222")
    assert t.argv == ("ssh", "-p", "2222", "node01", "gpulens", "agent", "--stdio")
    with pytest.raises(ConfigError) as err:
        ssh_target("n", "sh -c 'unterminated")
    assert (err.value.where, err.value.problem) == ("--ssh-command", ConfigProblem.BAD_FORMAT)


def test_slurm_job_uses_squeue_and_expands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    squeue = tmp_path / "squeue"
    squeue.write_text('#!/bin/sh\n[ "$3" = 42 ] && echo "gpu[01-03]" && exit 0\necho "Invalid job id" >&2; exit 1\n')
    squeue.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert slurm_hosts("42") == ["gpu01", "gpu02", "gpu03"]
    with pytest.raises(ConfigError) as err:
        slurm_hosts("7")
    assert (err.value.where, err.value.problem) == ("--slurm-job 7", ConfigProblem.UNAVAILABLE)
    assert err.value.detail == "squeue: Invalid job id"  # squeue's own words reach the user
    with pytest.raises(ConfigError) as err:
        slurm_hosts("1;reboot")
    assert (err.value.expected, err.value.got, err.value.problem) == ("a job id", "1;reboot", ConfigProblem.BAD_FORMAT)


def test_slurm_missing_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ConfigError) as err:
        slurm_hosts("42")
    assert (err.value.expected, err.value.problem) == ("Slurm's 'squeue' on PATH", ConfigProblem.UNAVAILABLE)
