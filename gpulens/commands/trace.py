"""``gpulens trace``: take an on-demand PyTorch trace of running processes (like ``dyno gputrace``).

One gpulens per host owns the Kineto endpoint. When the name is free this
command owns it while it runs (an in-process agent,
``gpulens.agent.agent.endpoint_owner``, whose control socket serves every
other gpulens on the host meanwhile); when another gpulens holds it (an
agent, a TUI, another ``gpulens trace``) the request goes through that
one's control socket (``gpulens.sources.stream.control_trace``).
``--connect HOST:PORT`` / ``--ssh NODE`` trace on another host through its
agent; ``--job KEY [--hosts A,B]`` traces every process of a job on every
host at one common start time (``gpulens.commands.trace_job``). Every agent
path runs ``gpulens.sources.tracing.fetch_trace``, the flow the TUI uses;
this module only prints (progress on stderr, ``PID PATH`` on stdout) and
copies to ``-o``. The target must run with ``KINETO_USE_DAEMON=1`` (and,
if it sets ``KINETO_IPC_SOCKET_DIR``, the same directory here via
``--ipc-socket-dir``, or in the agent's environment).
"""

from __future__ import annotations

import argparse
import os
import time
from typing import TYPE_CHECKING

from gpulens.commands._args import add_pid_argument, add_remote_arguments, pids_of, remote_target
from gpulens.commands.trace_common import (
    CHILDREN_WAIT_S,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    JOB_WAIT_S,
    MAX_WAIT_S,
    Progress,
    hand_back,
    say,
)

if TYPE_CHECKING:
    from gpulens.core.errors import ConfigError
    from gpulens.ipc.kineto.requests import BadTraceRequest, TraceRequest
    from gpulens.ipc.kineto.service import LocalTraceService
    from gpulens.sources.tracing import Requester

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
        return _trace_remote(args, req, target)
    return _trace_here(args, req)


def _trace_here(args: argparse.Namespace, req: TraceRequest) -> int:
    """This host: own the endpoint while tracing, or go through the gpulens that owns it."""
    import socket

    from gpulens import __version__
    from gpulens.agent.agent import endpoint_owner
    from gpulens.ipc.errors import EndpointBusy

    try:
        owner = endpoint_owner(socket.gethostname(), args.ipc_socket_dir, version=__version__)
    except EndpointBusy as busy:
        return _trace_through_owner(args, req, busy)
    try:
        svc = owner.requests.trace_service
        assert svc is not None
        from gpulens.ipc.kineto.service import LocalTraceService

        assert isinstance(svc, LocalTraceService)
        say(f"serving the Kineto endpoint at {svc.address}")
        return _trace_with(svc, args, req)
    finally:
        hand_back(owner)


def _trace_with(svc: LocalTraceService, args: argparse.Namespace, req: TraceRequest) -> int:
    from dataclasses import replace

    from gpulens.ipc.errors import TraceError
    from gpulens.ipc.kineto.requests import TraceJob
    from gpulens.sources.tracing import copy_trace

    if args.children:
        pids = _children_here(svc, req.pids, args.wait)
        if not pids:
            return EXIT_FAILED
        req = replace(req, pids=pids)
    if req.iterations is not None:
        for pid in req.pids:
            if svc.has_stepped(pid) is False:  # unknown (never traced here) is not said: it may well step
                say(_unstepped(pid, req))
    if len(req.pids) > 1 and req.duration_ms is not None and req.start_time_ms is None:
        req = _common_start(svc, req)
    progress = Progress()
    asked = req

    def show(job: TraceJob) -> None:
        if job.request is asked:  # not the traces others request through this endpoint meanwhile
            progress(job.state.value, job.detail)

    svc.add_listener(show)
    fut = svc.request_trace(req)
    try:
        result = fut.result(timeout=req.timeout_s + 60)
    except TraceError as err:
        say(f"failed: {err}")
        return EXIT_FAILED
    except TimeoutError:
        say(f"failed: no answer within {req.timeout_s + 60:.0f} s")
        return EXIT_FAILED
    for pid, path in sorted(result.files.items()):
        final = (
            copy_trace(path, args.output, pid, len(result.files), owner_uid=result.owners.get(pid))
            if args.output
            else path
        )
        print(f"{pid} {final}", flush=True)
    for pid, note in sorted(result.notes.items()):
        say(f"process {pid}: {note}")
    for pid, why in sorted(result.missing.items()):
        say(f"process {pid}: {why}")
    return EXIT_OK if not result.missing else EXIT_FAILED


