"""``gpulens jobs``: list the processes whose process-tree ID matches the job pattern."""

from __future__ import annotations

import argparse
import json
import sys
import time

HELP = "list the jobs on this machine (processes matching the job pattern)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--pattern RE``, ``--json``."""
    parser.add_argument("--pattern", metavar="RE", help="job pattern, a regex on the process-tree ID (default: config job_pattern)")
    parser.add_argument("--json", action="store_true", help="a JSON list of job objects")


def _gpu_memory() -> dict[int, dict[str, int]]:
    """pid -> GPU index -> bytes from NVML; empty without NVML (the collector never raises)."""
    from gpulens.collectors.nvml.collector import NvmlCollector
    from gpulens.collectors.sampler import gpu_memory_by_pid

    collector = NvmlCollector()
    try:
        found: dict[int, dict[str, int]] = gpu_memory_by_pid(collector.read().gpus)
        return found
    finally:
        collector.close()


def run(args: argparse.Namespace) -> int:
    """Scan twice, 0.5 s apart, so CPU % is a real rate; print the jobs."""
    import re

    from gpulens.collectors.jobs import JobScanner
    from gpulens.collectors.slurm_pidinfo import SlurmPidinfo
    from gpulens.collectors.workloads import PodNames
    from gpulens.core.errors import ConfigError, ConfigProblem
    from gpulens.core.sanitize import clean_text
    from gpulens.core.workload import describe
    from gpulens.ipc.serialize import to_dict

    cfg = args.cfg
    try:
        scanner = JobScanner(cfg.job_pattern, cfg.job_key_env, pods=PodNames(), slurm=SlurmPidinfo.detect())
    except re.error as err:  # config.py checks patterns; this guards callers that skip it
        raise ConfigError(where="--pattern", expected="a regular expression", got=cfg.job_pattern,
                          problem=ConfigProblem.BAD_PATTERN, detail=f"expected a regular expression: {err}") from err
    time.sleep(0.5)
    jobs = scanner.scan(_gpu_memory())
    if args.json:
        sys.stdout.write(json.dumps(to_dict(list(jobs))) + "\n")
        return 0
    if not jobs:
        sys.stdout.write(f"no jobs match {cfg.job_pattern!r}\n")
        return 0
    sys.stdout.write(f"{'PID':>7} {'USER':<10} {'CPU%':>6} {'RSS MiB':>8} {'GPU MiB':>8} {'JOB KEY':<20} TREE / COMMAND\n")
    for j in jobs:
        cpu = "n/a" if j.cpu_percent is None else f"{j.cpu_percent:.1f}"
        rss = "n/a" if j.rss_bytes is None else f"{j.rss_bytes / 2**20:.0f}"
        gpu = f"{sum(j.gpu_mem_bytes.values()) / 2**20:.0f}" if j.gpu_mem_bytes else "-"
        sys.stdout.write(
            f"{j.pid:>7} {j.user[:10]:<10} {cpu:>6} {rss:>8} {gpu:>8} {(j.job_key or '-')[:20]:<20} {j.tree_id}\n"
        )
        sys.stdout.write(f"{'':>64}{clean_text(j.cmdline)[:100]}\n")  # a python -c script's newlines: spaces
        if j.workload is not None:
            sys.stdout.write(f"{'':>64}runs in: {describe(j.workload)}\n")
    return 0
