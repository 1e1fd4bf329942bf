"""Flags spelled one way across every command: pid lists, remote hosts, input limits.

The layers below take typed options, never the parsed command line: the
commands build them here (:func:`flags_of`, :func:`limits_from_args`).

- ``--pid P[,P...]``, repeatable: ``--pid 1,2 --pid 3`` is (1, 2, 3) in
  every command (argparse ``extend``; a repeat never silently replaces).
- Another host: ``--connect HOST:PORT`` (TCP, ``tls://HOST:PORT`` for TLS)
  or ``--ssh NODE``, as the TUI and ``snapshot`` spell them; the older
  ``--host HOST:PORT|ssh:NODE`` is still accepted (hidden) and means the same.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    from gpulens.core.limits import InputLimits

Flags = TypeVar("Flags", bound="DataclassInstance")

ArgumentsOf = argparse.ArgumentParser | argparse._ArgumentGroup
"""Where flags are added: a parser, or one of its (mutually exclusive) groups."""

PID_LIMIT = 1 << 22
"""Linux's largest pid_max, plus one."""


def pid_list(text: str) -> list[int]:
    """argparse type: ``P[,P...]`` of positive process ids."""
    parts = [p.strip() for p in text.split(",")]
    if not parts or any(not p for p in parts):
        raise argparse.ArgumentTypeError(f"expected P[,P...] (process ids), got {text!r}")
    try:
        pids = [int(p) for p in parts]
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected P[,P...] (process ids), got {text!r}") from err
    return pids  # the range is checked by pids_of, as one line (not a usage screen)


def add_pid_argument(parser: ArgumentsOf, *, required: bool, help: str) -> None:
    """``--pid P[,P...]`` (repeatable; the lists add up)."""
    parser.add_argument("--pid", type=pid_list, action="extend", required=required, metavar="P[,P...]",
                        help=f"{help} (comma-separated, repeatable)")


def pids_of(args: argparse.Namespace) -> tuple[int, ...]:
    """The pids given, in order, each once; ConfigError for one out of range."""
    from gpulens.core.errors import ConfigError, ConfigProblem

    pids = tuple(dict.fromkeys(getattr(args, "pid", None) or ()))
    bad = [p for p in pids if p <= 0 or p >= PID_LIMIT]
    if bad:
        raise ConfigError(where="--pid", expected=f"process ids from 1 to {PID_LIMIT - 1}", got=bad[0],
                          problem=ConfigProblem.OUT_OF_RANGE)
    return pids


def add_remote_arguments(parser: ArgumentsOf, *, what: str) -> None:
    """``--connect HOST:PORT`` / ``--ssh NODE`` (and the hidden ``--host`` alias), with their auth."""
    parser.add_argument("--connect", metavar="HOST:PORT", dest="remote_connect",
                        help=f"{what} on that host through its gpulens agent on TCP (tls://HOST:PORT for TLS)")
    parser.add_argument("--ssh", metavar="NODE", dest="remote_ssh",
                        help=f"{what} on NODE through 'gpulens agent --stdio' over ssh")
    parser.add_argument("--host", metavar="HOST:PORT|ssh:NODE", dest="remote_host", help=argparse.SUPPRESS)
    parser.add_argument("--token-file", metavar="FILE", help="token for a non-loopback TCP agent")
    parser.add_argument("--tls-ca", metavar="PEM", help="CA file to verify a tls:// agent")
    parser.add_argument("--ssh-command", metavar="CMD", help="command run instead of ssh for --ssh ({host} is replaced)")


def remote_target(args: argparse.Namespace) -> str | None:
    """The one remote host asked for, as ``HOST:PORT`` or ``ssh:NODE``; None for this machine."""
    from gpulens.core.errors import ConfigError, ConfigProblem

    given = [(flag, value) for flag, value in (
        ("--connect", getattr(args, "remote_connect", None)),
        ("--ssh", getattr(args, "remote_ssh", None)),
        ("--host", getattr(args, "remote_host", None)),
    ) if value is not None]
    if len(given) > 1:
        raise ConfigError(where=f"{given[0][0]} and {given[1][0]}", expected="one remote host",
                          problem=ConfigProblem.CONFLICT, detail="give one remote host, not both")
    if not given:
        return None
    flag, value = given[0]
    if not value.strip():
        raise ConfigError(where=flag, expected="a host", got=value, problem=ConfigProblem.MISSING,
                          detail="expected a host, got an empty string")
    if flag == "--ssh":
        if "," in value or "[" in value:
            raise ConfigError(where=f"--ssh {value!r}", expected="one node", got=value, problem=ConfigProblem.BAD_FORMAT,
                              detail="expected one node (this command works on one host)")
        return f"ssh:{value}"
    return str(value)


def add_limit_arguments(parser: argparse.ArgumentParser, default_mib: int) -> None:
    """``--max-mib``, ``--max-ratio`` and ``--max-events`` for a command that reads files."""
    from gpulens.core.limits import DEFAULT_MAX_EVENTS, DEFAULT_MAX_RATIO

    parser.add_argument("--max-mib", type=int, default=default_mib, metavar="MIB",
                        help=f"refuse inputs larger than this uncompressed (default {default_mib})")
    parser.add_argument("--max-ratio", type=float, default=DEFAULT_MAX_RATIO, metavar="X",
                        help="refuse gzip files that unpack to more than X times their size "
                             f"(default {DEFAULT_MAX_RATIO:g}; real traces unpack 7-30x)")
    parser.add_argument("--max-events", type=int, default=DEFAULT_MAX_EVENTS, metavar="N",
                        help="refuse inputs of more than N events, JSON objects, lines or snapshot "
                             f"containers (default {DEFAULT_MAX_EVENTS:,})")


def limits_from_args(args: argparse.Namespace) -> InputLimits:
    """The limits ``--max-mib``, ``--max-ratio`` and ``--max-events`` ask for; ConfigError for one below 1."""
    from gpulens.core.limits import checked_limits

    return checked_limits(args.max_mib, args.max_ratio, args.max_events)


def flags_of(cls: type[Flags], args: argparse.Namespace) -> Flags:
    """``cls``, a dataclass of flags, from the parsed flags of the same names (None where a command has none)."""
    return cls(**{f.name: getattr(args, f.name, None) for f in dataclasses.fields(cls)})
