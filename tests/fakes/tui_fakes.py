"""Deterministic app factories and Pilot helpers shared by the TUI tests and scripts/make_screenshots.py."""

from __future__ import annotations

import asyncio
import functools
import os
import time
from collections.abc import Callable, Coroutine, Hashable, Iterator
from concurrent.futures import Future
from typing import Any

import pytest
from msgspec import UnsetType
from textual.pilot import Pilot

from gpulens.core.config import WINDOWS, Config, Panel
from gpulens.core.events import PanelData, RequestParams, RequestResult, Source
from gpulens.ipc.errors import RequestFailed
from gpulens.ipc.request_schema import (
    ProgressEvent,
    TraceAnswer,
    TraceDiagnoseAnswer,
    TraceDiagnoseParams,
    TraceParams,
    TraceStatusAnswer,
)
from gpulens.sources.demo import DemoSource
from gpulens.store.store import Store
from gpulens.tui.app import GpulensApp
from gpulens.tui.widgets._table import IncrementalTable
from tests.fakes.request_source import Answered, FakeAgent

FROZEN = 1_700_000_000.0


def sync(fn: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test with asyncio (no async pytest plugin is installed)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        asyncio.run(fn(*args, **kwargs))

    return wrapper


def heat_key(key: Hashable) -> tuple[str, int]:
    """A GpuHeatmap row key as (host, GPU index): the rows of a LazyLines are only Hashable."""
    assert isinstance(key, tuple)
    host, gpu = key
    assert isinstance(host, str) and isinstance(gpu, int), key
    return host, gpu


def cell(table: IncrementalTable, row: str, column: str) -> str:
    """The text a table keeps for one cell (``row``: the row's key, ``column``: a ``COLUMNS`` key);
    KeyError for a row it does not show."""
    index = next(i for i, c in enumerate(table.COLUMNS) if c[0] == column)
    return table._cells[row][index]


async def settle(app: GpulensApp, pilot: Pilot[Any]) -> None:
    """Let the app mount and draw, then refresh its data from the store once more."""
    for _ in range(3):
        await pilot.pause()
    app.refresh_data(force=True)
    await pilot.pause()


def frozen_clock() -> float:
    """The one instant every deterministic render uses."""
    return FROZEN


def pin_timezone() -> None:
    """UTC, so the header clock reads the same everywhere (for scripts; tests use ``utc``)."""
    os.environ["TZ"] = "UTC"
    time.tzset()


@pytest.fixture
def utc() -> Iterator[None]:
    """UTC for one test, then the previous time zone again."""
    old = os.environ.get("TZ")
    pin_timezone()
    yield
    if old is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = old
    time.tzset()


def demo_app(backfill_s: float = 300, panels: tuple[Panel, ...] = (), **kw: Any) -> GpulensApp:
    """The demo fleet (seed 7) at a frozen clock, history loaded synchronously."""
    source = DemoSource(seed=7, clock=frozen_clock, live=False, backfill_s=backfill_s)
    return GpulensApp(source=source, cfg=Config(panels=panels), clock=frozen_clock, **kw)


class StaticSource:
    """A test double of a Source: hands over fixed events when started."""

    def __init__(self, events: list[Any], name: str = "static") -> None:
        self.events = events
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    @property
    def simulated(self) -> bool:
        return False

    def start(self, emit: Any) -> None:
        for e in self.events:
            emit(e)

    def stop(self) -> None:
        pass


class FakeProfiler:
    """A test double of ``sources.profiling.LocalProfiler`` (``agent.pyspy``): hands back what it is given.

    ``sample``: ``(pids, duration_s) -> Sampled``; ``dump``: ``pid -> Profile``; every call is in ``calls``.
    """

    def __init__(self, sample: Callable[[list[int], float], Any] | None = None,
                 dump: Callable[[int], Any] | None = None) -> None:
        self._sample = sample
        self._dump = dump
        self.calls: list[tuple[str, object]] = []

    def sample_counted(self, pids: list[int], duration_s: float, rate_hz: int = 100, *,
                       count_threads: bool = True, cancel: Callable[[], bool] | None = None) -> Any:
        self.calls.append(("sample", (pids, duration_s)))
        assert self._sample is not None, "this fake does not sample"
        return self._sample(pids, duration_s)

    def dump(self, pid: int) -> Any:
        self.calls.append(("dump", pid))
        assert self._dump is not None, "this fake does not dump"
        return self._dump(pid)


class ProfilingSource(StaticSource):
    """A StaticSource that runs (fake) py-spy on this machine, as ``LocalSource`` given a ``profiler``."""

    def __init__(self, events: list[Any], profiler: FakeProfiler, name: str = "static") -> None:
        super().__init__(events, name=name)
        self.profiler = profiler


class AgentSource(StaticSource):
    """A StaticSource with agents behind it (a ``RequestSource``): requests go to ``agent``, a scripted FakeAgent."""

    def __init__(self, events: list[Any], agent: FakeAgent, name: str = "fake agents") -> None:
        super().__init__(events, name=name)
        self.agent = agent

    def request(self, host: str, params: RequestParams, timeout_s: float) -> Future[RequestResult]:
        """Through :attr:`agent`."""
        return self.agent.request(host, params, timeout_s)


class FakeRequestSource(AgentSource):
    """A StaticSource whose agents (a :class:`~tests.fakes.request_source.FakeAgent`) answer as a tracing agent does.

    ``trace`` writes ``trace_json`` under ``download_dir`` (as a StreamSource
    saves the chunks) and answers with its name; ``trace_status`` reports the
    progress events given; ``fail`` makes every trace fail with that reason;
    ``trace_diagnose`` answers from ``reasons`` (pid -> why, None: traceable).
    :attr:`requests` is every request, as ``(host, kind, params)``.
    """

    def __init__(self, events: list[Any], download_dir: Any, trace_json: str,
                 status: tuple[tuple[str, str], ...] = (("waiting for poll", "config handed over"),),
                 fail: str | None = None, reasons: dict[int, str | None] | None = None) -> None:
        super().__init__(events, FakeAgent({"trace_status": lambda host, params: self._status(),
                                            "trace_diagnose": lambda host, params: self._diagnose(params),
                                            "trace": lambda host, params: self._trace(params)}))
        self.download_dir = download_dir
        self.trace_json = trace_json
        self.status = status
        self.fail = fail
        self.reasons = reasons or {}
        self.requests = self.agent.asked

    def _status(self) -> TraceStatusAnswer:
        events = tuple(ProgressEvent(state=s, detail=d) for s, d in self.status)
        return TraceStatusAnswer(state=events[-1].state, first=0, events=events)

    def _diagnose(self, params: RequestParams) -> TraceDiagnoseAnswer:
        assert isinstance(params, TraceDiagnoseParams)
        return TraceDiagnoseAnswer(reasons={str(p): self.reasons.get(p) for p in params.pids})

    def _trace(self, params: RequestParams) -> Answered | RequestFailed:
        if self.fail:
            return RequestFailed(self.fail)
        assert isinstance(params, TraceParams) and not isinstance(params.pids, UnsetType)
        pid = params.pids[0]
        name = f"{pid}-trace_{pid}.json"
        path = self.download_dir / name
        path.write_text(self.trace_json)
        return Answered(TraceAnswer(files={str(pid): name}, missing={}), {name: path})


class FakeContext:
    """A ScreenContext without the app: a store fed with ``events``, a frozen clock, window 5m.

    Lets a screen run in a plain ``App`` (``HostScreen(host, context=FakeContext(...))``).
    """

    def __init__(self, source: Source, events: list[Any], *, hostname: str = "this-host",
                 trace_service: Any = None) -> None:
        self.store = Store()
        self.store.apply_many(events)
        self.source = source
        self.cfg = Config()
        self.window = "5m"
        self.paused = False
        self.readonly = False
        self.hostname = hostname
        self.collects_here = True
        """As the local collector: a test of an impostor sets it False."""
        self.trace_service = trace_service
        self.trace_error: str | None = None

    @property
    def window_s(self) -> float:
        return float(WINDOWS[self.window])

    def clock(self) -> float:
        return FROZEN

    def clock_text(self, t: float | None = None) -> str:
        return time.strftime("%H:%M:%S", time.gmtime(FROZEN if t is None else t))

    def down_since(self, host: str) -> float | None:
        return None

    def down_hosts(self) -> dict[str, float]:
        return {}

    def panel_data(self, panel: Panel, host: str | None, job: str | None) -> PanelData:
        return PanelData(error="no custom panels here")
