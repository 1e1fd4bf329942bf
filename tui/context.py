"""What a data screen reads: the :class:`ScreenContext` protocol, which the app provides.

Screens never import the app. They read the store, the clock, the statistics
window and the source's capabilities through this protocol, and post
navigation messages (:mod:`gpulens.tui.messages`) that the app routes.
``GpulensApp`` satisfies it; a test can hand a screen a small fake instead
(``HostScreen("node", context=fake)``) and run it in a plain ``App``.
"""

from __future__ import annotations

from typing import Protocol, cast, runtime_checkable

from gpulens.core.config import Config, Panel
from gpulens.core.events import PanelData, RequestSource, Source
from gpulens.ipc.kineto.protocol import TraceService
from gpulens.store.store import Store


@runtime_checkable
class ScreenContext(Protocol):
    """The data, state and services a screen may use (read-only for it)."""

    @property
    def store(self) -> Store:
        """Everything the sources reported, as rings and views."""
        ...

    @property
    def cfg(self) -> Config:
        """The user's configuration (custom panels, ...)."""
        ...

    @property
    def source(self) -> Source:
        """Where the data comes from: its name, SIMULATED, and whether it can send requests."""
        ...

    @property
    def window(self) -> str:
        """The statistics window's name: 1m, 5m, 15m or 1h."""
        ...

    @property
    def window_s(self) -> float:
        """The statistics window in seconds."""
        ...

    @property
    def paused(self) -> bool:
        """Redrawing is paused (``p``); data keeps being recorded."""
        ...

    @property
    def readonly(self) -> bool:
        """``--readonly``: offer no action that changes anything (no signals, no py-spy, no traces)."""
        ...

    @property
    def hostname(self) -> str:
        """This machine's name: py-spy and the local trace service reach its processes only."""
        ...

    @property
    def collects_here(self) -> bool:
        """Whether this machine's own collector (in this process) reports ``hostname``.

        A stream or Prometheus host that merely *names* itself like this machine
        is not proof: an impostor agent can (issue 27 item 6). Local signals
        need this to be True.
        """
        ...

    @property
    def trace_service(self) -> TraceService | None:
        """The trace service for this machine's processes (Kineto), or None."""
        ...

    @property
    def trace_error(self) -> str | None:
        """Why there is no trace service (shown where "Open Profiler" would be)."""
        ...

    def clock(self) -> float:
        """Now, in unix seconds (frozen in tests)."""
        ...

    def clock_text(self, t: float | None = None) -> str:
        """The clock (or time ``t``) as HH:MM:SS local time."""
        ...

    def down_since(self, host: str) -> float | None:
        """When ``host`` went down (None when up or never seen going down)."""
        ...

    def down_hosts(self) -> dict[str, float]:
        """Every host that is down now, with when it went down."""
        ...

    def panel_data(self, panel: Panel, host: str | None, job: str | None) -> PanelData:
        """A custom panel's series, or the error to show in its place."""
        ...


def requester(ctx: ScreenContext) -> RequestSource | None:
    """The context's source when it can send requests to agents (stream, multi), else None."""
    source = ctx.source
    kind = type(source)
    sends = _SENDS_REQUESTS.get(kind)
    if sends is None:  # a protocol check costs ~10 µs, and the screens ask every tick: once a class
        sends = _SENDS_REQUESTS[kind] = isinstance(source, RequestSource)
    return cast(RequestSource, source) if sends else None


_SENDS_REQUESTS: dict[type, bool] = {}
"""Whether sources of a class are :class:`RequestSource` (the same methods on every instance)."""
