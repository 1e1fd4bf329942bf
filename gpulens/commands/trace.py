"""``gpulens trace``: take an on-demand PyTorch trace of running processes (like ``dyno gputrace``).

The command line: the flags, the request they make (checked by
``TraceRequest.validate``, a refusal naming its flag) and the way it goes.
One gpulens per host owns the Kineto endpoint: on this host the command owns
it while it runs, or goes through the gpulens holding it
(``gpulens.commands.trace_here``); ``--connect HOST:PORT`` / ``--ssh NODE``
trace on another host through its agent (``gpulens.commands.trace_agent``);
``--job KEY [--hosts A,B]`` traces every process of a job on every host at
one common start time (``gpulens.commands.trace_job``). Progress goes to
stderr, ``PID PATH`` to stdout, a copy to ``-o``. The target must run with
``KINETO_USE_DAEMON=1`` (and, if it sets ``KINETO_IPC_SOCKET_DIR``, the same
directory here via ``--ipc-socket-dir``, or in the agent's environment).
"""
from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from gpulens.commands._args import add_pid_argument, add_remote_arguments, pids_of, remote_target
from gpulens.commands.trace_common import (
    CHILDREN_WAIT_S,
    EXIT_FAILED,
    EXIT_USAGE,
    JOB_WAIT_S,
    MAX_WAIT_S,
    say,
)

if TYPE_CHECKING:
    from gpulens.core.errors import ConfigError
    from gpulens.ipc.kineto.requests import BadTraceRequest

HELP = "take an on-demand PyTorch profiler trace of running processes (Kineto, no restart)"

EPILOG = """\
The target must run with KINETO_USE_DAEMON=1. It polls every
ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS (5 s by default; put
ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS=1 in a file named by KINETO_CONFIG for
snappy traces). The config goes at its next poll (up to one poll interval);
the window opens about a second later (Kineto's profiler loop ticks once a
second; for a process traced before, just after its next tick). At the 1 s
poll the window opens about 1.3 s after the request (median) and a 500 ms
trace's file lands about 1.6 s after that (docs/tracing.md). --job and
several pids start together, a poll interval + 1.35 s ahead.

One trace runs per process at a time: a second one waits ("queued") until
the first file has landed; a --job rank still busy at the common start is
not traced (and named), the others are. --wait bounds the wait for
processes that have not polled yet: --job's ranks (default 8 s),
--children's (default 30 s). A program must not return while its trace
runs: torch 2.13 then crashes (SIGSEGV); gpulens says how a process ended
during its trace where it can see it. --iterations counts optimizer.step()
calls; a program that has not stepped yet gets Kineto's 500 ms duration
trace instead, and gpulens says so.

Prints 'PID PATH' per traced process (the local copy's path for a trace
taken through an agent). When another gpulens on this host (an agent, a
TUI) holds the Kineto name, the trace goes through it automatically; while
this command holds it, it serves the others.

exit status:
  0  every process asked for was traced
  1  a process (or host) could not be traced: not polling, not yours,
     busy at a --job's common start, exited or crashed during the trace,
     timed out, refused by the agent, or the Kineto name is held by
     something gpulens will not use
  2  bad arguments or configuration (one line on stderr)
  130 interrupted (Ctrl-C), 143 terminated
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``gpulens trace`` (parity with ``dyno gputrace``; ``--job`` with ``unitrace.py``)."""
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    who = parser.add_mutually_exclusive_group(required=True)
    add_pid_argument(who, required=False, help="process ids to trace")
    who.add_argument("--job", metavar="KEY",
                     help="trace every polling process of this job on every host: a SLURM_JOB_ID or a "
                          "torchrun run id (TORCHELASTIC_RUN_ID), all ranks from one common start time")
    parser.add_argument("--children", action="store_true",
                        help="trace the polling descendants of each --pid instead (a torchrun parent, a wrapper)")
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
    parser.add_argument("--start-in", type=float, metavar="S",
                        help="--job: start every rank S seconds from now (default: the longest poll interval + 1.35)")
    parser.add_argument("--wait", type=_wait_s, metavar="S",
                        help=f"wait up to S seconds for the processes to start polling: a late-starting job's ranks "
                             f"(--job, default {JOB_WAIT_S:g}) or a launcher's (--children, default "
                             f"{CHILDREN_WAIT_S:g})")
    parser.add_argument("-o", "--output", metavar="FILE|DIR",
                        help="copy the trace to FILE (gzip if it ends in .gz; _PID inserted for several); "
                             "--job: into DIR, one file per rank")
    remote = parser.add_argument_group("another host (through its gpulens agent)")
    add_remote_arguments(remote, what="trace")
    remote.add_argument("--hosts", metavar="A,B", type=_host_list, action="extend",
                        help="--job: the hosts of the job (HOST:PORT or ssh:NODE each; default: this host)")


