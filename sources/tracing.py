"""One trace through an agent: the flow ``gpulens trace --host``, the local agent path and the TUI share.

:func:`fetch_trace` sends one ``trace`` request with a random ``tag``
through anything with ``request(host, params, timeout_s) ->
Future[RequestResult]`` (:class:`Requester`: a ``StreamSource`` for
``--host`` and the TUI, :class:`gpulens.sources.stream.local_agent.LocalAgentLink`
for the local agent). While it runs, ``trace_status`` requests report its
progress (waiting for poll, tracing, writing, done), each state handed to
the caller in order. The agent sends the files back in chunks; the requester
saves each under its download directory, and :class:`Received` maps the
agent's ``{pid: name}`` onto those local copies (a malformed pid or a named
file never sent becomes a missing process with its reason).

Its users: :class:`gpulens.sources.remote_trace.RemoteTraceService` (the
profiler screen's service for another host) and ``gpulens trace``
(``gpulens.commands.trace_agent``, which prints). :func:`copy_trace` copies a
trace to ``-o FILE`` (gzip when FILE ends in .gz): streamed through an
exclusive temporary name, never through a link, with decompression bounded
(200x the input, at most 4 GiB; ``GPULENS_MAX_TRACE_BYTES`` sets another limit).
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable
from concurrent.futures import CancelledError, Future
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
from msgspec import UNSET

from gpulens.core.events import Requester as Requester  # re-exported: the one spelling
from gpulens.core.sanitize import clean_text
from gpulens.ipc.errors import StreamError
from gpulens.ipc.kineto.requests import TraceRequest
from gpulens.ipc.request_schema import TraceAnswer, TraceParams, TraceStatusParams
from gpulens.sources.ask import Reply, ask
from gpulens.sources.trace_export import LIMIT_ENV as LIMIT_ENV  # re-exported for callers

STATUS_EVERY_S = 0.5
OnState = Callable[[str, str], None]
"""``(state, detail)`` for each progress state the agent reports, in order (e.g. ``tracing``)."""
OnSilent = Callable[[str], None]
"""Called once, with the reason, when the agent answers no ``trace_status`` (an older agent)."""


@dataclass(frozen=True, slots=True)
class Received:
    """What the agent sent back for one trace, keyed by the pid as the agent wrote it (decimal).

    ``files``: pid -> (the agent's name for the file, the local copy).
    ``missing``: pid (or a malformed key's repr) -> why there is no trace.
    ``named``: how many files the agent's answer named (malformed ones too).
    ``notes``: pid -> what its file holds when it is not what was asked
    (an iterations request Kineto answered with a duration trace).
    The texts of ``missing`` and ``notes`` are one line each, without terminal control.
    """

    files: dict[str, tuple[str, Path]]
    missing: dict[str, str]
    named: int
    notes: dict[str, str] = field(default_factory=dict)


def default_download_dir() -> Path:
    """Where agent-sent traces land when no ``-o`` is given."""
    from gpulens.core.dirs import cache_dir

    return cache_dir() / "traces"


def new_tag() -> str:
    """A random tag naming one trace in ``trace_status`` requests."""
    return secrets.token_hex(8)


def trace_wait_s(req: TraceRequest) -> float:
    """How long the agent may take to answer ``req`` (its own timeout plus a minute)."""
    return req.timeout_s + 60.0


def is_pid_text(value: object) -> bool:
    """True for a pid as the agent writes it: 1-10 ASCII digits."""
    return isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 10


def trace_struct(req: TraceRequest, tag: str, job_key: str | None = None) -> TraceParams:
    """The ``trace`` request's params (docs/protocol.md) for ``req`` (``job_key``: instead of pids)."""
    if job_key is not None:
        whom = TraceParams(job_key=job_key)
    elif req.pids:
        whom = TraceParams(pids=tuple(req.pids))
    else:
        whom = TraceParams(job_id=req.job_id)
    return msgspec.structs.replace(
        whom,
        record_shapes=req.record_shapes,
        with_stack=req.with_stack,
        with_flops=req.with_flops,
        with_modules=req.with_modules,
        profile_memory=req.profile_memory,
        warmup_s=req.warmup_s,
        timeout_s=req.timeout_s,
        tag=tag,
        start_time_ms=UNSET if req.start_time_ms is None else req.start_time_ms,
        iterations=UNSET if req.iterations is None else req.iterations,
        duration_ms=req.duration_ms if req.iterations is None else UNSET,
    )


def fetch_trace(
    agent: Requester,
    host: str,
    req: TraceRequest,
    tag: str,
    on_state: OnState,
    on_silent: OnSilent | None = None,
    *,
    job_key: str | None = None,
) -> Received:
    """Ask ``host``'s agent to trace ``req`` (or every polling process of ``job_key``), report its
    progress, and map the files it sent.

    Raises:
        RequestFailed: the agent refused or the trace failed there (its own sentence).
        TimeoutError: no answer within :func:`trace_wait_s`.
    """
    timeout = trace_wait_s(req)
    fut = ask(agent, host, trace_struct(req, tag, job_key), timeout)
    _follow(agent, host, tag, fut, on_state, on_silent)
    return received(fut.result(timeout=timeout + 30))


def received(res: Reply[TraceAnswer]) -> Received:
    """Map a ``trace`` answer's ``{pid: name}`` and ``missing`` onto the files the requester saved."""
    names = res.answer.files
    # One line per item: a reason with its line breaks kept would forge output lines.
    missing = {clean_text(k)[:40]: clean_text(v)[:400] for k, v in res.answer.missing.items()}
    notes = {k: clean_text(v)[:400] for k, v in res.answer.notes.items() if is_pid_text(k)}
    files: dict[str, tuple[str, Path]] = {}
    for pid_s, name in names.items():
        if not is_pid_text(pid_s):
            missing[repr(pid_s)[:40]] = "the agent sent a malformed process id"
            continue
        path = res.files.get(name)
        if path is None:
            missing[pid_s] = f"the agent named {str(name)[:80]!r} but sent no such file"
        else:
            files[pid_s] = (name, path)
    return Received(files=files, missing=missing, named=len(names), notes=notes)


def _follow(
    agent: Requester, host: str, tag: str, fut: Future[Reply[TraceAnswer]], on_state: OnState,
    on_silent: OnSilent | None,
) -> None:
    """Report every state change of the tagged trace, in order, until ``fut`` is done."""
    seen = 0  # index of the next event to report
    while True:
        finished = fut.done()
        try:
            status = ask(agent, host, TraceStatusParams(tag=tag), 10.0).result(timeout=15).answer
        except (StreamError, TimeoutError, CancelledError) as err:  # an older agent: no progress; the trace comes
            if not finished:
                if on_silent is not None:
                    on_silent(str(err))
                fut.exception()  # block until done
            return
        first, events = status.first, status.events
        for ev in events[max(seen - first, 0) :]:
            on_state(ev.state, ev.detail)
        seen = max(seen, first + len(events))
        if finished:
            return
        _wait_done(fut, STATUS_EVERY_S)


def _wait_done(fut: Future[Reply[TraceAnswer]], seconds: float) -> None:
    done = threading.Event()
    fut.add_done_callback(lambda _f: done.set())
    done.wait(seconds)


def copy_trace(src: str | Path, dest: str, pid: int | str, count: int, *, owner_uid: int | None = None) -> str:
    """Copy to ``dest`` (``_<pid>`` inserted when several), gzip when it ends in .gz; the path written.

    The copy itself is :func:`gpulens.sources.trace_export.export_trace`
    (regular source files only, an exclusive temporary name, bounded expansion).
    """
    from gpulens.sources.trace_export import export_trace

    out = Path(dest).expanduser()
    if count > 1:
        suffix = "".join(out.suffixes)
        out = out.with_name(out.name[: len(out.name) - len(suffix)] + f"_{pid}" + suffix)
    return export_trace(src, out, owner_uid=owner_uid)
