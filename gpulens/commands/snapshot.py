"""``gpulens snapshot``: connect, wait for every host's first sample, print, exit.

Output is safe whatever the agents sent: ``--json`` is strict JSON
(non-finite numbers become null, never ``Infinity``), and text mode prints
every agent-supplied string without control characters or escape sequences.
"""

from __future__ import annotations

import argparse
import json
import math
import queue
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpulens.core.events import Source
    from gpulens.core.model import HostSample

HELP = "print the current state of every host once (for scripts): --json"

SETTLE_S = 1.0
"""Without a list of expected hosts, stop once no new host appeared for this long."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Snapshot flags: the same source flags as the TUI, plus --timeout and --json."""
    g = parser.add_argument_group("sources (any mix; default: this machine)")
    g.add_argument("--connect", metavar="HOST:PORT[,...]",
                   help="agents listening on TCP (tls://HOST:PORT for TLS; PORT defaults to 7789)")
    g.add_argument("--ssh", metavar="HOSTLIST", help="run 'gpulens agent --stdio' over ssh, e.g. node[01-16]")
    g.add_argument(
        "--ssh-command",
        metavar="CMD",
        help="run CMD per host instead of ssh: with {host} in it, {host} is replaced; "
        "without, HOST and 'gpulens agent --stdio' are appended (e.g. 'ssh -J jump')",
    )
    g.add_argument("--slurm-job", metavar="ID", help="the nodes of a Slurm job, over ssh")
    g.add_argument("--prometheus", metavar="URL", help="read the cluster from a Prometheus server")
    g.add_argument("--prom-selector", metavar="SEL", help="extra label selector, e.g. '{cluster=\"a\"}'")
    from gpulens.sources.prometheus.access import add_access_flags

    add_access_flags(g)
    g.add_argument("--token-file", metavar="FILE", help="token for agents that require one")
    g.add_argument("--tls-ca", metavar="PEM", help="CA file to verify tls:// agents")
    parser.add_argument("--timeout", type=float, default=10.0, metavar="S", help="wait at most S seconds (default 10)")
    parser.add_argument("--json", action="store_true", help='print {"hosts": [{"host", "up", "reason", "sample"}]}')
    parser.epilog = "exit status: 0 every host up, 1 a host down or never reached, 2 bad arguments"


@dataclass
class _Host:
    host: str
    address: str = ""
    up: bool = False
    reason: str = ""
    sample: Any = None
    failed: bool = False


class Collector:
    """Folds source events into per-host state (pure: no I/O, no clock)."""

    def __init__(self, expected: list[str] | None) -> None:
        self.expected = expected
        self.hosts: dict[str, _Host] = {}
        self.addr_host: dict[str, str] = {}
        self.addr_fail: dict[str, str] = {}
        self.source_errors: list[str] = []

    def add(self, ev: object) -> bool:
        """Apply one event; True when it revealed a host not seen before."""
        from gpulens.core.events import HostStatusEvent, SampleEvent, SourceStatusEvent

        if isinstance(ev, SampleEvent):
            s = ev.sample
            new = s.host not in self.hosts
            h = self.hosts.setdefault(s.host, _Host(s.host))
            if h.sample is None or s.time >= h.sample.time:
                h.sample = s
            if not h.failed or h.up:
                h.up, h.reason = True, ""
            return new
        if isinstance(ev, HostStatusEvent):
            if ev.address and ev.up:
                self.addr_host[ev.address] = ev.host
                self.addr_fail.pop(ev.address, None)
            elif ev.address and ev.address not in self.addr_host:
                self.addr_fail[ev.address] = ev.reason
                return False
            new = ev.host not in self.hosts
            h = self.hosts.setdefault(ev.host, _Host(ev.host, ev.address))
            h.address = ev.address or h.address
            h.up, h.reason, h.failed = ev.up, ("" if ev.up else ev.reason), not ev.up
            return new
        if isinstance(ev, SourceStatusEvent) and not ev.ok:
            self.source_errors.append(ev.message)
        return False

    def settled(self) -> bool:
        """Every expected address has a sample or has failed."""
        if self.expected is None:
            return False
        for addr in self.expected:
            host = self.addr_host.get(addr)
            if host is not None:
                h = self.hosts.get(host)
                if h is None or (h.sample is None and not h.failed):
                    return False
            elif addr not in self.addr_fail:
                return False
        return True

    def result(self, timeout_s: float) -> list[dict[str, Any]]:
        """The ``hosts`` list of the JSON output."""
        from gpulens.ipc.serialize import sample_to_dict

        out: list[dict[str, Any]] = []
        listed: set[str] = set()
        for addr in self.expected or []:
            host = self.addr_host.get(addr)
            if host is None:
                reason = self.addr_fail.get(addr) or f"not reached within {timeout_s:g} s"
                out.append({"host": addr, "address": addr, "up": False, "reason": reason, "sample": None})
                continue
            listed.add(host)
            out.append(self._entry(self.hosts[host], addr, timeout_s, sample_to_dict))
        for addr in sorted(self.addr_fail):
            if addr not in (self.expected or []) and addr not in self.addr_host:
                # A source without expected_hosts() (e.g. inside MultiSource) still
                # reports agents it never reached, by address.
                out.append({"host": addr, "address": addr, "up": False, "reason": self.addr_fail[addr], "sample": None})
        for name in sorted(self.hosts):
            if name not in listed:
                out.append(self._entry(self.hosts[name], self.hosts[name].address, timeout_s, sample_to_dict))
        return out

    @staticmethod
    def _entry(h: _Host, addr: str, timeout_s: float, to_dict: Callable[[HostSample], object]) -> dict[str, Any]:
        up = h.up and h.sample is not None
        reason = h.reason if not up else ""
        if not up and not reason:
            reason = f"no sample within {timeout_s:g} s"
        entry: dict[str, Any] = {"host": h.host, "up": up, "reason": reason}
        if addr:
            entry["address"] = addr
        entry["sample"] = to_dict(h.sample) if h.sample is not None else None
        return entry


