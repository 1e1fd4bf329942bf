"""gpulens' log: the warnings it shows, kept in memory for the TUI's ``:log`` view and in a file.

Every module logs through ``logging.getLogger("gpulens…")``. :func:`install`
(called once by the command line) attaches:

- an in-memory ring of the last :data:`RING_SIZE` records (warnings and above,
  or everything with ``--debug``), read with :func:`entries` — the TUI's
  ``:log`` view and its notifications land here too (:func:`note`);
- a file, when ``--log-file FILE`` is given, or with ``--debug`` alone the
  state directory's ``gpulens.log`` (:func:`gpulens.core.dirs.state_dir`),
  because a TUI owns the terminal and cannot print. The file is opened
  ``O_APPEND|O_NOFOLLOW``, mode 0600, and rotated at :data:`MAX_LOG_BYTES`
  (one old copy, ``.1``), so a long-lived agent cannot fill a small home.

Messages are sanitized (:mod:`gpulens.core.sanitize`) before they are kept:
a hostile peer's text cannot put escape sequences into the file or the view.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from gpulens.core.sanitize import clean_text

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
        except Exception:  # a bad %-format in someone's log call must not kill the caller
            message = clean_text(str(record.msg))
        self.records.append(LogEntry(record.created, record.levelname, record.name, message))
        self.version += 1


class _SafeFile(logging.Handler):
    """Appends to a file opened without following a link; rotates at ``max_bytes``."""

    def __init__(self, path: Path, max_bytes: int) -> None:
        super().__init__()
        self.path = path
        self.max_bytes = max_bytes
        self._fd = _open_log(path)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = clean_text(self.format(record)).replace("\n", " ") + "\n"
            data = line.encode("utf-8", "replace")
            if os.fstat(self._fd).st_size + len(data) > self.max_bytes:
                self._rotate()
            os.write(self._fd, data)
        except OSError:
            self.handleError(record)

    def _rotate(self) -> None:
        os.close(self._fd)
        with contextlib.suppress(OSError):
            os.replace(self.path, self.path.with_name(self.path.name + ".1"))
        self._fd = _open_log(self.path)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)
        super().close()


def _open_log(path: Path) -> int:
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    return os.open(path, flags, 0o600)


_lock = threading.Lock()
_ring = _Ring(RING_SIZE)
_file: _SafeFile | None = None


def install(log_file: Path | None = None, debug: bool = False) -> Path | None:
    """Attach the ring (always) and the file (``log_file``, or the state dir's with ``debug``).

    Returns the file written, if any. Raises OSError (with the file name) when
    the file cannot be opened, so ``--log-file /nonexistent/x`` is one clear line.
    Idempotent: a second call replaces the file handler.
    """
    global _file
    from gpulens.core.dirs import state_dir

    root = logging.getLogger(ROOT_LOGGER)
    level = logging.DEBUG if debug else logging.WARNING
    with _lock:
        # Without --debug the logger keeps inheriting (the agent's stderr log at INFO still works);
        # the ring and the file take warnings and above.
        root.setLevel(logging.DEBUG if debug else logging.NOTSET)
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
        try:
            handler = _SafeFile(target, MAX_LOG_BYTES)
        except OSError as err:
            raise OSError(err.errno, err.strerror, str(target)) from err
        handler.setLevel(level)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
        _file = handler
        return target


def note(message: str, level: int = logging.WARNING, logger: str = "gpulens.tui") -> None:
    """Record something the user was shown (a TUI notification) so ``:log`` keeps it."""
    logging.getLogger(logger).log(level, "%s", message)
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
