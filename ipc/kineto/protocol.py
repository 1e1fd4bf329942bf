"""TraceService: what the profiler screen, the job screen, the agent and the launcher ask of a tracer.

Two forms implement it: :class:`gpulens.ipc.kineto.service.LocalTraceService`
(this host's Kineto endpoint) and
:class:`gpulens.sources.remote_trace.RemoteTraceService` (another host's,
through its agent). It lives here, beside the trace requests, so that
``agent/``, ``sources/`` and ``tui/`` can all name it without breaking the
layers.

Usage::

    def open_profiler(service: TraceService, pid: int) -> None:
        if service.diagnose(pid) is None:
            service.add_listener(lambda job: print(job.state.value, job.detail))
            service.request_trace(TraceRequest(pids=(pid,)))
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Protocol, runtime_checkable

from gpulens.ipc.kineto.registry import PollingProcess
from gpulens.ipc.kineto.requests import TraceJob, TraceRequest, TraceResult
from gpulens.ipc.kineto.untraceable import Untraceable

JobListener = Callable[[TraceJob], None]
"""Called with a new :class:`TraceJob` snapshot on every state change (possibly from a service thread)."""


@runtime_checkable
class TraceService(Protocol):
    """Takes on-demand PyTorch traces of processes and reports their progress."""

    @property
    def address(self) -> str:
        """Where the traces are taken, for people (an endpoint address, ``the agent on HOST``)."""
        ...

    def polling_pids(self) -> set[int]:
        """Pids polling the Kineto endpoint now: the processes that can be traced."""
        ...

    def processes(self) -> list[PollingProcess]:
        """The polling processes with their job ids (empty where the registry is another host's)."""
        ...

    def diagnose(self, pid: int, /) -> Untraceable | None:
        """None when ``pid`` can be traced now, else why not (``str()``: the sentence with the fix)."""
        ...

    def jobs(self) -> list[TraceJob]:
        """Every trace job of this service, oldest first."""
        ...

    def add_listener(self, listener: JobListener, /) -> None:
        """Call ``listener(job)`` on every state change of every job."""
        ...

    def remove_listener(self, listener: JobListener, /) -> None:
        """Stop calling ``listener`` (no error when it was not added)."""
        ...

    def request_trace(self, req: TraceRequest, /) -> Future[TraceResult]:
        """Start a trace; never raises: a refusal or failure comes back as the Future's exception."""
        ...

    def stop(self) -> None:
        """Release what the service holds (the endpoint); pending local traces fail."""
        ...
