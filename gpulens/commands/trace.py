"""``gpulens trace``: take an on-demand PyTorch trace of running processes (like ``dyno gputrace``).

Works without an agent: it serves the Kineto endpoint itself while it
waits. When a ``gpulens agent`` on this host already holds the Kineto name,
the request goes to that agent over its local control socket
(``gpulens.ipc.control``). ``--host HOST:PORT`` or ``--host ssh:NODE``
traces on another host through its agent; the file comes back over the
stream. Both agent paths run ``gpulens.sources.tracing.fetch_trace``, the
flow the TUI's remote profiler uses; this module only prints (progress on
stderr, ``PID PATH`` on stdout) and copies to ``-o``. The target must run with
``KINETO_USE_DAEMON=1`` (and, if it sets ``KINETO_IPC_SOCKET_DIR``, the
same directory here via ``--ipc-socket-dir``, or in the agent's environment).
"""

from __future__ import annotations

import argparse
import os
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpulens.ipc.kineto.requests import TraceRequest
    from gpulens.ipc.kineto.service import LocalTraceService
    from gpulens.sources.tracing import Requester

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
        "process (the local copy's path for a trace taken through an agent); exit 1 when a process "
        "could not be traced. When a gpulens agent on this host holds the Kineto name, the trace "
        "goes through it automatically."
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
    remote = parser.add_argument_group("another host (through its gpulens agent)")
    remote.add_argument("--host", metavar="HOST:PORT|ssh:NODE",
                        help="trace on that host through its agent (TCP as for --connect, tls:// too, or ssh)")
    remote.add_argument("--token-file", metavar="FILE", help="token for an agent that requires one")
    remote.add_argument("--ssh-command", metavar="CMD", help="command run instead of ssh for ssh:NODE ({host} is replaced)")