def _unstepped(pid: int, req: TraceRequest) -> str:
    from gpulens.ipc.kineto.requests import ITERATION_FALLBACK_MS

    return (
        f"process {pid}: its last trace showed no optimizer.step(); Kineto counts {req.describe()} by "
        f"optimizer.step() and traces {ITERATION_FALLBACK_MS} ms instead if it has not stepped yet"
    )


def _common_start(svc: LocalTraceService, req: TraceRequest) -> TraceRequest:
    """Several pids get one start time, as ``--job`` ranks do (issue 32 item 3: windows began up to 257 ms apart):
    after the longest poll interval among them, the margin and the warm-up."""
    from dataclasses import replace

    from gpulens.commands.trace_job import DEFAULT_POLL_S, START_MARGIN_S

    known = [p.interval_s for p in svc.processes() if p.pid in req.pids and p.interval_s]
    lead = max(known, default=DEFAULT_POLL_S) + START_MARGIN_S + req.warmup_s
    start = time.time() + lead
    stamp = time.strftime("%H:%M:%S", time.localtime(start)) + f".{int(start * 1000) % 1000:03d}"
    say(f"{len(req.pids)} processes start their window together at {stamp} (in {lead:.1f} s)")
    return replace(req, start_time_ms=int(start * 1000), timeout_s=req.timeout_s + lead)


def _children_here(svc: LocalTraceService, parents: tuple[int, ...], wait_s: float | None) -> tuple[int, ...]:
    """The ranks among the polling descendants of ``parents`` (:mod:`.trace_children`)."""
    from gpulens.commands.trace_children import wait_for_ranks

    wait = CHILDREN_WAIT_S if wait_s is None else wait_s
    say(f"waiting up to {wait:.0f} s for the ranks under {','.join(map(str, parents))} to poll (--wait)")
    ranks = wait_for_ranks(parents, lambda: {p.pid: p.ancestors for p in svc.processes()}, wait)
    found = {}
    for r in ranks:
        if not r.pids:
            say(f"process {r.parent}: no polling descendants: {svc.diagnose(r.parent) or 'it polls itself'}")
        elif (warning := r.warning()) is not None:
            say(warning)
        found[r.parent] = r.pids
    return _report_children(found)


def _report_children(found: dict[int, tuple[int, ...]]) -> tuple[int, ...]:
    pids = tuple(dict.fromkeys(k for kids in found.values() for k in kids))
    if pids:
        say(f"tracing {','.join(map(str, pids))}")
    return pids


def _trace_through_owner(args: argparse.Namespace, req: TraceRequest, busy: Exception) -> int:
    """Another process holds the Kineto name: trace through it when it is a gpulens we may use."""
    from gpulens.ipc.errors import StreamError
    from gpulens.ipc.kineto.endpoint import holder_of, resolve_socket_dir
    from gpulens.sources.stream.control_trace import connect_owner, is_gpulens, untrusted_holder
    from gpulens.sources.tracing import default_download_dir

    held = holder_of(resolve_socket_dir(args.ipc_socket_dir))
    if held is not None and (squat := untrusted_holder(held[0])) is not None:
        say(str(squat))
        return EXIT_FAILED
    if held is not None and not is_gpulens(held[0]):
        say(f"kineto endpoint busy: {busy}")
        return EXIT_FAILED
    try:
        link = connect_owner(args.ipc_socket_dir, default_download_dir())
    except StreamError as err:
        say(f"kineto endpoint busy: {busy}; and its control socket cannot be used: {err}")
        return EXIT_FAILED
    try:
        owner = link.agent_pid if held is None else held[0]
        kind = "root's agent pid" if held is None else "agent pid" if _is_agent(owner) else "pid"
        say(f"the Kineto name is held by gpulens {kind} {owner}; tracing through it")
        if args.children:
            from dataclasses import replace

            pids = _children_via(link, link.address, req.pids, args.wait)
            if not pids:
                return EXIT_FAILED
            req = replace(req, pids=pids)
        return _trace_via(link, link.address, req, args.output)
    finally:
        link.close()


