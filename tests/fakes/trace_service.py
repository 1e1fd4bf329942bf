"""FakeTraceService: the one test double of :class:`gpulens.ipc.kineto.protocol.TraceService`.

It implements the whole protocol (mypy checks it against it: see ``_CHECKED``
at the end), so the screens, the agent and the owner switch see what they see
of a real service. What each test needs is set when it is made:

- who polls: ``processes`` (PollingProcess entries; :func:`poller` makes one),
  or only ``polling`` (pids, no registry entries);
- ``diagnose``: ``reasons`` (pid -> why not, None: traceable) and
  ``not_polling`` (said of any other pid that does not poll);
- ``jobs``: the jobs it holds from the start;
- what a request does: it is recorded in ``requests``; ``fail`` refuses it at
  once (no job); else the job goes through ``states``, published to the
  listeners (QUEUED first while another unfinished job shares a pid, where
  ``queues``); the Future is answered with ``files`` once the job is done
  (or at once when ``states`` is empty), else at :meth:`finish`.

Also two methods of :class:`~gpulens.ipc.kineto.service.LocalTraceService`
that are not in the protocol (mypy checks them against that class: see
``_LocalTracer``): ``rebind`` (the owner switch takes the name back with it;
``rebind_error``) and ``has_stepped`` (``gpulens trace`` warns of a process
whose last trace showed no optimizer step; ``stepped``: pid -> what it says,
None for any other pid); and ``stopped``.

Usage::

    svc = FakeTraceService(processes=[poller(4242, interval_s=1.0)], states=(TraceState.WAITING_FOR_POLL,))
    svc.request_trace(TraceRequest(pids=(4242,)))
    svc.finish(1, {4242: "/tmp/trace.json"})
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from gpulens.ipc.kineto.protocol import JobListener, TraceService
from gpulens.ipc.kineto.registry import PollingProcess
from gpulens.ipc.kineto.requests import TraceJob, TraceRequest, TraceResult, TraceState
from gpulens.ipc.kineto.untraceable import Untraceable


def poller(pid: int, *, job_id: int = 0, interval_s: float | None = None) -> PollingProcess:
    """A registry entry of ``pid``: polled three times, the last at monotonic 1.0."""
    return PollingProcess(pid, (), job_id, 0, 0.0, 1.0, polls=3, interval_s=interval_s)


class FakeTraceService:
    """A scripted TraceService (see the module docstring for what each argument does)."""

    def __init__(
        self,
        *,
        address: str = "fake trace service",
        processes: Iterable[PollingProcess] = (),
        polling: Iterable[int] | None = None,
        reasons: Mapping[int, Untraceable | None] | None = None,
        not_polling: Untraceable | None = None,
        jobs: Iterable[TraceJob] = (),
        files: Mapping[int, str] | str | None = None,
        states: Sequence[TraceState] = (),
        detail: str = "",
        queues: bool = False,
        request_id: str = "r{n}",
        fail: Exception | None = None,
        rebind_error: Exception | None = None,
        stepped: Mapping[int, bool] | None = None,
    ) -> None:
        self._address = address
        self.entries = list(processes)
        self.polling = set(polling) if polling is not None else {p.pid for p in self.entries}
        self.reasons = dict(reasons or {})
        self.not_polling = not_polling
        self._jobs: dict[str, TraceJob] = {job.request_id: job for job in jobs}
        self.files = files if isinstance(files, str) else dict(files or {})
        self.states = tuple(states)
        self.detail = detail
        self.queues = queues
        self.request_id = request_id
        self.fail = fail
        self.rebind_error = rebind_error
        self.stepped = dict(stepped or {})
        self.requests: list[TraceRequest] = []
        self.listeners: list[JobListener] = []
        self._futures: dict[str, Future[TraceResult]] = {}
        self.rebound = False
        self.stopped = False

    # -- TraceService -------------------------------------------------------------
    @property
    def address(self) -> str:
        return self._address

    def polling_pids(self) -> set[int]:
        return set(self.polling)

    def processes(self) -> list[PollingProcess]:
        return list(self.entries)

    def diagnose(self, pid: int, /) -> Untraceable | None:
        if pid in self.reasons:
            return self.reasons[pid]
        return self.not_polling if pid not in self.polling else None

    def jobs(self) -> list[TraceJob]:
        return list(self._jobs.values())

    def add_listener(self, listener: JobListener, /) -> None:
        self.listeners.append(listener)

    def remove_listener(self, listener: JobListener, /) -> None:
        if listener in self.listeners:
            self.listeners.remove(listener)

    def request_trace(self, req: TraceRequest, /) -> Future[TraceResult]:
        self.requests.append(req)
        fut: Future[TraceResult] = Future()
        if self.fail is not None:
            fut.set_exception(self.fail)
            return fut
        rid = self.request_id.format(n=len(self.requests), address=self._address)
        files = self._files_of(req.pids)
        states = self.states
        if states and self.queues and self._busy(req.pids):
            states = (TraceState.QUEUED, *states[1:])
        started = time.monotonic()
        for state in states:
            done = state is TraceState.DONE
            self.publish(TraceJob(rid, req, req.pids, state, self.detail, started, dict(files) if done else {}))
        if not states or states[-1] is TraceState.DONE:
            fut.set_result(TraceResult(rid, dict(files)))
        else:
            self._futures[rid] = fut
        return fut

    def stop(self) -> None:
        self.stopped = True

    # -- scripting ----------------------------------------------------------------
    def publish(self, job: TraceJob) -> None:
        """Hold ``job`` (replacing its earlier snapshot) and tell every listener."""
        self._jobs[job.request_id] = job
        for listener in list(self.listeners):
            listener(job)

    def finish(self, n: int, files: Mapping[int, object], detail: str = "done") -> None:
        """Job ``n`` (1-based, in the order held) is done with ``files`` (pid -> path); its request is answered."""
        job = list(self._jobs.values())[n - 1]
        paths = {pid: str(path) for pid, path in files.items()}
        self.publish(replace(job, state=TraceState.DONE, detail=detail, files=paths))
        fut = self._futures.pop(job.request_id, None)
        if fut is not None:
            fut.set_result(TraceResult(job.request_id, dict(paths)))

    # -- LocalTraceService's, beyond the protocol ----------------------------------
    def rebind(self) -> None:
        """Take the Kineto name back (raises ``rebind_error`` where given)."""
        if self.rebind_error is not None:
            raise self.rebind_error
        self.rebound = True

    def has_stepped(self, pid: int, /) -> bool | None:
        """Did the last trace of ``pid`` show optimizer steps (``stepped``; None: no trace of it seen)."""
        return self.stepped.get(pid)

    def _files_of(self, pids: tuple[int, ...]) -> dict[int, str]:
        if isinstance(self.files, str):
            return dict.fromkeys(pids, self.files)
        return {pid: self.files[pid] for pid in pids if pid in self.files}

    def _busy(self, pids: tuple[int, ...]) -> bool:
        return any(job.state not in (TraceState.DONE, TraceState.FAILED) and set(job.pids) & set(pids)
                   for job in self._jobs.values())


class _LocalTracer(TraceService, Protocol):
    """The protocol and what its callers ask of a LocalTraceService beyond it."""

    def rebind(self) -> None: ...

    def has_stepped(self, pid: int, /) -> bool | None: ...


_CHECKED: TraceService = FakeTraceService()
"""mypy checks the fake against the protocol here (and it is one at run time too)."""
assert isinstance(_CHECKED, TraceService)
_CHECKED_LOCAL: _LocalTracer = FakeTraceService()
"""... and its LocalTraceService methods against the same Protocol as the real class's (below)."""

if TYPE_CHECKING:
    from gpulens.ipc.kineto.service import LocalTraceService

    def _local_is_one(svc: LocalTraceService) -> _LocalTracer:
        return svc
