"""A rate limit for log records a peer can cause: a few of each kind a minute, the rest counted.

A peer decides how often the agent warns (every malformed Kineto datagram,
every refused connection), so without a limit another user of the node can
fill the log, force its rotation every few seconds, or bury what matters.
:class:`RateLimit` is a :class:`logging.Filter` for the handlers gpulens
installs. A record's *kind* is its logger name and its message template
(``record.msg`` before %-formatting), so ``"dropped malformed Kineto
datagram: %s"`` is one kind whatever the datagram held. Each kind passes
``per_window`` records per window (60 s); the rest are dropped and counted,
and the count is written once, when the window ends::

    … 4,211 more like this in the last minute (dropped malformed Kineto datagram: %s)

The count is emitted by whoever sees the window's end first: the next record
of any kind, or a timer (``schedule``) started at the first suppression.
Records logged with ``extra={EXEMPT: True}`` (what the user was shown, the
counts themselves) always pass. One filter may sit on several handlers: the
verdict is kept on the record, so each record is counted once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

EXEMPT = "gpulens_unlimited"
"""``extra={EXEMPT: True}``: a record the limit never drops."""

_VERDICT = "_gpulens_rate_verdict"
_OTHER = ("", "(other messages)")  # where new kinds go once ``max_kinds`` are tracked
_TEMPLATE_SHOWN = 100

Schedule = Callable[[float, Callable[[], None]], None]
"""``schedule(delay_s, callback)``: run ``callback`` about ``delay_s`` seconds from now."""


@dataclass(frozen=True, slots=True)
class Suppressed:
    """How many records of one kind a window dropped."""

    logger: str
    template: str
    count: int
    level: int
    window_s: float

    def text(self) -> str:
        """``… 4,211 more like this in the last minute (template)``."""
        span = "minute" if self.window_s == 60 else f"{self.window_s:g} s"
        template = self.template
        if len(template) > _TEMPLATE_SHOWN:
            template = template[: _TEMPLATE_SHOWN - 1] + "…"
        return f"… {self.count:,} more like this in the last {span} ({template})"


@dataclass(slots=True)
class _Window:
    start: float
    level: int
    passed: int = 0
    dropped: int = 0
    scheduled: bool = False


def _timer(delay_s: float, callback: Callable[[], None]) -> None:
    t = threading.Timer(max(delay_s, 0.0), callback)
    t.daemon = True
    t.name = "gpulens-log-counts"
    t.start()


def _log_count(item: Suppressed) -> None:
    logging.getLogger(item.logger or "gpulens").log(item.level, "%s", item.text(), extra={EXEMPT: True})


class RateLimit(logging.Filter):
    """At most ``per_window`` records of one kind per ``window_s``; the rest counted (module doc)."""

    def __init__(
        self,
        per_window: int = 10,
        window_s: float = 60.0,
        *,
        max_kinds: int = 256,
        clock: Callable[[], float] = time.monotonic,
        schedule: Schedule | None = _timer,
        emit: Callable[[Suppressed], None] = _log_count,
    ) -> None:
        super().__init__()
        self.per_window = per_window
        self.window_s = window_s
        self.max_kinds = max_kinds
        self._clock = clock
        self._schedule = schedule
        self._emit = emit
        self._lock = threading.Lock()
        self._windows: dict[tuple[str, str], _Window] = {}
        self._next_end = float("inf")

    def filter(self, record: logging.LogRecord) -> bool:
        verdict = record.__dict__.get(_VERDICT)
        if isinstance(verdict, bool):
            return verdict
        due: list[Suppressed] = []
        if record.__dict__.get(EXEMPT):
            verdict = True
        else:
            verdict, due = self._decide(record)
        record.__dict__[_VERDICT] = verdict
        for item in due:  # outside the lock: emitting logs again, through this filter
            self._emit(item)
        return verdict

    def _decide(self, record: logging.LogRecord) -> tuple[bool, list[Suppressed]]:
        now = self._clock()
        with self._lock:
            due = self._expire(now, everything=False)
            key = (record.name, str(record.msg))
            window = self._windows.get(key)
            if window is None:
                if len(self._windows) >= self.max_kinds:
                    key = _OTHER
                    window = self._windows.get(key)
                if window is None:
                    window = self._windows[key] = _Window(start=now, level=record.levelno)
                    self._next_end = min(self._next_end, now + self.window_s)
            if window.passed < self.per_window:
                window.passed += 1
                return True, due
            window.dropped += 1
            window.level = max(window.level, record.levelno)
            start_timer = not window.scheduled and self._schedule is not None
            window.scheduled = True
            end = window.start + self.window_s
        if start_timer and self._schedule is not None:
            self._schedule(end - now, self._at_window_end)
        return False, due

    def _expire(self, now: float, *, everything: bool) -> list[Suppressed]:
        if not everything and now < self._next_end:
            return []
        due: list[Suppressed] = []
        next_end = float("inf")
        for key, window in list(self._windows.items()):
            end = window.start + self.window_s
            if everything or now >= end:
                del self._windows[key]
                if window.dropped:
                    due.append(Suppressed(key[0], key[1], window.dropped, window.level, self.window_s))
            else:
                next_end = min(next_end, end)
        self._next_end = next_end
        return due

    def _at_window_end(self) -> None:
        self.flush()

    def flush(self, now: float | None = None, *, everything: bool = False) -> tuple[Suppressed, ...]:
        """Write the counts of windows that ended by ``now`` (all of them with ``everything``).

        Returns what was written; the timer calls this at a window's end, and
        :func:`gpulens.core.logbook.install` with ``everything`` before it resets.
        """
        with self._lock:
            due = self._expire(self._clock() if now is None else now, everything=everything)
        for item in due:
            self._emit(item)
        return tuple(due)
