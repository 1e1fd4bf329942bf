"""Errors raised by the collectors package.

Exception tree::

    GpulensError              (gpulens.core.errors; base for every package)
    ├── ConfigError           a bad config file, flag or pattern: names file and key
    ├── SchemaError           data that does not fit the sample model: names the field
    ├── RecordingError        a --record/--replay file that is not, or no longer, readable
    ├── CollectorError        a collector that cannot start at all
    └── PrometheusError       Prometheus down, slow, answering garbage, or a bad query

Every error has a short ``title`` and a message a user can act on. A metric
that cannot be read is not an error: it is ``None`` plus a reason.
"""

from __future__ import annotations

from typing import Any


class GpulensError(Exception):
    """Base of all gpulens errors."""

    title = "gpulens error"


class ConfigError(GpulensError):
    """A configuration value is wrong; the message names where and what was expected."""

    title = "configuration error"


class SchemaError(GpulensError):
    """Plain data does not match the sample model."""

    title = "malformed data"

    def __init__(self, path: str, expected: str, got: Any) -> None:
        shown = repr(got)
        if len(shown) > 60:
            shown = shown[:57] + "..."
        super().__init__(f"{path}: expected {expected}, got {shown}")
        self.path = path
        self.expected = expected


class CollectorError(GpulensError):
    """A collector cannot run at all."""

    title = "collector error"


class PrometheusError(GpulensError):
    """Prometheus could not answer usefully; ``kind`` is ``down``, ``slow``,
    ``garbage`` or ``query`` (Prometheus' own error message, e.g. bad PromQL)."""

    title = "Prometheus error"

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class RecordingError(GpulensError):
    """A recording file is not a gpulens recording, or is corrupt or truncated.

    ``events`` holds the events read before the fault, so a viewer can show them.
    """

    title = "unreadable recording"
    events: list[Any]

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.events = []
