"""Turn gpulens errors into one clear line on stderr."""

from __future__ import annotations

import sys

from gpulens.core.errors import GpulensError


def report(err: BaseException) -> int | None:
    """Print ``gpulens: <title>: <message>`` for a GpulensError; exit code or None."""
    if isinstance(err, GpulensError):
        print(f"gpulens: {err.title}: {err}", file=sys.stderr)
        return 2
    return None
