"""``gpulens trace`` through a gpulens agent's request stream: another host's agent, or this host's endpoint owner.

``--connect HOST:PORT`` / ``--ssh NODE`` open that host's agent
(:func:`trace_remote`); the gpulens holding this host's Kineto name is
reached over its control socket (:mod:`gpulens.commands.trace_here`).
Either way :func:`trace_via` runs ``gpulens.sources.tracing.fetch_trace``,
the flow the TUI uses, prints its progress and each file (``PID PATH``) and
copies it to ``-o``; ``--children`` takes the ranks among the polling
descendants the agent's ``trace_processes`` lists (:func:`children_via`).
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from gpulens.commands.trace_common import CHILDREN_WAIT_S, EXIT_FAILED, EXIT_OK, Progress, say

if TYPE_CHECKING:
    from gpulens.ipc.kineto.requests import TraceRequest
    from gpulens.sources.tracing import Requester


def report_children(found: dict[int, tuple[int, ...]]) -> tuple[int, ...]:
    """The ranks found under each parent, once each and in order, said on stderr."""
    pids = tuple(dict.fromkeys(k for kids in found.values() for k in kids))
    if pids:
        say(f"tracing {','.join(map(str, pids))}")
    return pids


def children_via(agent: Requester, host: str, parents: tuple[int, ...], wait_s: float | None) -> tuple[int, ...]:
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
    return report_children({r.parent: r.pids for r in ranks})


def trace_remote(args: argparse.Namespace, req: TraceRequest, target: str) -> int:
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
            pids = children_via(src, address, req.pids, args.wait)
            if not pids:
                return EXIT_FAILED
            req = replace(req, pids=pids)
        return trace_via(src, address, req, args.output)
    finally:
        src.stop()


def trace_via(agent: Requester, host: str, req: TraceRequest, output: str | None) -> int:
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
