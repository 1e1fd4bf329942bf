"""Pause as a frozen snapshot (issue 31 item 9): while paused, every redraw ends where the pause began.

Data keeps arriving in the store while paused; the figures and the clock a
paused screen shows must not move. :class:`Pause` remembers the store's
newest time and the clock at the pause, and :meth:`Pause.frozen` pins the
store's ``now`` there for one redraw (the app applies events and redraws on
one thread, so nothing lands in between), so a window key pressed while
paused recomputes the figures over the window that ends at the pause.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from gpulens.store.store import Store


class Pause:
    """When the pause began (store time, clock time), or nothing while not paused."""

    def __init__(self) -> None:
        self.at: tuple[float, float] | None = None

    def begin(self, store: Store, clock_now: float) -> None:
        """Remember the instant the pause began."""
        self.at = (store.now, clock_now)

    def end(self) -> None:
        """Not paused any more."""
        self.at = None

    def clock(self) -> float | None:
        """The clock at the pause (None while not paused)."""
        return None if self.at is None else self.at[1]

    @contextmanager
    def frozen(self, store: Store) -> Iterator[None]:
        """For one redraw: the store's ``now`` is the pause's (its newest data stays where it is)."""
        if self.at is None:
            yield
            return
        newest = store.now
        store.now = min(newest, self.at[0])
        try:
            yield
        finally:
            store.now = max(store.now, newest)