def _children_via(agent: Requester, host: str, parents: tuple[int, ...], wait_s: float | None) -> tuple[int, ...]:
    """The ranks among the polling descendants of ``parents`` as the agent's ``trace_processes`` lists them."""
    from concurrent.futures import CancelledError

    from gpulens.commands.trace_children import wait_for_ranks
    from gpulens.core.errors import GpulensError
    from gpulens.ipc.request_schema import TraceProcessesParams

    failed: list[str] = []

    def polling() -> dict[int, tuple[int, ...]]:
        try:
            res = agent.request(host, TraceProcessesParams(), 5.0).result(timeout=6)
        except (GpulensError, TimeoutError, CancelledError) as err:  # RequestFailed, or no answer in time
            failed.append(str(err))
            return {}
        body = res.result if isinstance(res.result, dict) else {}
        return {e["pid"]: tuple(a for a in e.get("ancestors") or [] if isinstance(a, int))
                for e in body.get("processes") or [] if isinstance(e, dict) and isinstance(e.get("pid"), int)}

    # A request to the agent each time: once a second (Kineto's on-demand poll), not at the local 0.2 s.
    wait = CHILDREN_WAIT_S if wait_s is None else wait_s
    ranks = wait_for_ranks(parents, polling, wait, cmdline=lambda pid: b"", every_s=1.0)
    if failed and not any(r.pids for r in ranks):
        say(f"the agent cannot list its polling processes: {failed[-1]}")
        return ()
    for r in ranks:
        if not r.pids:
            say(f"process {r.parent}: no polling descendants on {host}")
    return _report_children({r.parent: r.pids for r in ranks})


def _trace_remote(args: argparse.Namespace, req: TraceRequest, target: str) -> int:
    """``--connect HOST:PORT`` / ``--ssh NODE``: through that host's agent stream."""
    from dataclasses import replace

    from gpulens.sources.stream.connect import open_agent
    from gpulens.sources.tracing import default_download_dir

    say(f"connecting to the agent at {target}")
    src, address = open_agent(
        target, token_file=args.token_file, ssh_command=args.ssh_command, download_dir=default_download_dir(),
        tls_ca=getattr(args, "tls_ca", None),
    )
    try:
        if args.children:
            pids = _children_via(src, address, req.pids, args.wait)
            if not pids:
                return EXIT_FAILED
            req = replace(req, pids=pids)
        return _trace_via(src, address, req, args.output)
    finally:
        src.stop()


def _trace_via(agent: Requester, host: str, req: TraceRequest, output: str | None) -> int:
    """Trace through ``host``'s agent, print its progress and the files (copied to ``output``); the exit code."""
    from gpulens.ipc.errors import RequestFailed
    from gpulens.sources.tracing import copy_trace, fetch_trace, new_tag, trace_wait_s

    on_state = Progress()

    def on_silent(why: str) -> None:
        say(f"no progress reports from this agent ({why}); waiting for the trace")

    try:
        got = fetch_trace(agent, host, req, new_tag(), on_state, on_silent)
    except RequestFailed as err:
        say(str(err))  # the agent's own sentence, e.g. "trace failed: 123: socket-dir mismatch: ..."
        return EXIT_FAILED
    except TimeoutError:
        say(f"failed: the agent at {host} sent no trace within {trace_wait_s(req):.0f} s")
        return EXIT_FAILED
    for pid_s, (name, path) in sorted(got.files.items()):
        say(f"received {name} ({path.stat().st_size} bytes)")
        if output:
            say(f"writing {output}")
            final = copy_trace(path, output, pid_s, got.named, owner_uid=os.geteuid())
            path.unlink(missing_ok=True)  # the download was only a staging copy
        else:
            final = str(path)
        print(f"{pid_s} {final}", flush=True)
    for pid_s, note in sorted(got.notes.items()):
        say(f"process {pid_s}: {note}")
    for pid_s, why in sorted(got.missing.items()):
        say(f"process {pid_s}: {why}")
    say("done" if not got.missing else "done, with processes missing")
    return EXIT_OK if got.named and not got.missing else EXIT_FAILED


def _is_agent(pid: int) -> bool:
    """True when ``pid`` runs ``gpulens agent`` (else a TUI's or a trace command's in-process owner)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return b"agent" in fh.read(65536).split(b"\0")
    except OSError:
        return False