def _wait_s(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= MAX_WAIT_S:
        raise argparse.ArgumentTypeError(f"expected seconds in 0..{MAX_WAIT_S:g}, got {text!r}")
    return value


def _host_list(text: str) -> list[str]:
    hosts = [h.strip() for h in text.split(",")]
    if not hosts or any(not h for h in hosts):
        raise argparse.ArgumentTypeError(f"expected HOST:PORT|ssh:NODE[,...], got {text!r}")
    return hosts


def run(args: argparse.Namespace) -> int:
    """Trace and print; the exit status documented in ``--help``."""
    from gpulens.core.errors import ConfigError, GpulensError

    try:
        return _run(args)
    except ConfigError as err:
        say(str(err))
        return EXIT_USAGE
    except GpulensError as err:  # busy endpoint, unreachable agent, refused control socket: a failure
        say(f"{err.title}: {err}" if getattr(err, "title", "") else str(err))
        return EXIT_FAILED


_REQUEST_FLAGS = {"pids": "--pid", "duration_ms": "--duration-ms", "iterations": "--iterations",
                  "warmup_s": "--warmup-s", "timeout_s": "--timeout"}
"""The flag that sets each TraceRequest field."""


def _refused_request(err: BadTraceRequest) -> ConfigError:
    """``TraceRequest.validate``'s refusal as the command line's ConfigError: its sentence, the flag, its reason."""
    from gpulens.core.errors import ConfigError

    return ConfigError(str(err), where=_REQUEST_FLAGS.get(err.where, ""), problem=err.problem)


def _run(args: argparse.Namespace) -> int:
    from gpulens.core.errors import ConfigError, ConfigProblem
    from gpulens.ipc.kineto.requests import BadTraceRequest, TraceRequest

    req = TraceRequest(
        pids=pids_of(args) if args.job is None else (1,),  # --job: the agents resolve the pids
        duration_ms=None if args.iterations is not None else (500 if args.duration_ms is None else args.duration_ms),
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
    except BadTraceRequest as err:
        raise _refused_request(err) from err
    if getattr(args, "remote_host", None) is not None:
        say("--host is deprecated: use --connect HOST:PORT or --ssh NODE")
    target = remote_target(args)
    if args.job is not None:
        from gpulens.commands.trace_job import run_job

        if args.iterations is not None:
            raise ConfigError("--job traces every rank from one start time: give --duration-ms, not --iterations",
                              where="--iterations", expected="--duration-ms", problem=ConfigProblem.CONFLICT)
        hosts = list(args.hosts or []) + ([target] if target else [])
        return run_job(args, req, hosts)
    if args.hosts:
        raise ConfigError("--hosts goes with --job; for --pid give one host with --connect or --ssh", where="--hosts",
                          expected="--job", problem=ConfigProblem.CONFLICT)
    if args.wait is not None and not args.children:
        raise ConfigError("--wait goes with --job or --children (a --pid that has not polled is waited for by "
                          "the trace itself, up to 3 poll intervals)", where="--wait", expected="--job or --children",
                          problem=ConfigProblem.CONFLICT)
    if args.output:
        parent = os.path.dirname(os.path.abspath(os.path.expanduser(args.output)))
        if not os.path.isdir(parent):
            raise ConfigError(where=f"-o {args.output}", expected="a file in a directory", got=parent,
                              problem=ConfigProblem.NOT_FOUND,
                              detail=f"{parent} is not a directory; gpulens does not create parent directories "
                                     "(make it first)")
    if target is not None:
        from gpulens.commands.trace_agent import trace_remote

        return trace_remote(args, req, target)
    from gpulens.commands.trace_here import trace_here

    return trace_here(args, req)
