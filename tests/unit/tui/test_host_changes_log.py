"""Issue 31 item 12: a host going DOWN and coming back is said in ``:log`` (it was not)."""

from __future__ import annotations

from gpulens.core import logbook
from gpulens.core.events import HostStatusEvent, SampleEvent
from gpulens.tui.app import GpulensApp
from gpulens.tui.host_changes import note_change
from tests.fakes.tui_fakes import FROZEN, StaticSource, frozen_clock, settle, sync
from tests.unit.store.test_store import sample


def test_only_changes_are_news() -> None:
    changes: dict[str, tuple[bool, float]] = {}
    up = HostStatusEvent(host="n7", up=True, reason="", time=100.0)
    assert note_change(changes, up) is None  # first seen up: no news
    assert note_change(changes, HostStatusEvent(host="n7", up=False, reason="connection lost", time=130.0)) == (
        "host n7 DOWN: connection lost")
    assert note_change(changes, HostStatusEvent(host="n7", up=False, reason="still", time=140.0)) is None
    assert note_change(changes, HostStatusEvent(host="n7", up=True, reason="", time=175.0)) == (
        "host n7 is up again after 45s DOWN")
    assert changes["n7"] == (True, 175.0)
    assert note_change({}, HostStatusEvent(host="n8", up=False, reason="refused", time=1.0)) == "host n8 DOWN: refused"


@sync
async def test_the_log_screen_has_them() -> None:
    before = len(logbook.entries())
    events = [SampleEvent(sample(FROZEN, host="n7")),
              HostStatusEvent(host="n7", up=False, reason="agent killed", time=FROZEN + 1),
              HostStatusEvent(host="n7", up=True, reason="", time=FROZEN + 12)]
    app = GpulensApp(source=StaticSource(events), clock=frozen_clock)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        said = [e.message for e in logbook.entries()[before:]]
        assert "host n7 DOWN: agent killed" in said and "host n7 is up again after 11s DOWN" in said
        app.jump("log")
        await settle(app, pilot)
        assert type(app.screen).__name__ == "LogScreen"
