"""``gpulens sample``: read this machine and print samples (JSON lines with --json)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from gpulens.core.sanitize import clean_text

HELP = "print samples of this machine (one JSON object per line with --json)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--json``, ``--count N``, ``--interval S``."""
    parser.add_argument("--json", action="store_true", help="one JSON object per line (docs/sample-schema.md)")
    parser.add_argument("--count", type=int, default=1, metavar="N", help="samples to print (0: until Ctrl-C; default 1)")
    parser.add_argument("--interval", type=float, metavar="S", help="seconds between samples (default: config interval_s)")


def _rate(v: float | None, unit: str = "B/s") -> str:
    if v is None:
        return "n/a"
    for prefix in ("", "K", "M", "G", "T"):
        if abs(v) < 1000 or prefix == "T":
            return f"{v:.1f} {prefix}{unit}"
        v /= 1000
    return "n/a"  # pragma: no cover


def _bytes(v: int | None) -> str:
    return "n/a" if v is None else f"{v / 2**30:.1f} GiB"


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1f}%"


def summary(d: dict[str, Any]) -> str:
    """A few human-readable lines from a sample dict (sample_to_dict's form)."""
    cpu, mem, net, sto = d["cpu"], d["memory"], d["network"], d["storage"]
    cores = " ".join(f"{p:.0f}" for p in cpu["per_core_percent"])
    lines = [
        f"{d['host']}  {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(d['time']))}",
        f"  cpu     {_pct(cpu['total_percent'])}  cores [{cores}]",
        f"  memory  {_bytes(mem['used_bytes'])} / {_bytes(mem['total_bytes'])}",
        f"  network rx {_rate(net['rx_bytes_per_s'])}  tx {_rate(net['tx_bytes_per_s'])}",
        f"  storage read {_rate(sto['read_bytes_per_s'])}  write {_rate(sto['write_bytes_per_s'])}",
        f"  cache   L2 {_ratio(d['cache']['l2_hit_ratio'])}  L3 {_ratio(d['cache']['l3_hit_ratio'])}"
        f"  mem bw {_rate(d['cache']['mem_bandwidth_bytes_per_s'])}",
    ]
    for port in d["infiniband"]:
        lines.append(
            f"  ib {port['device']}/{port['port']} {port['state']} "
            f"rx {_rate(port['rx_bytes_per_s'])} tx {_rate(port['tx_bytes_per_s'])}"
        )
    for g in d["gpus"]:
        used, total = g["mem_used_bytes"], g["mem_total_bytes"]
        lines.append(
            f"  gpu{g['index']} {g['name']}  util {_pct(g['utilization_percent'])}  "
            f"mem {_bytes(used)} / {_bytes(total)}  power {_rate(g['power_w'], 'W')}"
        )
    lines.append(f"  jobs    {len(d['jobs'])}")
    for j in d["jobs"][:10]:
        lines.append(f"    {j['pid']:>7} {j['user']:<10} {_pct(j['cpu_percent']):>7}  {clean_text(j['cmdline'])[:60]}")
    for key, reason in sorted(d["unavailable"].items()):
        lines.append(f"  n/a {key}: {reason}")
    return "\n".join(lines)


def _ratio(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:.1f}%"


def run(args: argparse.Namespace) -> int:
    """Print ``--count`` samples, ``interval_s`` apart; 2 for a bad argument."""
    from gpulens.collectors.sampler import Sampler
    from gpulens.core.errors import ConfigError, ConfigProblem
    from gpulens.ipc.serialize import sample_to_dict

    if args.count < 0:
        raise ConfigError(where="--count", expected="0 or more samples", got=args.count, problem=ConfigProblem.OUT_OF_RANGE)
    cfg = args.cfg
    sampler = Sampler(job_pattern=cfg.job_pattern, job_key_env=cfg.job_key_env)
    try:
        printed = 0
        next_at = time.monotonic() + cfg.interval_s  # the sampler primed its counters just now
        while args.count == 0 or printed < args.count:
            time.sleep(max(0.0, next_at - time.monotonic()))
            next_at = max(next_at + cfg.interval_s, time.monotonic())
            data = sample_to_dict(sampler.sample())
            if args.json:
                sys.stdout.write(json.dumps(data) + "\n")
            else:
                sys.stdout.write(summary(data) + "\n")
            sys.stdout.flush()
            printed += 1
    except BrokenPipeError:
        return 0
    finally:
        sampler.close()
    return 0
