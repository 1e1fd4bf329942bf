"""Bounds on what gpulens reads from files: size, gzip expansion, records.

A file given to ``gpulens flame`` or ``gpulens analyze`` (or opened from the
TUI) may be hostile: a gzip bomb, a FIFO that never delivers, a device. So:

* only regular files are read: the path is checked with ``stat`` and then
  opened ``O_NONBLOCK`` and checked again with ``fstat`` (a FIFO with no
  writer, a device or a socket is refused, never waited on);
* the bytes read, after gzip decompression, may not exceed ``max_bytes``
  (``--max-mib``), nor ``max_ratio`` times the file's size (``--max-ratio``;
  real traces and profiles compress 7-30x, gzip bombs 1000x), with a floor of
  :data:`RATIO_FLOOR_BYTES` so small files are never refused for their ratio.
  Both are enforced while decompressing, chunk by chunk;
* the number of records a parser builds (trace events, JSON objects, folded
  lines, pickle objects) may not exceed ``max_events`` (``--max-events``).

Every refusal is one sentence naming the file, the limit and the flag that
raises it: an :class:`InputRefused`, which each importer turns into its own
error class by its ``problem`` (an :class:`InputProblem`: why, as a value).
"""

from __future__ import annotations

import enum
import gzip
import os
import stat
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from gpulens.core.errors import ConfigError, ConfigProblem, GpulensError

MiB = 1 << 20
DEFAULT_MAX_RATIO = 100.0
RATIO_FLOOR_BYTES = 1 * MiB
DEFAULT_MAX_EVENTS = 20_000_000
FLAME_MAX_MIB = 1024
"""Default ``--max-mib`` of ``gpulens flame`` (profiles are parsed into Python objects)."""
ANALYZE_MAX_MIB = 4096
"""Default ``--max-mib`` of ``gpulens analyze`` (traces are decoded into compact records)."""
CHUNK = 4 * MiB

Progress = Callable[[float, str], None]


class InputProblem(enum.Enum):
    """Why an input is refused: what a caller or a test compares, not the sentence."""

    CANNOT_OPEN = "cannot open"
    """Missing or unreadable (or a path component that is a link)."""
    NOT_REGULAR = "not a regular file"
    """A directory, device, FIFO or socket: refused before any blocking open."""
    TOO_LARGE = "too large"
    """Over ``--max-mib`` (on disk or once unpacked)."""
    TOO_COMPRESSED = "too compressed"
    """Unpacks to over ``--max-ratio`` times its size: a gzip bomb."""
    DAMAGED_GZIP = "damaged gzip"
    """Gzip data that is damaged or cut short."""


class InputRefused(GpulensError):
    """An input gpulens will not read; the message names the file and why.

    ``problem`` (an :class:`InputProblem`) is the reason as a value; ``str(err)`` is the sentence.
    """

    title = "input refused"

    def __init__(self, message: str, *, problem: InputProblem) -> None:
        super().__init__(message)
        self.problem = problem

    def __reduce__(self) -> tuple[object, ...]:
        """Pickled with its reason."""
        return (_input_refused, (str(self), self.problem))


def _input_refused(message: str, problem: InputProblem) -> InputRefused:
    return InputRefused(message, problem=problem)


@dataclass(frozen=True, slots=True)
class InputLimits:
    """What one input may cost; each field has the command-line flag that sets it."""

    max_bytes: int
    """Bytes after decompression (``--max-mib``, in MiB on the command line)."""
    max_ratio: float = DEFAULT_MAX_RATIO
    """Decompressed bytes per byte of the file (``--max-ratio``)."""
    max_events: int = DEFAULT_MAX_EVENTS
    """Records a parser may build: events, JSON objects, lines, snapshot containers (``--max-events``)."""


def too_many(source: str, count_text: str, limit: int) -> str:
    """The one-line message for a record count over ``--max-events``."""
    return f"{source}: more than {limit} {count_text}; that is the --max-events limit (raise it with --max-events N)"


def _mib(n: float) -> str:
    return f"{n / MiB:.3g}"


def _kind(mode: int) -> str | None:
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISFIFO(mode):
        return "a pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def open_regular(path: str, what: str = "file") -> tuple[int, int]:
    """Open ``path`` for reading only if it is a regular file; returns (fd, size in bytes).

    Refused before any blocking open: a directory, device, FIFO or socket
    (a FIFO with no writer would block forever, a device never ends).

    Raises:
        InputRefused: missing, unreadable or not a regular file.
    """
    try:
        kind = _kind(os.stat(path).st_mode)
    except OSError as err:
        raise InputRefused(f"{path}: cannot open: {err.strerror or err}", problem=InputProblem.CANNOT_OPEN) from None
    if kind is not None:
        raise InputRefused(f"{path}: {kind}, not a {what}; it is not a regular file, and gpulens reads "
                           "only regular files (save it to a file first)", problem=InputProblem.NOT_REGULAR)
    from gpulens.core.safefs import (  # not at import: the CLI parser loads this module
        UnsafePath,
        closed_on_error,
        open_regular_at,
    )

    try:
        # O_NONBLOCK + fstat: a FIFO swapped in after the stat still cannot block the open.
        fd = open_regular_at(None, path, owner=None, max_bytes=1 << 62)
    except UnsafePath as err:
        raise InputRefused(f"{path}: not read: {err}", problem=InputProblem.CANNOT_OPEN) from None
    with closed_on_error(fd):
        size = os.fstat(fd).st_size
    return fd, size


