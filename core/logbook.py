"""gpulens' log: the warnings it shows, kept in memory for the TUI's ``:log`` view and in a file.

Every module logs through ``logging.getLogger("gpulens…")``. :func:`install`
(called once by the command line) attaches:

- an in-memory ring of the last :data:`RING_SIZE` records (warnings and above,
  or everything with ``--debug``), read with :func:`entries` — the TUI's
  ``:log`` view and its notifications land here too (:func:`note`);
- a file, when ``--log-file FILE`` is given, or with ``--debug`` alone the
  state directory's ``gpulens.log`` (:func:`gpulens.core.dirs.state_dir`),
  because a TUI owns the terminal and cannot print. The file is held by
  descriptor, mode 0600, rotated at :data:`MAX_LOG_BYTES` (one old copy,
  ``.1``), and safe in a directory other users can write such as ``/tmp``
  (:mod:`gpulens.core.logfile`): another user's file, a FIFO, a link or an
  open, non-sticky directory is refused in one line;
- one rate limit (:mod:`gpulens.core.lograte`) on both: a peer that makes
  gpulens warn thousands of times a minute (malformed Kineto datagrams)
  gets 10 lines per kind and a minute and one ``… N more like this`` count,
  not a full log and a rotation every few seconds. :func:`rate_limit` puts
  the same limit on another handler (the agent's stderr).

Messages are sanitized (:mod:`gpulens.core.sanitize`) before they are kept:
a hostile peer's text cannot put escape sequences into the file or the view.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from gpulens.core.logfile import SafeFileHandler
from gpulens.core.lograte import EXEMPT, RateLimit
from gpulens.core.sanitize import clean_text

_P = ParamSpec("_P")
_T = TypeVar("_T")

RING_SIZE = 500
MAX_LOG_BYTES = 4 << 20
ROOT_LOGGER = "gpulens"


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One record as the ``:log`` view shows it."""

    time: float
    level: str
    logger: str
    message: str


class _Ring(logging.Handler):
    """Keeps the newest records; thread-safe (handlers lock around ``emit``)."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.records: deque[LogEntry] = deque(maxlen=size)
        self.version = 0

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = clean_text(record.getMessage())
        except Exception as err:  # the log sink: a bad %-format (or __str__) in a log call must not kill the caller
            message = clean_text(f"{record.msg} (not formatted: {type(err).__name__}: {err})")
        self.records.append(LogEntry(record.created, record.levelname, record.name, message))
        self.version += 1


_lock = threading.Lock()
_ring = _Ring(RING_SIZE)
_file: SafeFileHandler | None = None
limit = RateLimit()
"""The rate limit on every handler gpulens installs (module doc)."""
_ring.addFilter(limit)


def rate_limit(handler: logging.Handler) -> logging.Handler:
    """Put gpulens' rate limit on ``handler`` too (the agent's stderr); returns it."""
    if limit not in handler.filters:
        handler.addFilter(limit)
    return handler


def _rotation_failed(message: str) -> None:
    """The file handler stopped rotating: one line on stderr and in the ring (not through logging,
    which holds the file handler's lock here)."""
    text = f"log file: {message}"
    _ring.records.append(LogEntry(time.time(), "WARNING", "gpulens.logbook", clean_text(text)))
    _ring.version += 1
    with contextlib.suppress(OSError, ValueError):  # stderr closed: the ring still has it
        print(f"gpulens: warning: {clean_text(text)}", file=sys.stderr)


def install(log_file: Path | None = None, debug: bool = False) -> Path | None:
    """Attach the ring (always) and the file (``log_file``, or the state dir's with ``debug``).

    Returns the file written, if any. Raises UnsafePath (naming the path and what
    is wrong: another user's file, a FIFO, a link, an open directory, a missing
    one) or OSError (the state directory cannot be made), so a bad
    ``--log-file`` is one clear line. Idempotent: a second call replaces the
    file handler and writes, then forgets, the rate limit's pending counts.
    """
    global _file
    from gpulens.core.dirs import state_dir

    root = logging.getLogger(ROOT_LOGGER)
    level = logging.DEBUG if debug else logging.WARNING
    with _lock:
        # Without --debug the logger keeps inheriting (the agent's stderr log at INFO still works);
        # the ring and the file take warnings and above.
        root.setLevel(logging.DEBUG if debug else logging.NOTSET)
        limit.flush(everything=True)
        _ring.setLevel(level)
        if _ring not in root.handlers:
            root.addHandler(_ring)
        if _file is not None:
            root.removeHandler(_file)
            _file.close()
            _file = None
        target = log_file
        if target is None and debug:
            target = state_dir(create=True) / "gpulens.log"
        if target is None:
            return None
        handler = SafeFileHandler(target, MAX_LOG_BYTES, warn=_rotation_failed)
        handler.setLevel(level)
        handler.addFilter(limit)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
        _file = handler
        return target


def note(message: str, level: int = logging.WARNING, logger: str = "gpulens.tui") -> None:
    """Record something the user was shown (a TUI notification) so ``:log`` keeps it."""
    logging.getLogger(logger).log(level, "%s", message, extra={EXEMPT: True})  # shown already: never dropped
    root = logging.getLogger(ROOT_LOGGER)
    if _ring not in root.handlers or not root.isEnabledFor(level) or level < _ring.level:
        # Not installed (tests, library use) or below the level: keep it in the ring anyway.
        _ring.records.append(LogEntry(time.time(), logging.getLevelName(level), logger, clean_text(message)))
        _ring.version += 1


def entries() -> tuple[LogEntry, ...]:
    """The kept records, oldest first."""
    return tuple(_ring.records)


def version() -> int:
    """Changes whenever a record is kept (cheap check for a view that redraws)."""
    return _ring.version


def log_file() -> Path | None:
    """The file being written, if any."""
    return _file.path if _file is not None else None


@dataclass(frozen=True, slots=True)
class Failure:
    """Why a guarded call (:func:`call_guarded`) failed: its error's type name and message."""

    kind: str
    message: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"


def call_guarded(log: logging.Logger, what: str, fn: Callable[_P, _T], /, *args: _P.args,
                 **kwargs: _P.kwargs) -> _T | Failure:
    """``fn(*args, **kwargs)``, or the :class:`Failure` it raised: the one place where code whose
    errors cannot all be known (a plug-in, a listener, a foreign library such as pynvml or amdsmi, an
    optional collector) is kept from stopping the thread that calls it.

    The failure is logged (``<what> failed`` with its traceback, on ``log``, rate-limited as every
    record is) and returned, so the caller can show it as a reason.
    """
    return _guarded(log, logging.WARNING, what, fn, args, kwargs)


def _guarded(log: logging.Logger, level: int, what: str, fn: Callable[..., _T], args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> _T | Failure:
    try:
        return fn(*args, **kwargs)
    except Exception as err:  # the one guard: see call_guarded
        log.log(level, "%s failed", what, exc_info=True)
        return Failure(type(err).__name__, str(err))


def call_isolated(log: logging.Logger, what: str, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> _T | None:
    """``fn(*args, **kwargs)``, or None when it raised: code plugged in from elsewhere (a listener, a provider).

    A plug-in's failure, whatever it is, is logged (``<what> failed`` with its
    traceback, on ``log``; :func:`call_guarded`) and the caller (a socket's
    thread, a job table) carries on for the others.
    """
    got = _guarded(log, logging.ERROR, what, fn, args, kwargs)
    return None if isinstance(got, Failure) else got
