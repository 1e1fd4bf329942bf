"""Errors raised while reading Chrome-trace files.

Exception tree::

    GpulensError            (gpulens.core.errors)
    └── TraceFileError      a trace that cannot be read: missing, truncated,
                            not JSON, not a Chrome trace, or larger than allowed;
                            its reason is a TraceProblem (below)
"""

from __future__ import annotations

import enum

from gpulens.core.errors import GpulensError
from gpulens.core.limits import InputProblem, InputRefused


class TraceProblem(enum.Enum):
    """Why a trace file cannot be read: what a caller or a test compares, not the sentence."""

    INVALID = "invalid"
    """Not classified further: the sentence says why (the default)."""
    CANNOT_OPEN = "cannot open"
    """Missing or unreadable (a file, or a directory that cannot be listed)."""
    REFUSED = "refused"
    """Refused before parsing (core.limits): not a regular file, damaged gzip, over --max-mib or --max-ratio
    (and a source whose gzip is damaged, met while exporting it)."""
    EMPTY = "empty"
    """No bytes at all."""
    TRUNCATED = "truncated"
    """The JSON ends early (still being written, or a copy cut short)."""
    NOT_JSON = "not JSON"
    """Not valid JSON, or nested too deep to decode."""
    NOT_A_TRACE = "not a trace"
    """JSON, but not a Chrome trace (``traceEvents`` not an array, a wrong shape)."""
    NO_EVENTS = "no events"
    """A trace with no CPU or GPU events to analyse (py-spy output, memory events only...)."""
    TOO_MANY_EVENTS = "too many events"
    """Over the --max-events limit."""
    NO_TRACE_FILES = "no trace files"
    """A directory with no trace files in it, or more files than a run may name (or an export given none)."""
    RANK_CLASH = "rank clash"
    """Two files claim the same rank."""
    UNSAFE = "unsafe"
    """A trace to copy that gpulens will not read: a symbolic link, not a regular file, another user's."""
    BAD_DESTINATION = "bad destination"
    """An export path that cannot be used as given: empty, a directory where a file goes (or the reverse),
    a parent directory that does not exist, a member name that is not a plain file name."""
    WRITE_FAILED = "write failed"
    """The export could not be written: the directory not made, the disk full, a name planted in the way."""
    OVER_LIMIT = "over the limit"
    """A trace that expands past what an export may write (``GPULENS_MAX_TRACE_BYTES``)."""
    BAD_LIMIT = "bad limit"
    """``GPULENS_MAX_TRACE_BYTES`` set to something that is not a positive number of bytes."""


class TraceFileError(GpulensError):
    """A trace file that cannot be read; the message names the file and the problem.

    ``problem`` (a :class:`TraceProblem`) is the reason as a value; ``str(err)`` is the sentence.
    """

    title = "bad trace file"

    def __init__(self, message: str, *, problem: TraceProblem = TraceProblem.INVALID) -> None:
        super().__init__(message)
        self.problem = problem

    def __reduce__(self) -> tuple[object, ...]:
        """Pickled with its reason and its class (a worker process's error reaches the parent whole)."""
        return (_trace_file_error, (str(self), self.problem, type(self)))

    @classmethod
    def refused(cls, err: InputRefused) -> TraceFileError:
        """The input guard's refusal as a trace error, with its reason."""
        return cls(str(err), problem=TraceProblem.CANNOT_OPEN if err.problem is InputProblem.CANNOT_OPEN
                   else TraceProblem.REFUSED)


def _trace_file_error(message: str, problem: TraceProblem, cls: type[TraceFileError] = TraceFileError) -> TraceFileError:
    return cls(message, problem=problem)