def collect(source: Source, timeout_s: float) -> tuple[list[dict[str, Any]], list[str]]:
    """Run ``source`` until every host answered or ``timeout_s``; (hosts, source errors)."""
    from gpulens.core.errors import GpulensError

    expected_fn = getattr(source, "expected_hosts", None)
    try:
        expected = list(expected_fn()) if callable(expected_fn) else None
    except GpulensError as err:
        # A source that cannot even list its hosts (Prometheus down) was never reached:
        # list it under its address, like an agent that never answered.
        address = str(getattr(source, "address", None) or source.name)
        return [{"host": address, "address": address, "up": False, "reason": str(err), "sample": None}], []
    col = Collector(expected)
    events: queue.Queue[Any] = queue.Queue()
    start = time.monotonic()
    deadline = start + timeout_s
    last_new = start
    source.start(events.put)
    try:
        while True:
            now = time.monotonic()
            if now >= deadline or col.settled():
                break
            if expected is None and col.hosts and any(h.sample for h in col.hosts.values()) and now - last_new >= SETTLE_S:
                break
            try:
                ev = events.get(timeout=min(0.1, max(0.0, deadline - now)))
            except queue.Empty:
                continue
            if col.add(ev):
                last_new = time.monotonic()
    finally:
        source.stop()
    while True:  # events already queued still count
        try:
            col.add(events.get_nowait())
        except queue.Empty:
            break
    return col.result(timeout_s), col.source_errors


def run(args: argparse.Namespace) -> int:
    """Print the snapshot; exit 0 when every host is up, 1 when any is down."""
    from gpulens.core.errors import ConfigError, ConfigProblem
    from gpulens.sources_from_args import build_source

    if not 0 < args.timeout <= 3600:
        raise ConfigError(where="--timeout", expected="seconds in (0, 3600]", got=args.timeout,
                          problem=ConfigProblem.OUT_OF_RANGE)
    _check_companions(args)
    source = build_source(args, args.cfg)
    hosts, errors = collect(source, args.timeout)
    if args.json:
        doc: dict[str, Any] = {"hosts": hosts}
        if errors:
            doc["errors"] = errors
        sys.stdout.write(to_json(doc) + "\n")
    else:
        sys.stdout.write(to_text(hosts, errors))
    return 0 if hosts and all(h["up"] for h in hosts) else 1


def to_json(doc: object) -> str:
    """Strict JSON for ``doc``: NaN and infinities become null (never ``Infinity``)."""
    return json.dumps(_finite(doc), indent=None, separators=(",", ":"), allow_nan=False)


def _finite(value: object) -> object:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def to_text(hosts: list[dict[str, Any]], errors: list[str]) -> str:
    """The text-mode lines; every string from a source is cleaned of control characters."""
    from gpulens.core.sanitize import clean_text

    lines = [f"source: {clean_text(str(e))}" for e in errors]
    for h in hosts:
        s = h["sample"]
        name = clean_text(str(h["host"]))
        if h["up"] and s is not None:
            cpu = s["cpu"]["total_percent"]
            cpu_s = "n/a" if not isinstance(cpu, int | float) or not math.isfinite(cpu) else f"{cpu:.0f}%"
            lines.append(f"{name:<24} up    cpu {cpu_s:>5}  gpus {len(s['gpus'])}")
        else:
            lines.append(f"{name:<24} DOWN  {clean_text(str(h['reason']))}")
    return "".join(line + "\n" for line in lines)


def _check_companions(args: argparse.Namespace) -> None:
    """A flag that only modifies another one must not be silently ignored without it."""
    from gpulens.core.errors import ConfigError, ConfigProblem

    remote = args.ssh is not None or args.slurm_job is not None
    rules = [
        ("--ssh-command", args.ssh_command is not None, remote, "--ssh or --slurm-job"),
        ("--prom-selector", args.prom_selector is not None, args.prometheus is not None, "--prometheus"),
        ("--tls-ca", args.tls_ca is not None, "tls://" in (args.connect or ""), "--connect tls://HOST:PORT"),
        ("--token-file", args.token_file is not None, remote or args.connect is not None, "--connect, --ssh or --slurm-job"),
    ]
    for flag, given, partner, needs in rules:
        if given and not partner:
            raise ConfigError(where=flag, expected=needs, problem=ConfigProblem.CONFLICT, detail=f"only with {needs}")
