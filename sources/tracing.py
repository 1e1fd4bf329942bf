"""``gpulens trace`` through an agent: remote (``--host``) or the local agent holding the Kineto name.

Both go through the same ``request(host, kind, params, timeout_s) ->
Future[RequestResult]`` (``StreamSource`` for ``--host``,
:class:`gpulens.sources.stream.local_agent.LocalAgentLink` for the local agent). The
trace request carries a random ``tag``; while it runs, ``trace_status``
requests report its progress (waiting for poll, tracing, writing, done),
printed on stderr as the local path does. The files come back in chunks;
each is saved under the download directory, then copied to ``-o FILE``
(gzip when FILE ends in .gz) by :func:`copy_trace`: streamed through an
exclusive temporary name, never through a link, with decompression bounded
(200x the input, at most 4 GiB; ``GPULENS_MAX_TRACE_BYTES`` sets another limit).
"""

from __future__ import annotations

import argparse
import os
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Protocol

from gpulens.analysis.trace.export import LIMIT_ENV as LIMIT_ENV  # re-exported for callers
from gpulens.core.errors import CollectorError
from gpulens.ipc.kineto.requests import TraceRequest

STATUS_EVERY_S = 0.5
Say = Callable[[str], None]


class Requester(Protocol):
    """What both StreamSource and LocalAgentLink offer."""

    def request(self, host: str, kind: str, params: Mapping[str, Any], timeout_s: float) -> Future[Any]: ...


def default_download_dir() -> Path:
    """Where agent-sent traces land when no ``-o`` is given."""
    return Path.home() / ".cache" / "gpulens" / "traces"


def trace_params(req: TraceRequest, tag: str) -> dict[str, Any]:
    """The ``trace`` request's params (docs/protocol.md) for ``req``."""
    params: dict[str, Any] = {
        "record_shapes": req.record_shapes,
        "with_stack": req.with_stack,
        "with_flops": req.with_flops,
        "with_modules": req.with_modules,
        "profile_memory": req.profile_memory,
        "warmup_s": req.warmup_s,
        "timeout_s": req.timeout_s,
        "tag": tag,
    }
    if req.pids:
        params["pids"] = list(req.pids)
    else:
        params["job_id"] = req.job_id
    if req.iterations is not None:
        params["iterations"] = req.iterations
    else:
        params["duration_ms"] = req.duration_ms
    return params


def trace_via(agent: Requester, host: str, req: TraceRequest, output: str | None, say: Say) -> int:
    """Request the trace from ``host``'s agent, report progress, save the files; the exit code."""
    from gpulens.ipc.errors import RequestFailed

    tag = secrets.token_hex(8)
    timeout = req.timeout_s + 60.0
    fut = agent.request(host, "trace", trace_params(req, tag), timeout)
    _follow(agent, host, tag, fut, say)
    try:
        res = fut.result(timeout=timeout + 30)
    except RequestFailed as err:
        say(str(err))  # the agent's own sentence, e.g. "trace failed: 123: socket-dir mismatch: ..."
        return 1
    except TimeoutError:
        say(f"failed: the agent at {host} sent no trace within {timeout:.0f} s")
        return 1
    result = res.result if isinstance(res.result, dict) else {}
    raw_names = result.get("files")
    names: dict[Any, Any] = raw_names if isinstance(raw_names, dict) else {}
    raw_missing = result.get("missing")
    missing: dict[str, Any] = dict(raw_missing) if isinstance(raw_missing, dict) else {}
    for pid_s, name in sorted(names.items(), key=lambda kv: str(kv[0])):
        if not (isinstance(pid_s, str) and pid_s.isdigit() and len(pid_s) <= 10):
            missing[repr(pid_s)[:40]] = "the agent sent a malformed process id"
            continue
        path = res.files.get(name) if isinstance(name, str) else None
        if path is None:
            missing[pid_s] = f"the agent named {str(name)[:80]!r} but sent no such file"
            continue
        say(f"received {name} ({path.stat().st_size} bytes)")
        if output:
            say(f"writing {output}")
            final = copy_trace(path, output, str(pid_s), len(names), owner_uid=os.geteuid())
            path.unlink(missing_ok=True)  # the download was only a staging copy
        else:
            final = str(path)
        print(f"{pid_s} {final}", flush=True)
    for pid_s, why in sorted(missing.items(), key=lambda kv: str(kv[0])):
        say(f"process {pid_s}: {why}")
    say("done" if not missing else "done, with processes missing")
    return 0 if names and not missing else 1


