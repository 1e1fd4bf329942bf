"""Errors raised by the flame-graph package.

Exception tree::

    GpulensError                      (gpulens.core.errors)
    └── FlameError                    any flame-graph failure
        └── FlameFormatError          malformed profile input: names the line or field

py-spy's own errors (``ProfilerError``: missing, failed; ``ProfilerPermissionError``;
``SamplingCancelled``) live in :mod:`gpulens.core.pyspy`: the runner
(``collectors.pyspy``) raises them, and collectors cannot import analysis.

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

