"""``gpulens trace``: take an on-demand PyTorch trace of running processes (like ``dyno gputrace``).

Works without an agent: it serves the Kineto endpoint itself while it
waits. The target must run with ``KINETO_USE_DAEMON=1`` (and, if it sets
``KINETO_IPC_SOCKET_DIR``, the same directory here via ``--ipc-socket-dir``).
"""

from __future__ import annotations

import argparse

HELP = "take an on-demand PyTorch profiler trace of running processes (Kineto, no restart)"


def _pids(text: str) -> tuple[int, ...]:
    try:
        pids = tuple(int(p) for p in text.split(",") if p.strip())
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected P[,P...] (process ids), got {text!r}") from err
    if not pids or any(p <= 0 for p in pids):
        raise argparse.ArgumentTypeError(f"expected positive process ids, got {text!r}")
    return pids


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``gpulens trace`` (parity with ``dyno gputrace``)."""
    parser.epilog = (
        "The target must run with KINETO_USE_DAEMON=1. It polls every "
        "ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS (5 s by default; put "
        "ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS=1 in a file named by KINETO_CONFIG for snappy traces), "
        "so a trace starts up to one poll interval after the request. Prints 'PID PATH' per traced "
        "process; exit 1 when a process could not be traced."
    )
    who = parser.add_mutually_exclusive_group(required=True)
    who.add_argument("--pid", type=_pids, metavar="P[,P...]", help="process ids to trace")
    who.add_argument("--job", type=int, metavar="KEY", help="trace every polling process of this job id (SLURM_JOB_ID)")
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--duration-ms", type=int, metavar="N", help="trace for N milliseconds (default 500)")
    how.add_argument("--iterations", type=int, metavar="N", help="trace N optimizer steps")
    parser.add_argument("--record-shapes", action="store_true", help="record input shapes")
    parser.add_argument("--with-stack", action="store_true", help="record Python stacks")
    parser.add_argument("--with-flops", action="store_true", help="estimate FLOPs")
    parser.add_argument("--with-modules", action="store_true", help="record nn.Module hierarchy")
    parser.add_argument("--profile-memory", action="store_true", help="record memory events")
    parser.add_argument("--warmup-s", type=float, default=0.0, metavar="S",
                        help="Kineto warm-up before tracing (default 0; GPU programs may want 1-2)")
    parser.add_argument("--ipc-socket-dir", metavar="DIR",
                        help="serve DIR/dynolog (default: $KINETO_IPC_SOCKET_DIR, else the abstract name)")
    parser.add_argument("--timeout", type=float, default=60.0, metavar="S",
                        help="give up S seconds after the config is handed over (default 60)")
    parser.add_argument("-o", "--output", metavar="FILE", help="copy the trace to FILE (gzip if it ends in .gz)")


def _say(msg: str) -> None:
    import sys

    print(f"gpulens trace: {msg}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    """Serve the endpoint, request the trace, wait, report (and copy) the files."""
    import time

    from gpulens.ipc.errors import NotTraceable
    from gpulens.ipc.service import LocalTraceService
    from gpulens.ipc.trace import TraceJob, TraceRequest

    req = TraceRequest(
        pids=args.pid or (),
        job_id=args.job,
        duration_ms=None if args.iterations is not None else (args.duration_ms or 500),
        iterations=args.iterations,
        record_shapes=args.record_shapes,
        with_stack=args.with_stack,
        with_flops=args.with_flops,
        with_modules=args.with_modules,
        profile_memory=args.profile_memory,
        warmup_s=args.warmup_s,
        timeout_s=args.timeout,
    )
    try:
        req.validate()
    except ValueError as err:
        _say(str(err))
        return 2
    svc = LocalTraceService(socket_dir=args.ipc_socket_dir)
    svc.start()  # EndpointBusy -> one clear line from the CLI's error reporter
    try:
        _say(f"serving the Kineto endpoint at {svc.address}")
        if req.job_id is not None:
            _say(f"waiting up to 15 s for processes of job {req.job_id} to poll")
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and not any(p.job_id == req.job_id for p in svc.processes()):
                time.sleep(0.1)
            time.sleep(1.0)  # let the other ranks of the job poll too

        def show(job: TraceJob) -> None:
            _say(f"{job.state.value}: {job.detail}")

        svc.add_listener(show)
        fut = svc.request_trace(req)
        try:
            result = fut.result(timeout=req.timeout_s + 60)
        except NotTraceable as err:
            _say(f"not traceable: {err}")
            return 1
        for pid, path in sorted(result.files.items()):
            final = _copy(path, args.output, pid, len(result.files)) if args.output else path
            print(f"{pid} {final}", flush=True)
        for pid, why in sorted(result.missing.items()):
            _say(f"process {pid}: {why}")
        return 0 if not result.missing else 1
    finally:
        svc.stop()


def _copy(src: str, dest: str, pid: int, count: int) -> str:
    """Copy a trace to ``dest`` (``_<pid>`` inserted when several), gzip when it ends in .gz."""
    from pathlib import Path

    from gpulens.collectors.trace.export import export_trace

    out = Path(dest)
    if count > 1:
        suffix = "".join(out.suffixes)
        out = out.with_name(out.name[: len(out.name) - len(suffix)] + f"_{pid}" + suffix)
    return str(export_trace(src, out))
