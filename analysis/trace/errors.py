"""Errors raised while reading Chrome-trace files.

Exception tree::

    GpulensError            (gpulens.core.errors)
    └── TraceFileError      a trace that cannot be read: missing, truncated,
                            not JSON, not a Chrome trace, or larger than allowed
"""

from __future__ import annotations

from gpulens.core.errors import GpulensError


class TraceFileError(GpulensError):
    """A trace file that cannot be read; the message names the file and the problem."""

    title = "bad trace file"
