"""RemoteTraceService: the profiler screen's trace service for a job on another host.

The host's agent owns the Kineto endpoint there; this service speaks to it
through the source's ``request(host, params, timeout_s)`` with the typed
params of ipc/request_schema.py (a StreamSource, possibly inside
MultiSource / RecordingSource). It is the
remote form of :class:`gpulens.ipc.kineto.protocol.TraceService`, the
protocol :class:`~gpulens.ipc.kineto.service.LocalTraceService` implements
for this host.

A trace is :func:`gpulens.sources.tracing.fetch_trace` (the flow ``gpulens
trace --host`` uses) on a worker thread: each state the agent reports
becomes a :class:`TraceJob` for the listeners. The agent sends the file back
in chunks; the source saves it under its download directory, and the job's
``files`` point there, so View / Analyze / Export work on the local copy.
"""

from __future__ import annotations

import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from concurrent.futures import CancelledError, Future
from dataclasses import replace
from typing import Protocol

from gpulens.core.errors import GpulensError
from gpulens.ipc.errors import StreamError
from gpulens.ipc.kineto.protocol import JobListener
from gpulens.ipc.kineto.registry import PollingProcess
from gpulens.ipc.kineto.requests import TraceJob, TraceRequest, TraceResult, TraceState
from gpulens.ipc.kineto.untraceable import Untraceable, UntraceableKind
from gpulens.ipc.request_schema import TraceProcessesAnswer, TraceProcessesParams
from gpulens.sources.ask import ask
from gpulens.sources.tracing import (
    Received,
    Requester,
    fetch_trace,
    is_pid_text,
    new_tag,
    trace_wait_s,
)

STATE_BY_VALUE = {s.value: s for s in TraceState}
CACHE_S = 1.0
"""How old the agent's list of polling processes may be."""
# The agent's own progress states that are not TraceStates.
EXTRA_STATES = {"requested": TraceState.WAITING_FOR_POLL, "sending": TraceState.WRITING}


class HasSource(Protocol):
    """What :func:`service_for` needs of the app (``sources`` may not import ``tui``)."""

    @property
    def source(self) -> object:
        """The app's source; one that can send requests to agents."""
        ...


_services: weakref.WeakKeyDictionary[HasSource, dict[str, RemoteTraceService]] = weakref.WeakKeyDictionary()


def service_for(app: HasSource, host: str, polling: Callable[[], Iterable[int]]) -> RemoteTraceService:
    """``app``'s service for ``host`` (kept, so its trace list survives leaving the profiler).

    Raises:
        TypeError: the app's source cannot send requests to agents.
    """
    per_app = _services.setdefault(app, {})
    if host not in per_app:
        source = app.source
        if not isinstance(source, Requester):
            raise TypeError(f"{type(source).__name__} cannot send requests to agents")
        per_app[host] = RemoteTraceService(source, host, polling)
    return per_app[host]


