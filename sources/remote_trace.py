"""RemoteTraceService: the profiler screen's trace service for a job on another host.

The host's agent owns the Kineto endpoint there; this service speaks to it
through the source's ``request(host, kind, params, timeout_s)`` (a
StreamSource, possibly inside MultiSource / RecordingSource). It offers the
methods :class:`~gpulens.tui.screens.profiler.ProfilerScreen` calls on
``LocalTraceService``: ``polling_pids``, ``diagnose``, ``request_trace``,
``jobs`` and ``add_listener`` / ``remove_listener``.

A trace is one ``trace`` request with a random tag; a worker thread follows
its progress with ``trace_status`` (``gpulens.sources.tracing``, the code
``gpulens trace --host`` uses) and turns each reported state into a
:class:`TraceJob` for the listeners. The agent sends the file back in chunks;
the source saves it under its download directory, and the job's ``files``
point there, so View / Analyze / Export work on the local copy.
"""

from __future__ import annotations

import secrets
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

from gpulens.ipc.kineto.requests import TraceJob, TraceRequest, TraceResult, TraceState
from gpulens.sources.tracing import _follow, trace_params

JobListener = Callable[[TraceJob], None]
STATE_BY_VALUE = {s.value: s for s in TraceState}
# The agent's own progress states that are not TraceStates.
EXTRA_STATES = {"requested": TraceState.WAITING_FOR_POLL, "sending": TraceState.WRITING}


_services: weakref.WeakKeyDictionary[Any, dict[str, RemoteTraceService]] = weakref.WeakKeyDictionary()


def service_for(app: Any, host: str, polling: Callable[[], Iterable[int]]) -> RemoteTraceService:
    """``app``'s service for ``host`` (kept, so its trace list survives leaving the profiler)."""
    per_app = _services.setdefault(app, {})
    if host not in per_app:
        per_app[host] = RemoteTraceService(app.source, host, polling)
    return per_app[host]


class RemoteTraceService:
    """Trace processes on ``host`` through its agent; ``polling`` reads which pids poll there."""

    def __init__(self, source: Any, host: str, polling: Callable[[], Iterable[int]]) -> None:
        self.source = source
        self.host = host
        self._polling = polling
        self._jobs: dict[str, TraceJob] = {}
        self._failures: dict[int, str] = {}
        self._listeners: list[JobListener] = []
        self._lock = threading.Lock()

    @property
    def address(self) -> str:
        """Where the traces are taken (shown in the profiler's title)."""
        return f"the agent on {self.host}"

    def polling_pids(self) -> set[int]:
        """Pids the agent's latest sample marks as polling its Kineto endpoint."""
        return set(self._polling())

    def diagnose(self, pid: int) -> str | None:
        """None while ``pid`` polls the agent's endpoint, else why it cannot be traced."""
        if pid in self.polling_pids():
            return None
        with self._lock:
            failed = self._failures.get(pid)
        if failed:
            return f"the agent on {self.host} says: {failed}"
        return (f"it does not poll the Kineto endpoint of the agent on {self.host} (start it with "
                "KINETO_USE_DAEMON=1 and the agent's KINETO_IPC_SOCKET_DIR)")

    def jobs(self) -> list[TraceJob]:
        """Every trace this service started, oldest first."""
        with self._lock:
            return list(self._jobs.values())

    def add_listener(self, fn: JobListener) -> None:
        """Call ``fn(job)`` on every state change (from a worker thread, or the caller's)."""
        with self._lock:
            self._listeners.append(fn)

    def remove_listener(self, fn: JobListener) -> None:
        """Stop calling ``fn``."""
        with self._lock:
            if fn in self._listeners:
                self._listeners.remove(fn)

    def request_trace(self, req: TraceRequest) -> Future[TraceResult]:
        """Ask the agent for a trace of ``req``; the Future holds the local copies' paths.

        The Future fails with the agent's reason (RequestFailed), or a
        TimeoutError when the agent sends nothing in time.
        """
        tag = secrets.token_hex(8)
        out: Future[TraceResult] = Future()
        self._publish(TraceJob(tag, req, req.pids, TraceState.WAITING_FOR_POLL,
                               f"sent to the agent on {self.host}", time.monotonic()))
        threading.Thread(target=self._run, args=(tag, req, out), name="gpulens-remote-trace",
                         daemon=True).start()
        return out

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

    def _say(self, tag: str) -> Callable[[str], None]:
        """A ``_follow`` callback: its lines are ``state: detail``."""

        def say(line: str) -> None:
            state_s, sep, detail = line.partition(": ")
            state = STATE_BY_VALUE.get(state_s) or EXTRA_STATES.get(state_s)
            if sep and state is not None and state not in (TraceState.DONE, TraceState.FAILED):
                self._update(tag, state, detail)  # done / failed come from the response itself

        return say

    def _run(self, tag: str, req: TraceRequest, out: Future[TraceResult]) -> None:
        started = time.monotonic()
        timeout = req.timeout_s + 60.0
        try:
            fut = self.source.request(self.host, "trace", trace_params(req, tag), timeout)
            _follow(self.source, self.host, tag, fut, self._say(tag))
            res = fut.result(timeout=timeout + 30)
            result = self._files(res, req)
        except Exception as err:  # every failure becomes the job's reason
            why = str(err) or type(err).__name__
            if isinstance(err, TimeoutError):
                why = f"the agent on {self.host} sent no trace within {timeout:.0f} s"
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
            missing = "; ".join(f"pid {p}: {w}" for p, w in sorted(result.missing.items()))
            self._update(tag, TraceState.DONE, missing or f"received from {self.host}", dict(result.files))
        else:
            why = "; ".join(f"pid {p}: {w}" for p, w in sorted(result.missing.items())) or "the agent sent no trace"
            self._update(tag, TraceState.FAILED, why)
        out.set_result(result)

    def _files(self, res: Any, req: TraceRequest) -> TraceResult:
        """Map the response's ``{pid: name}`` onto the files the source downloaded."""
        body = res.result if isinstance(res.result, dict) else {}
        raw_names, raw_missing = body.get("files"), body.get("missing")
        names: dict[Any, Any] = raw_names if isinstance(raw_names, dict) else {}
        if not isinstance(raw_missing, dict):
            raw_missing = {}
        files: dict[int, str] = {}
        missing: dict[int, str] = {}
        for pid_s, why in raw_missing.items():
            if isinstance(pid_s, str) and pid_s.isdigit() and len(pid_s) <= 10:
                missing[int(pid_s)] = str(why)[:300]
        for pid_s, name in names.items():
            if not (isinstance(pid_s, str) and pid_s.isdigit() and len(pid_s) <= 10):
                continue
            path = res.files.get(name) if isinstance(name, str) else None
            if path is None:
                missing[int(pid_s)] = f"the agent named {str(name)[:80]!r} but sent no such file"
            else:
                files[int(pid_s)] = str(path)
        return TraceResult(request_id="", files=files, missing=missing)
