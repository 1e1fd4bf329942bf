"""The one small protocol every data source implements.

A source produces :class:`SourceEvent` objects and hands them to the ``emit``
callback given to :meth:`Source.start`, from any thread. The store (and so
the TUI) consumes them; ``gpulens snapshot`` consumes them without a UI.

Sources: LocalSource (in-process collectors, the default), ReplaySource
(``--replay FILE``), DemoSource (``--demo``, says SIMULATED), StreamSource
(``--connect`` / ``--ssh``: agents over msgpack streams) and
PrometheusSource (``--prometheus URL``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from gpulens.core.model import HostSample


@dataclass(frozen=True, slots=True)
class SampleEvent:
    """A host sample: live, or backfilled history (``backfill=True``)."""

    sample: HostSample
    backfill: bool = False


@dataclass(frozen=True, slots=True)
class HostStatusEvent:
    """A host went up or down. ``host`` is the reported name, or the address
    (``host:port``, ssh host name) for a source never reached."""

    host: str
    up: bool
    reason: str
    time: float
    address: str = ""


@dataclass(frozen=True, slots=True)
class SourceStatusEvent:
    """Source-wide status for the header (e.g. "Prometheus slow: 3.2 s")."""

    message: str
    ok: bool
    time: float
    details: Mapping[str, str] = field(default_factory=dict)


SourceEvent = SampleEvent | HostStatusEvent | SourceStatusEvent
Emit = Callable[[SourceEvent], None]


class HostSampler(Protocol):
    """What reads this machine once per tick (``gpulens.collectors.sampler.Sampler``)."""

    def sample(self) -> HostSample:
        """Read everything once."""
        ...

    def close(self) -> None:
        """Release NVML and other handles."""
        ...


@runtime_checkable
class Source(Protocol):
    """A producer of source events."""

    @property
    def name(self) -> str:
        """Short description for the header, e.g. ``local``, ``3 agents``."""
        ...

    @property
    def simulated(self) -> bool:
        """True only for demo data; the UI then says SIMULATED."""
        ...

    def start(self, emit: Emit) -> None:
        """Begin producing events; returns at once (work runs in threads)."""
        ...

    def stop(self) -> None:
        """Stop producing events and release resources; idempotent."""
        ...


class RequestParams(Protocol):
    """One request's parameters: the kind it is and the frame's params map.

    ``gpulens.ipc.request_schema.Params`` (``ProfileParams(pids=(1234,))``: its class
    names the kind) is the one every viewer sends; core does not import the schema,
    so the seam names only what the link reads of it.
    """

    @property
    def kind(self) -> str:
        """The request frame's ``kind`` (``"profile"``)."""
        ...

    def wire(self) -> dict[str, object]:
        """The request frame's ``params`` map (the bytes the golden frames pin)."""
        ...


@dataclass(frozen=True, slots=True)
class RequestResult:
    """What a request returned: the agent's result, files saved, samples (history).

    ``sources.ask.ask`` decodes ``result`` into the kind's answer struct.
    """

    result: object
    """The response frame's result, as the agent sent it (cleaned, not checked)."""
    files: dict[str, Path] = field(default_factory=dict)
    """The agent's name of each file it sent -> where the source saved it."""
    samples: tuple[HostSample, ...] = ()
    """A ``history`` request's samples."""


@runtime_checkable
class Requester(Protocol):
    """Anything that can run requests on a host's agent: the one way to say "can send requests".

    A ``StreamSource`` (and the sources wrapping one) and the local control-socket
    client (``LocalAgentLink``, not a Source) both are. A viewer asks with
    ``sources.ask.ask``, which decodes the answer; this is the routing seam under it.
    """

    def request(self, host: str, params: RequestParams, timeout_s: float) -> Future[RequestResult]:
        """Send ``params`` (its kind and map) to ``host``'s agent; the Future fails with RequestFailed or TimeoutError."""
        ...


@runtime_checkable
class RequestSource(Source, Requester, Protocol):
    """A source that can run requests on a host (trace, profile, file)."""


@dataclass(frozen=True, slots=True)
class PanelData:
    """One custom panel's series, or the error to show in its place."""

    points: tuple[tuple[float, float], ...] = ()
    """(unix time, value) pairs, oldest first."""
    error: str | None = None


@runtime_checkable
class PanelProvider(Protocol):
    """Something that can fill a user-defined panel (the store, or Prometheus)."""

    def panel_series(
        self, expr: str, host: str | None, job: str | None, window_s: float
    ) -> PanelData:
        """The series for ``expr`` with ``$host``/``$job`` substituted."""
        ...
