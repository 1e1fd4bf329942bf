"""``gpulens`` with no command: the TUI, and the flags that choose its source."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """TUI flags (top level of the parser)."""
    g = parser.add_argument_group("sources (any mix; default: this machine)")
    g.add_argument("--demo", action="store_true", help="a SIMULATED fleet, for trying the UI")
    g.add_argument("--replay", metavar="FILE", help="replay a recording made with --record")
    g.add_argument("--record", metavar="FILE", help="record every sample shown to FILE (msgpack); an existing "
                   "FILE is refused unless --append or --force")
    rec = g.add_mutually_exclusive_group()
    rec.add_argument("--append", action="store_true", help="with --record: continue an existing recording")
    rec.add_argument("--force", action="store_true", help="with --record: replace an existing recording of yours")
    g.add_argument("--connect", metavar="HOST:PORT[,...]", help="agents listening on TCP (tls://HOST:PORT for TLS)")
    g.add_argument("--ssh", metavar="HOSTLIST", help="run 'gpulens agent --stdio' over ssh, e.g. node[01-16]")
    g.add_argument("--ssh-command", metavar="CMD", help="command run per host instead of ssh ({host} is replaced)")
    g.add_argument("--slurm-job", metavar="ID", help="the nodes of a Slurm job, over ssh")
    g.add_argument("--prometheus", metavar="URL", help="read the cluster from a Prometheus server")
    g.add_argument("--prom-selector", metavar="SEL", help="extra label selector, e.g. '{cluster=\"a\"}'")
    from gpulens.sources.prometheus.access import add_access_flags

    add_access_flags(g)
    g.add_argument("--token-file", metavar="FILE", help="token for --connect to non-loopback agents")
    g.add_argument("--tls-ca", metavar="PEM", help="CA certificate that signed the agents' TLS certificates "
                   "(for --connect tls://HOST:PORT)")
    t = parser.add_argument_group("display")
    t.add_argument("--interval", type=float, metavar="S", help="sampling interval in seconds")
    t.add_argument("--pattern", metavar="RE", help="job pattern (regex on the process-tree ID)")
    # choices (not only help text) so the shtab completion script offers the windows
    t.add_argument("--window", choices=("1m", "5m", "15m", "1h"), help="statistics window")
    t.add_argument("--readonly", action="store_true",
                   help="watch only: no action that touches a process (no signals, no py-spy sampling, no traces)")


def run(args: argparse.Namespace) -> int:
    """Build the source from the flags and run the app until the user quits."""
    from gpulens.launch import launch

    code: int = launch(args)
    return code
