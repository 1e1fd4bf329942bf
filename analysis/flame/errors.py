"""Errors raised by the flame-graph package.

Exception tree::

    GpulensError                      (gpulens.core.errors)
    └── FlameError                    any flame-graph failure
        └── FlameFormatError          malformed profile input: names the line or field;
                                      its reason is a FlameProblem (below), the place ``at``

py-spy's own errors (``ProfilerError``: missing, failed; ``ProfilerPermissionError``;
``SamplingCancelled``) live in :mod:`gpulens.core.pyspy`: the runner
(``collectors.pyspy``) raises them, and collectors cannot import analysis.

Every error has a short ``title`` and a message a user can act on.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

from gpulens.core.errors import GpulensError


class FlameProblem(enum.Enum):
    """Why a profile cannot be read: what a caller or a test compares, not the sentence."""

    MALFORMED = "malformed"
    """A line or field of the wrong shape (the default): the sentence names it."""
    BAD_REFERENCE = "bad reference"
    """An index or id that names nothing (a frame, stack, string or parent), or a chain of them that loops."""
    TRUNCATED = "truncated"
    """Cut short, or its compressed bytes damaged: a varint or field past the end, a pickle without STOP."""
    NOT_REGULAR = "not a regular file"
    """A directory, device, FIFO or socket: refused before reading."""
    NOT_JSON = "not JSON"
    """Not valid JSON, or nested too deep to decode."""
    UNSUPPORTED = "unsupported"
    """A format gpulens does not read (named when known), or not the format it claims to be."""
    TOO_LARGE = "too large"
    """Over a limit: bytes (--max-mib, --max-ratio), records (--max-events), nodes, samples or fields."""
    UNSAFE = "unsafe"
    """A pickle that would run code or name classes: refused, not loaded."""
    NO_SAMPLES = "no samples"
    """Well formed, but nothing to build a flame graph from."""
    BAD_OPTION = "bad option"
    """A metric or view that does not apply."""


class FlameError(GpulensError):
    """Base of flame-graph errors."""

    title = "flame graph error"


class FlameFormatError(FlameError):
    """A profile file is malformed; the message names the file, line or field.

    ``problem`` (a :class:`FlameProblem`) is the reason as a value; ``at`` the line or
    field at fault as the sentence names it after the file's name (``"line 3"``,
    ``"profiles[0].samples[2]"``, ``"traceEvents[1].args"``, ``"level 2 node 0"``), or None
    where the sentence names no place in the file. ``str(err)`` is the sentence.
    """

    title = "malformed profile"

    def __init__(self, message: str, *, problem: FlameProblem = FlameProblem.MALFORMED, at: str | None = None) -> None:
        super().__init__(message)
        self.problem = problem
        self.at = at

    def __reduce__(self) -> tuple[object, ...]:
        """Pickled with its reason and place."""
        return (_flame_format_error, (str(self), self.problem, self.at))


def _flame_format_error(message: str, problem: FlameProblem, at: str | None = None) -> FlameFormatError:
    return FlameFormatError(message, problem=problem, at=at)


class Where(NamedTuple):
    """A place in a profile file: the file's name and the line or field (``at``) in it.

    Renders as the sentences name it, ``"<source>: <at>"``; :meth:`error` raises with the place as a value.
    A tuple, not a dataclass: parsers make one per event or block, and a tuple is made several times faster.
    """

    source: str
    at: str

    def __str__(self) -> str:
        return f"{self.source}: {self.at}"

    def then(self, more: str) -> Where:
        """A place inside this one: ``more`` appended as written (``".unit"``, ``"[3]"``, ``": frames"``)."""
        return Where(self.source, self.at + more)

    def error(self, detail: str, problem: FlameProblem = FlameProblem.MALFORMED) -> FlameFormatError:
        """``"<source>: <at>: <detail>"``, carrying ``at``."""
        return FlameFormatError(f"{self}: {detail}", problem=problem, at=self.at)
