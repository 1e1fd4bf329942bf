"""Flags spelled one way across every command: pid lists and remote hosts.

- ``--pid P[,P...]``, repeatable: ``--pid 1,2 --pid 3`` is (1, 2, 3) in
  every command (argparse ``extend``; a repeat never silently replaces).
- Another host: ``--connect HOST:PORT`` (TCP, ``tls://HOST:PORT`` for TLS)
  or ``--ssh NODE``, as the TUI and ``snapshot`` spell them; the older
  ``--host HOST:PORT|ssh:NODE`` is still accepted (hidden) and means the same.
"""

from __future__ import annotations

import argparse
from typing import Any

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


def add_pid_argument(parser: Any, *, required: bool, help: str) -> None:
    """``--pid P[,P...]`` (repeatable; the lists add up)."""
    parser.add_argument("--pid", type=pid_list, action="extend", required=required, metavar="P[,P...]",
                        help=f"{help} (comma-separated, repeatable)")


def pids_of(args: argparse.Namespace) -> tuple[int, ...]:
    """The pids given, in order, each once; ConfigError for one out of range."""
    from gpulens.core.errors import ConfigError

    pids = tuple(dict.fromkeys(getattr(args, "pid", None) or ()))
    bad = [p for p in pids if p <= 0 or p >= PID_LIMIT]
    if bad:
        raise ConfigError(f"--pid: expected process ids from 1 to {PID_LIMIT - 1}, got {bad[0]}")
    return pids


def add_remote_arguments(parser: Any, *, what: str) -> None:
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
    from gpulens.core.errors import ConfigError

    given = [(flag, value) for flag, value in (
        ("--connect", getattr(args, "remote_connect", None)),
        ("--ssh", getattr(args, "remote_ssh", None)),
        ("--host", getattr(args, "remote_host", None)),
    ) if value is not None]
    if len(given) > 1:
        raise ConfigError(f"{given[0][0]} and {given[1][0]}: give one remote host, not both")
    if not given:
        return None
    flag, value = given[0]
    if not value.strip():
        raise ConfigError(f"{flag}: expected a host, got an empty string")
    if flag == "--ssh":
        if "," in value or "[" in value:
            raise ConfigError(f"--ssh {value!r}: expected one node (this command works on one host)")
        return f"ssh:{value}"
    return str(value)
