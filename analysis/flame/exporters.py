"""Write a :class:`~.model.Profile` as folded stacks or speedscope JSON."""

from __future__ import annotations

import json
import os

from gpulens.analysis.flame.errors import FlameError
from gpulens.analysis.flame.folded import to_folded
from gpulens.analysis.flame.model import Profile
from gpulens.analysis.flame.speedscope import to_speedscope


def check_writable(path: str, what: str = "output") -> None:
    """Fail early (before minutes of sampling) when ``path`` cannot be written.

    Raises FlameError naming ``what`` (e.g. the flag) and the path.
    """
    if os.path.isdir(path):
        raise FlameError(f"{what} {path}: is a directory; expected a file name")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise FlameError(f"{what} {path}: directory {parent} does not exist")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise FlameError(f"{what} {path}: not writable")
    if not os.path.exists(path) and not os.access(parent, os.W_OK | os.X_OK):
        raise FlameError(f"{what} {path}: cannot create files in {parent}")


def _write(path: str, text: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as err:
        raise FlameError(f"{path}: cannot write: {err.strerror or err}") from None


def export_folded(profile: Profile, path: str) -> None:
    """Write ``frame;frame COUNT`` lines (values in the profile's unit). Raises FlameError."""
    _write(path, to_folded(profile))


def export_speedscope(profile: Profile, path: str) -> None:
    """Write a speedscope document with one sampled profile. Raises FlameError."""
    _write(path, json.dumps(to_speedscope(profile), separators=(",", ":")))
