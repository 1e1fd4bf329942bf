"""Issue 33 item 3: ``gpulens agent``'s flag checks refuse with the flag and the reason as values."""

from __future__ import annotations

import argparse

import pytest

from gpulens.commands import agent
from gpulens.core.errors import ConfigError, ConfigProblem

DEFAULTS = {"stdio": False, "port_file": None, "tls_cert": None, "tls_key": None, "hostname": None,
            "claim_retry": None, "max_queue": 128, "history_minutes": None, "metrics_port": None,
            "metrics_public": False, "metrics_addr": "127.0.0.1", "listen": None}


def _args(**flags: object) -> argparse.Namespace:
    return argparse.Namespace(**{**DEFAULTS, **flags})


@pytest.mark.parametrize(("flags", "where", "problem"), [
    ({"stdio": True, "port_file": "p"}, "--port-file", ConfigProblem.CONFLICT),
    ({"stdio": True, "tls_cert": "c", "tls_key": "k"}, "--tls-cert, --tls-key", ConfigProblem.CONFLICT),
    ({"hostname": "  "}, "--hostname", ConfigProblem.MISSING),
    ({"claim_retry": 0.0}, "--claim-retry", ConfigProblem.OUT_OF_RANGE),
    ({"max_queue": 0}, "--max-queue", ConfigProblem.OUT_OF_RANGE),
    ({"history_minutes": 1441.0}, "--history-minutes", ConfigProblem.OUT_OF_RANGE),
    ({"metrics_port": 70000}, "--metrics-port", ConfigProblem.OUT_OF_RANGE),
    ({"metrics_port": 9, "metrics_addr": "0.0.0.0"}, "--metrics-addr 0.0.0.0", ConfigProblem.CONFLICT),
])
def test_flag_checks_name_the_flag_and_the_reason(flags: dict[str, object], where: str,
                                                  problem: ConfigProblem) -> None:
    with pytest.raises(ConfigError) as info:
        agent._check_flags(_args(**flags))
    assert (info.value.where, info.value.problem) == (where, problem)


def test_a_value_out_of_range_is_kept_as_given() -> None:
    with pytest.raises(ConfigError) as info:
        agent._check_flags(_args(claim_retry=4000.5))
    assert (info.value.got, info.value.expected) == (4000.5, "seconds in (0, 3600]")


def test_tls_flags_go_together_and_must_be_readable() -> None:
    with pytest.raises(ConfigError) as alone:
        agent._tls_context(_args(tls_cert="c.pem"))
    assert alone.value.problem is ConfigProblem.CONFLICT
    with pytest.raises(ConfigError) as unreadable:
        agent._tls_context(_args(tls_cert="/nonexistent/c.pem", tls_key="/nonexistent/k.pem"))
    assert (unreadable.value.got, unreadable.value.problem) == ("/nonexistent/c.pem", ConfigProblem.UNREADABLE)


def test_a_public_listen_address_needs_a_token() -> None:
    with pytest.raises(ConfigError) as info:
        agent._listen_address(_args(listen="0.0.0.0:0"), None)
    assert (info.value.where, info.value.expected, info.value.problem) == (
        "--listen 0.0.0.0:0", "--token-file", ConfigProblem.CONFLICT)
