"""``gpulens gpumem``: GPU memory of running processes by Python stack, with no change to their code (eBPF).

Attaches uprobes to the CUDA driver's and runtime's allocation and free calls
in the processes named (``--pid`` or ``--job``), for ``--seconds`` (default
until Ctrl-C), and writes the flame graph of **live** bytes (allocated while
tracing and not freed: the default) or of **total** bytes allocated while
tracing (``--total``): folded stacks with integer bytes, or speedscope JSON
when ``-o`` ends in ``.speedscope.json``; without ``-o`` the flame graph
opens. Memory allocated before the probes attached is not attributed; where
NVML reads the process's GPU memory it is shown as one ``before attach``
frame, so the live total adds up to what the GPU reports.
"""

from __future__ import annotations

import argparse
import sys
import time

HELP = "GPU memory of running processes by Python stack (eBPF uprobes on the CUDA allocation calls; root)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--pid``/``--job``, ``--seconds``, ``--live``/``--total``, ``-o``, ``--native``."""
    who = parser.add_mutually_exclusive_group(required=True)
    who.add_argument("--pid", metavar="PID[,PID…]", help="processes to trace")
    who.add_argument("--job", metavar="KEY", help="the processes of this job (its job key or a pid in it)")
    parser.add_argument("--seconds", type=float, metavar="S", help="trace this long (default: until Ctrl-C)")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--live", action="store_true", help="bytes allocated while tracing and still held (default)")
    what.add_argument("--total", action="store_true", help="bytes allocated while tracing, freed or not")
    parser.add_argument("-o", "--output", metavar="FILE", help="write folded stacks (integer bytes), speedscope "
                        "JSON for *.speedscope.json, pprof for *.pb.gz; default: open the flame graph")
    parser.add_argument("--native", action="store_true", help="also the native frames between Python and the CUDA "
                        "call (frame pointers; symbols from the libraries' ELF files)")


def _pid_list(text: str) -> tuple[int, ...]:
    """``--pid P[,P...]``: the positive pids given; ConfigError (BAD_FORMAT, MISSING, OUT_OF_RANGE) otherwise."""
    from gpulens.core.errors import ConfigError, ConfigProblem

    where = f"--pid {text!r}"
    try:
        pids = tuple(int(p) for p in text.split(",") if p.strip())
    except ValueError:
        raise ConfigError(where=where, expected="pids separated by commas", got=text,
                          problem=ConfigProblem.BAD_FORMAT, detail="expected pids separated by commas") from None
    if not pids or any(p <= 0 for p in pids):
        raise ConfigError(where=where, expected="positive pids", got=text,
                          problem=ConfigProblem.OUT_OF_RANGE if pids else ConfigProblem.MISSING,
                          detail="expected positive pids")
    return pids


def _pids(args: argparse.Namespace) -> tuple[int, ...]:
    from gpulens.core.errors import ConfigError, ConfigProblem

    if args.pid is not None:
        return _pid_list(args.pid)
    from gpulens.collectors.jobs import JobScanner

    cfg = args.cfg
    jobs = JobScanner(cfg.job_pattern, cfg.job_key_env).scan()
    key = args.job
    found = tuple(j.pid for j in jobs if j.job_key == key or str(j.pid) == key)
    if len(found) == 1 and str(found[0]) == key:  # a pid: its whole job
        job = next(j for j in jobs if j.pid == found[0])
        found = tuple(j.pid for j in jobs if job.job_key is not None and j.job_key == job.job_key) or found
    if not found:
        raise ConfigError(where=f"--job {key!r}", expected="a job key or pid", got=key, problem=ConfigProblem.NOT_FOUND,
                          detail="no job process with that key or pid here (gpulens jobs lists them)")
    return found


def run(args: argparse.Namespace) -> int:
    """Trace, then write or show the flame graph."""
    from gpulens.analysis.flame.model import build_from_stacks
    from gpulens.collectors.gpumem.libbpf import BpfError
    from gpulens.collectors.gpumem.tracer import GpuMemTracer, why_not
    from gpulens.sources.flame_export import (
        check_writable,
        export_folded,
        export_pprof,
        export_speedscope,
    )

    pids = _pids(args)
    if args.output:
        check_writable(args.output, "-o")
    why = why_not()
    if why is not None:
        print(f"gpulens gpumem: {why}", file=sys.stderr)
        return 1
    try:
        tracer = GpuMemTracer(pids, native=args.native)
    except BpfError as err:
        print(f"gpulens gpumem: {err}", file=sys.stderr)
        return 1
    try:
        for pid, reason in tracer.python.items():
            if reason is not None:
                print(f"pid {pid}: Python frames not read: {reason}", file=sys.stderr)
        print(f"tracing GPU memory of {','.join(map(str, pids))}"
              + (f" for {args.seconds:g} s" if args.seconds else " until Ctrl-C"), file=sys.stderr)
        end = time.monotonic() + args.seconds if args.seconds else float("inf")
        try:
            while time.monotonic() < end:
                tracer.poll(min(200, max(1, int((end - time.monotonic()) * 1000))))
        except KeyboardInterrupt:
            pass
        tracer.poll(0)
        live, total = tracer.snapshot()
        lost, unknown = tracer.lost, tracer.allocations.unknown_frees
    finally:
        tracer.close()
    stacks = total if args.total else live
    kind = "allocated while tracing" if args.total else "live (allocated while tracing, not freed)"
    profile = build_from_stacks(((list(s), float(n)) for s, n in stacks.items()), "bytes",
                                f"GPU memory {kind}, pid {','.join(map(str, pids))}")
    if lost:
        print(f"warning: {lost} events were lost (the ring buffer was full): the figures are low", file=sys.stderr)
    if unknown:
        print(f"{unknown} frees of memory allocated before the probes attached (not counted)", file=sys.stderr)
    if args.output:
        if args.output.endswith((".pb.gz", ".pprof")):
            labels = {"pid": ",".join(map(str, pids)), "kind": "live" if not args.total else "allocated"}
            print(export_pprof(profile, args.output, labels=labels).message(), file=sys.stderr)
            return 0
        writer = export_speedscope if args.output.endswith(".speedscope.json") else export_folded
        print(writer(profile, args.output).message(), file=sys.stderr)
        return 0
    if not stacks:
        print(f"no GPU memory {kind} by these processes", file=sys.stderr)
        return 0
    from gpulens.tui.screens.flame import run_flame_app

    return run_flame_app(profile)
