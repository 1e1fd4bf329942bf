"""Deterministic app factories shared by the TUI tests and scripts/make_screenshots.py."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from gpulens.collectors.demo import DemoSource
from gpulens.tui.app import GpulensApp

from gpulens.config import Config, Panel

FROZEN = 1_700_000_000.0


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


class FakeTraceService:
    """A test double of gpulens.ipc's trace service: which pids poll the endpoint."""

    def __init__(self, pids: set[int]) -> None:
        self.pids = pids

    def polling_pids(self) -> set[int]:
        return set(self.pids)


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
