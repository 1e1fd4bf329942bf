"""When hosts go DOWN and come back: kept for the screens' "DOWN since", and said in ``:log`` (issue 31 item 12)."""

from __future__ import annotations

from gpulens.core.events import HostStatusEvent
from gpulens.core.units import duration

Changes = dict[str, tuple[bool, float]]
"""host -> (up, time) of its last up/down change."""


def note_change(changes: Changes, e: HostStatusEvent) -> str | None:
    """Record ``e`` in ``changes``; the line for ``:log`` when the host changed state (None: no news).

    A host first seen up is no news; one first seen DOWN is.
    """
    prev = changes.get(e.host)
    if prev is not None and prev[0] == e.up:
        return None
    changes[e.host] = (e.up, e.time)
    if e.up:
        return None if prev is None else f"host {e.host} is up again after {duration(e.time - prev[1])} DOWN"
    return f"host {e.host} DOWN: {e.reason}"