def read_input(
    path: str,
    limits: InputLimits,
    *,
    what: str = "file",
    progress: Progress | None = None,
) -> bytearray:
    """The contents of a regular file, gunzipped when it starts with the gzip magic.

    Decompression is streamed in :data:`CHUNK` pieces and stops as soon as
    the output passes ``limits.max_bytes`` or ``limits.max_ratio`` times the
    file size (at least :data:`RATIO_FLOOR_BYTES`). ``progress`` gets a
    fraction of the file read in [0, 0.8] (the rest is the caller's parsing).

    Raises:
        InputRefused: unreadable, not a regular file, damaged gzip, or over a limit.
    """
    fd, size = open_regular(path, what)
    with os.fdopen(fd, "rb") as raw:
        if size > limits.max_bytes:
            raise InputRefused(f"{path}: {_mib(size)} MiB is over the {_mib(limits.max_bytes)} MiB limit "
                               "(the --max-mib limit; raise it with --max-mib)", problem=InputProblem.TOO_LARGE)
        try:
            magic = raw.read(2)
            raw.seek(0)
        except OSError as err:
            raise InputRefused(f"{path}: cannot read: {err.strerror or err}", problem=InputProblem.CANNOT_OPEN) from None
        gz = magic == b"\x1f\x8b"
        # min() first: --max-ratio inf means no ratio limit, and int(inf) would raise.
        by_ratio = max(int(min(size * limits.max_ratio, limits.max_bytes)), RATIO_FLOOR_BYTES) if gz \
            else limits.max_bytes
        cap = min(limits.max_bytes, by_ratio)
        stream = gzip.GzipFile(fileobj=raw) if gz else raw
        buf = bytearray()
        try:
            while True:
                chunk = stream.read(min(CHUNK, cap + 1 - len(buf)))
                if not chunk:
                    break
                buf += chunk
                if len(buf) > cap:
                    raise _over(path, size, cap, by_ratio, limits)
                if progress is not None and size:
                    progress(min(raw.tell() / size, 1.0) * 0.8, "reading")
        except (EOFError, zlib.error, gzip.BadGzipFile) as err:
            raise InputRefused(f"{path}: damaged or truncated gzip data: {err}", problem=InputProblem.DAMAGED_GZIP) from None
        except OSError as err:
            raise InputRefused(f"{path}: cannot read: {err.strerror or err}", problem=InputProblem.CANNOT_OPEN) from None
    return buf


def _over(path: str, size: int, cap: int, by_ratio: int, limits: InputLimits) -> InputRefused:
    if cap == by_ratio and by_ratio < limits.max_bytes:
        return InputRefused(f"{path}: unpacks to more than {_mib(cap)} MiB uncompressed, over {limits.max_ratio:g}x "
                            f"its {size}-byte file (the --max-ratio limit against gzip bombs; raise it with --max-ratio)",
                            problem=InputProblem.TOO_COMPRESSED)
    return InputRefused(f"{path}: more than {_mib(cap)} MiB uncompressed "
                        "(the --max-mib limit; raise it with --max-mib)", problem=InputProblem.TOO_LARGE)


def checked_limits(max_mib: int, max_ratio: float, max_events: int) -> InputLimits:
    """The limits ``--max-mib``, ``--max-ratio`` and ``--max-events`` ask for.

    Raises:
        ConfigError: a limit that is not a positive number.
    """
    if max_mib < 1:
        raise ConfigError(where="--max-mib", expected="1 MiB or more", got=max_mib, problem=ConfigProblem.OUT_OF_RANGE)
    if not max_ratio >= 1:  # also NaN
        raise ConfigError(where="--max-ratio", expected="1 or more", got=max_ratio, problem=ConfigProblem.OUT_OF_RANGE,
                          detail=f"expected 1 or more, got {max_ratio:g}")
    if max_events < 1:
        raise ConfigError(where="--max-events", expected="1 or more", got=max_events, problem=ConfigProblem.OUT_OF_RANGE)
    return InputLimits(max_bytes=max_mib * MiB, max_ratio=max_ratio, max_events=max_events)