def _follow(agent: Requester, host: str, tag: str, fut: Future[Any], say: Say) -> None:
    """Print every state change of the tagged trace, in order, until ``fut`` is done."""
    seen = 0  # index of the next event to print
    while True:
        finished = fut.done()
        try:
            status = agent.request(host, "trace_status", {"tag": tag}, 10.0).result(timeout=15)
        except Exception as err:  # an older agent: no progress, the trace still comes
            if not finished:
                say(f"no progress reports from this agent ({err}); waiting for the trace")
                fut.exception()  # block until done
            return
        st = status.result if isinstance(status.result, dict) else {}
        raw_events, raw_first = st.get("events"), st.get("first")
        events: list[Any] = raw_events if isinstance(raw_events, list) else []
        first = raw_first if isinstance(raw_first, int) else 0
        for ev in events[max(seen - first, 0) :]:
            if isinstance(ev, dict):
                say(f"{ev.get('state', '?')}: {ev.get('detail', '')}")
        seen = max(seen, first + len(events))
        if finished:
            return
        _wait_done(fut, STATUS_EVERY_S)


def _wait_done(fut: Future[Any], seconds: float) -> None:
    done = threading.Event()
    fut.add_done_callback(lambda _f: done.set())
    done.wait(seconds)


def copy_trace(src: str | Path, dest: str, pid: int | str, count: int, *, owner_uid: int | None = None) -> str:
    """Copy to ``dest`` (``_<pid>`` inserted when several), gzip when it ends in .gz; the path written.

    The copy itself is :func:`gpulens.analysis.trace.export.export_trace`
    (regular source files only, an exclusive temporary name, bounded expansion).
    """
    from gpulens.analysis.trace.export import export_trace

    out = Path(dest).expanduser()
    if count > 1:
        suffix = "".join(out.suffixes)
        out = out.with_name(out.name[: len(out.name) - len(suffix)] + f"_{pid}" + suffix)
    return export_trace(src, out, owner_uid=owner_uid)


def trace_remote(args: argparse.Namespace, req: TraceRequest, say: Say) -> int:
    """``gpulens trace --host HOST:PORT|ssh:NODE``: through that host's agent stream."""
    from gpulens.sources.stream.connect import open_agent

    say(f"connecting to the agent at {args.host}")
    src, address = open_agent(
        args.host, token_file=args.token_file, ssh_command=args.ssh_command, download_dir=default_download_dir()
    )
    try:
        return trace_via(src, address, req, args.output, say)
    finally:
        src.stop()


def trace_local_agent(args: argparse.Namespace, req: TraceRequest, owner_pid: int, say: Say) -> int:
    """The Kineto name here is held by a gpulens agent: send the request to it."""
    from gpulens.core.procfs import proc_uid
    from gpulens.sources.stream.local_agent import LocalAgentLink

    uid = proc_uid(owner_pid)
    if uid is None:
        raise CollectorError(f"the gpulens process {owner_pid} holding the Kineto name is gone; try again")
    link = LocalAgentLink(args.ipc_socket_dir, owner_pid, uid, default_download_dir())
    try:
        if "trace" not in link.hello.caps:
            raise CollectorError(f"the local agent (pid {owner_pid}) does not serve traces")
        say(f"the Kineto name is held by gpulens agent pid {owner_pid}; tracing through it")
        return trace_via(link, link.address, req, args.output, say)
    finally:
        link.close()


def wait_for_job(svc: Any, job_id: int, say: Say) -> None:
    """Give the processes of ``job_id`` up to 15 s to poll (local path)."""
    say(f"waiting up to 15 s for processes of job {job_id} to poll")
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and not any(p.job_id == job_id for p in svc.processes()):
        time.sleep(0.1)
    time.sleep(1.0)  # let the other ranks of the job poll too
