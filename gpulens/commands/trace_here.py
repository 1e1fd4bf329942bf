"""``gpulens trace`` on this host: own the Kineto endpoint while tracing, or go through the gpulens holding it.

When the name is free the command owns it while it runs (an in-process
agent, ``gpulens.agent.agent.endpoint_owner``, whose control socket serves
every other gpulens on the host meanwhile): :func:`trace_with` asks its
trace service, gives several pids one start time and prints each file. When
another gpulens holds it (an agent, a TUI, another ``gpulens trace``) the
request goes through that one's control socket
(``gpulens.sources.stream.control_trace``) and on through
:mod:`gpulens.commands.trace_agent`; a holder gpulens will not use is named
and refused.
"""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING

from gpulens.commands.trace_agent import children_via, report_children, trace_via
from gpulens.commands.trace_common import (
    CHILDREN_WAIT_S,
    EXIT_FAILED,
    EXIT_OK,
    Progress,
    hand_back,
    say,
)

if TYPE_CHECKING:
    from gpulens.ipc.kineto.requests import TraceRequest
    from gpulens.ipc.kineto.service import LocalTraceService


def trace_here(args: argparse.Namespace, req: TraceRequest) -> int:
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
        return trace_with(svc, args, req)
    finally:
        hand_back(owner)


def trace_with(svc: LocalTraceService, args: argparse.Namespace, req: TraceRequest) -> int:
    """Trace through this process's own trace service, print each file (copied to ``-o``); the exit code."""
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
    return report_children(found)


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

            pids = children_via(link, link.address, req.pids, args.wait)
            if not pids:
                return EXIT_FAILED
            req = replace(req, pids=pids)
        return trace_via(link, link.address, req, args.output)
    finally:
        link.close()


def _is_agent(pid: int) -> bool:
    """True when ``pid`` runs ``gpulens agent`` (else a TUI's or a trace command's in-process owner)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return b"agent" in fh.read(65536).split(b"\0")
    except OSError:
        return False