class RemoteTraceService:
    """Trace processes on ``host`` through its agent; ``polling`` reads which pids poll there."""

    def __init__(self, source: Requester, host: str, polling: Callable[[], Iterable[int]]) -> None:
        self.source = source
        self.host = host
        self._polling = polling
        self._jobs: dict[str, TraceJob] = {}
        self._failures: dict[int, str] = {}
        self._listeners: list[JobListener] = []
        self._lock = threading.Lock()
        self._pollers = PollerCache(source, host)

    @property
    def address(self) -> str:
        """Where the traces are taken (shown in the profiler's title)."""
        return f"the agent on {self.host}"

    def polling_pids(self) -> set[int]:
        """Pids the agent's latest sample marks as polling its Kineto endpoint."""
        return set(self._polling())

    def processes(self) -> list[PollingProcess]:
        """The agent's polling processes that are ours to trace (``trace_processes``, at most a second old).

        Asked on a thread when stale, so the caller never waits; empty until the first
        answer, and for an agent that does not serve ``trace_processes``.
        """
        return self._pollers.get()

    def diagnose(self, pid: int, /) -> Untraceable | None:
        """None while ``pid`` polls the agent's endpoint, else why it cannot be traced."""
        if pid in self.polling_pids():
            return None
        with self._lock:
            failed = self._failures.get(pid)
        if failed:
            return Untraceable(UntraceableKind.AGENT_FAILED, pid, host=self.host, detail=failed)
        kids = [p.pid for p in self.processes() if pid in p.ancestors]
        if kids:  # the first 16 named
            return Untraceable(UntraceableKind.DESCENDANTS_POLL, pid, pids=tuple(kids[:16]))
        return Untraceable(UntraceableKind.NOT_POLLING_AGENT, pid, host=self.host)

    def jobs(self) -> list[TraceJob]:
        """Every trace this service started, oldest first."""
        with self._lock:
            return list(self._jobs.values())

    def add_listener(self, fn: JobListener, /) -> None:
        """Call ``fn(job)`` on every state change (from a worker thread, or the caller's)."""
        with self._lock:
            self._listeners.append(fn)

    def remove_listener(self, fn: JobListener, /) -> None:
        """Stop calling ``fn``."""
        with self._lock:
            if fn in self._listeners:
                self._listeners.remove(fn)

    def request_trace(self, req: TraceRequest, /) -> Future[TraceResult]:
        """Ask the agent for a trace of ``req``; the Future holds the local copies' paths.

        The Future fails with the agent's reason (RequestFailed), or a
        TimeoutError when the agent sends nothing in time.
        """
        tag = new_tag()
        out: Future[TraceResult] = Future()
        self._publish(TraceJob(tag, req, req.pids, TraceState.WAITING_FOR_POLL,
                               f"sent to the agent on {self.host}", time.monotonic()))
        threading.Thread(target=self._run, args=(tag, req, out), name="gpulens-remote-trace",
                         daemon=True).start()
        return out

    def stop(self) -> None:
        """Nothing to release: the source owns the connection; running traces end on their own."""

    # -- worker ----------------------------------------------------------------
    def _publish(self, job: TraceJob) -> None:
        with self._lock:
            self._jobs[job.request_id] = job
            listeners = list(self._listeners)
        for fn in listeners:
            fn(job)

    def _update(self, tag: str, state: TraceState, detail: str, files: dict[int, str] | None = None) -> None:
        with self._lock:
            job = self._jobs[tag]
        if job.state is TraceState.FAILED or (job.state is state and job.detail == detail and files is None):
            return
        self._publish(replace(job, state=state, detail=detail[:300], files=files if files is not None else job.files))

    def _on_state(self, tag: str) -> Callable[[str, str], None]:
        """A :func:`fetch_trace` callback: the agent's states as this job's."""

        def on_state(state_s: str, detail: str) -> None:
            state = STATE_BY_VALUE.get(state_s) or EXTRA_STATES.get(state_s)
            if state is not None and state not in (TraceState.DONE, TraceState.FAILED):
                self._update(tag, state, detail)  # done / failed come from the response itself

        return on_state

    def _run(self, tag: str, req: TraceRequest, out: Future[TraceResult]) -> None:
        try:
            self._fetch(tag, req, out)
        finally:
            if not out.done():  # a bug (a listener's, say): the caller is told, never left waiting
                err = sys.exc_info()[1]
                out.set_exception(RuntimeError(f"trace through {self.host} failed: "
                                               f"{type(err).__name__ if err else 'stopped'}: {err}"))

    def _fetch(self, tag: str, req: TraceRequest, out: Future[TraceResult]) -> None:
        started = time.monotonic()
        try:
            result = _result(fetch_trace(self.source, self.host, req, tag, self._on_state(tag)))
        except (GpulensError, OSError, TimeoutError, CancelledError) as err:  # every failure: the job's reason
            why = str(err) or type(err).__name__
            if isinstance(err, TimeoutError):
                why = f"the agent on {self.host} sent no trace within {trace_wait_s(req):.0f} s"
            with self._lock:
                for pid in req.pids:
                    self._failures[pid] = why
            self._update(tag, TraceState.FAILED, why)
            out.set_exception(err)
            return
        result = replace(result, request_id=tag, elapsed_s=time.monotonic() - started)
        with self._lock:
            for pid in result.files:
                self._failures.pop(pid, None)  # an older failure no longer explains anything
        if result.files:
            said = [f"pid {p}: {w}" for p, w in sorted(result.missing.items())]
            said += [f"pid {p}: {n}" for p, n in sorted(result.notes.items())]
            self._update(tag, TraceState.DONE, "; ".join(said) or f"received from {self.host}", dict(result.files))
        else:
            why = "; ".join(f"pid {p}: {w}" for p, w in sorted(result.missing.items())) or "the agent sent no trace"
            self._update(tag, TraceState.FAILED, why)
        out.set_result(result)


class PollerCache:
    """The agent's ``trace_processes`` answer as PollingProcess entries, re-asked at most once a second."""

    def __init__(self, source: Requester, host: str) -> None:
        self._source = source
        self._host = host
        self._cache: list[PollingProcess] = []
        self._at = float("-inf")
        self._asking = False
        self._lock = threading.Lock()

    def get(self) -> list[PollingProcess]:
        """The cached entries; a refresh starts on a thread when they are over CACHE_S old."""
        with self._lock:
            stale = time.monotonic() - self._at > CACHE_S and not self._asking
            if stale:
                self._asking = True
            cached = list(self._cache)
        if stale:
            threading.Thread(target=self.refresh, name="gpulens-trace-pollers", daemon=True).start()
        return cached

    def refresh(self) -> list[PollingProcess]:
        """Ask now (blocking); an error leaves no entries (diagnose then says the pid does not poll)."""
        try:
            got = _pollers(ask(self._source, self._host, TraceProcessesParams(), 5.0).result(timeout=6).answer)
        except (StreamError, TimeoutError, CancelledError):
            got = []
        with self._lock:
            self._cache, self._at, self._asking = got, time.monotonic(), False
            return list(got)


def _pollers(answer: TraceProcessesAnswer) -> list[PollingProcess]:
    """The answer's pollers (types checked when it was decoded; a pid of 0 or less left out)."""
    now = time.monotonic()
    return [
        PollingProcess(e.pid, e.ancestors[:64], e.job_id, None, now, now,
                       interval_s=e.interval_s if e.interval_s is not None and 0 < e.interval_s < 3600 else None,
                       busy=e.busy)
        for e in answer.processes[:4096] if e.pid > 0
    ]


def _result(got: Received) -> TraceResult:
    """The agent's answer as a TraceResult: pids as numbers, malformed ones left out."""
    return TraceResult(
        request_id="",
        files={int(pid_s): str(path) for pid_s, (_name, path) in got.files.items()},
        missing={int(pid_s): why[:300] for pid_s, why in got.missing.items() if is_pid_text(pid_s)},
        notes={int(pid_s): note[:300] for pid_s, note in got.notes.items()},
    )
