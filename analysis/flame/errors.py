"""Errors raised by the flame-graph package.

Exception tree::

    GpulensError                      (gpulens.core.errors)
    └── FlameError                    any flame-graph failure
        ├── FlameFormatError          malformed profile input: names the line or field
        └── ProfilerError             py-spy could not sample (missing, failed)
            └── ProfilerPermissionError   no ptrace permission: says how to grant it

Every error has a short ``title`` and a message a user can act on.
"""

from __future__ import annotations

from gpulens.core.errors import GpulensError


class FlameError(GpulensError):
    """Base of flame-graph errors."""

    title = "flame graph error"


class FlameFormatError(FlameError):
    """A profile file is malformed; the message names the file, line or field."""

    title = "malformed profile"


class ProfilerError(FlameError):
    """The stack sampler (py-spy) is missing or failed."""

    title = "profiler error"


class ProfilerPermissionError(ProfilerError):
    """The sampler may not attach to the process (ptrace denied)."""

    title = "no permission to sample"