def _say(msg: str) -> None:
    import sys

    print(f"gpulens trace: {msg}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    """Serve the endpoint (or use the agent holding it, or --host's), request the trace, report the files."""
    from gpulens.ipc.errors import EndpointBusy, NotTraceable
    from gpulens.ipc.kineto.endpoint import resolve_socket_dir, who_binds
    from gpulens.ipc.kineto.requests import TraceJob, TraceRequest
    from gpulens.ipc.kineto.service import LocalTraceService
    from gpulens.sources.tracing import copy_trace

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
    if args.host:
        return _trace_remote(args, req)
    svc = LocalTraceService(socket_dir=args.ipc_socket_dir)
    try:
        svc.start()
    except EndpointBusy:
        owner = who_binds(resolve_socket_dir(args.ipc_socket_dir))
        squatter = _squatter(owner[0]) if owner is not None else None
        if squatter is not None:
            _say(squatter)
            return 1
        if owner is None or not _is_gpulens_agent(owner[0]):
            raise  # dynolog without RPC, or someone else: one clear line from the CLI's error reporter
        return _trace_local_agent(args, req, owner[0])
    try:
        _say(f"serving the Kineto endpoint at {svc.address}")
        if req.job_id is not None:
            _wait_for_job(svc, req.job_id)

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
            final = (
                copy_trace(path, args.output, pid, len(result.files), owner_uid=result.owners.get(pid))
                if args.output
                else path
            )
            print(f"{pid} {final}", flush=True)
        for pid, why in sorted(result.missing.items()):
            _say(f"process {pid}: {why}")
        return 0 if not result.missing else 1
    finally:
        svc.stop()


def _trace_remote(args: argparse.Namespace, req: TraceRequest) -> int:
    """``--host HOST:PORT|ssh:NODE``: through that host's agent stream."""
    from gpulens.sources.stream.connect import open_agent
    from gpulens.sources.tracing import default_download_dir

    _say(f"connecting to the agent at {args.host}")
    src, address = open_agent(
        args.host, token_file=args.token_file, ssh_command=args.ssh_command, download_dir=default_download_dir()
    )
    try:
        return _trace_via(src, address, req, args.output)
    finally:
        src.stop()


def _trace_local_agent(args: argparse.Namespace, req: TraceRequest, owner_pid: int) -> int:
    """The Kineto name here is held by a gpulens agent: send the request to it."""
    from gpulens.core.errors import CollectorError
    from gpulens.core.procfs import proc_uid
    from gpulens.sources.stream.local_agent import LocalAgentLink
    from gpulens.sources.tracing import default_download_dir

    uid = proc_uid(owner_pid)
    if uid is None:
        raise CollectorError(f"the gpulens process {owner_pid} holding the Kineto name is gone; try again")
    link = LocalAgentLink(args.ipc_socket_dir, owner_pid, uid, default_download_dir())
    try:
        if "trace" not in link.hello.caps:
            raise CollectorError(f"the local agent (pid {owner_pid}) does not serve traces")
        _say(f"the Kineto name is held by gpulens agent pid {owner_pid}; tracing through it")
        return _trace_via(link, link.address, req, args.output)
    finally:
        link.close()


def _trace_via(agent: Requester, host: str, req: TraceRequest, output: str | None) -> int:
    """Trace through ``host``'s agent, print its progress and the files (copied to ``output``); the exit code."""
    from gpulens.ipc.errors import RequestFailed
    from gpulens.sources.tracing import copy_trace, fetch_trace, new_tag, trace_wait_s

    def on_state(state: str, detail: str) -> None:
        _say(f"{state}: {detail}")

    def on_silent(why: str) -> None:
        _say(f"no progress reports from this agent ({why}); waiting for the trace")

    try:
        got = fetch_trace(agent, host, req, new_tag(), on_state, on_silent)
    except RequestFailed as err:
        _say(str(err))  # the agent's own sentence, e.g. "trace failed: 123: socket-dir mismatch: ..."
        return 1
    except TimeoutError:
        _say(f"failed: the agent at {host} sent no trace within {trace_wait_s(req):.0f} s")
        return 1
    for pid_s, (name, path) in sorted(got.files.items()):
        _say(f"received {name} ({path.stat().st_size} bytes)")
        if output:
            _say(f"writing {output}")
            final = copy_trace(path, output, pid_s, got.named, owner_uid=os.geteuid())
            path.unlink(missing_ok=True)  # the download was only a staging copy
        else:
            final = str(path)
        print(f"{pid_s} {final}", flush=True)
    for pid_s, why in sorted(got.missing.items()):
        _say(f"process {pid_s}: {why}")
    _say("done" if not got.missing else "done, with processes missing")
    return 0 if got.named and not got.missing else 1


def _wait_for_job(svc: LocalTraceService, job_id: int) -> None:
    """Give the processes of ``job_id`` up to 15 s to poll (local path)."""
    _say(f"waiting up to 15 s for processes of job {job_id} to poll")
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and not any(p.job_id == job_id for p in svc.processes()):
        time.sleep(0.1)
    time.sleep(1.0)  # let the other ranks of the job poll too


def _squatter(pid: int) -> str | None:
    """Why the holder ``pid`` of the Kineto name must not get our request (another non-root user), or None.

    Root's request goes to root's processes only; a user's to their own or root's.
    """
    from gpulens.core.procfs import proc_uid
    from gpulens.sources.stream.local_agent import trusted_peer

    uid = proc_uid(pid)
    if uid is None or trusted_peer(uid, os.geteuid()):
        return None
    return (
        f"the Kineto name is held by pid {pid} of uid {uid}, not by a gpulens agent of yours or root's: "
        "refusing to send it your request; it may be squatting"
    )


def _is_gpulens_agent(pid: int) -> bool:
    """True when ``pid`` runs ``gpulens agent`` (its command line says so)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read(65536).split(b"\0")
    except OSError:
        return False
    return any(b"gpulens" in a for a in argv[:3]) and b"agent" in argv
