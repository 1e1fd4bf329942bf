"""Write a flame graph's export (folded, speedscope, pprof) to a user-chosen path.

One writer for the TUI's Export, ``gpulens flame --export-*``, ``gpulens
gpumem -o`` and ``gpulens profile -o``. The bytes and what they hold come
from :mod:`gpulens.analysis.flame.exporters` (pure); here the destination is
checked before any work (:func:`check_writable`, before minutes of sampling)
and the file written through a fresh, unpredictable temporary name created
with ``O_EXCL | O_NOFOLLOW`` and renamed into place (never following a file
or link planted there). Failures are :class:`FlameError`: one line naming the path.
"""

from __future__ import annotations

import os

from gpulens.analysis.flame.errors import FlameError
from gpulens.analysis.flame.exporters import (
    Exported,
    Written,
    folded_export,
    pprof_export,
    speedscope_export,
)
from gpulens.analysis.flame.model import Profile
from gpulens.core.safefs import write_new_file


def check_writable(path: str, what: str = "output") -> None:
    """Fail early (before minutes of sampling) when ``path`` cannot be written.

    Raises:
        FlameError: naming ``what`` (e.g. the flag) and the path: a directory, a missing
            parent directory, a file not writable, or a directory files cannot be created in.
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


def write_export(exported: Exported, path: str) -> Written:
    """Write ``exported``'s bytes to ``path``; what was written, for the user's ``wrote N stacks to …`` line.

    Raises:
        FlameError: ``PATH: cannot write: WHY`` (nothing is left behind).
    """
    try:
        write_new_file(path, exported.data)
    except OSError as err:
        raise FlameError(f"{path}: cannot write: {err.strerror or err}") from None
    return exported.written(path)


def export_folded(profile: Profile, path: str, root: int = 0) -> Written:
    """Write ``frame;frame COUNT`` lines of ``root``'s subtree with integer counts. Raises FlameError."""
    return write_export(folded_export(profile, root), path)


def export_speedscope(profile: Profile, path: str, root: int = 0) -> Written:
    """Write a speedscope document with one sampled profile of ``root``'s subtree. Raises FlameError."""
    return write_export(speedscope_export(profile, root), path)


def export_pprof(profile: Profile, path: str, root: int = 0, labels: dict[str, str] | None = None) -> Written:
    """Write ``root``'s subtree as gzipped pprof (``go tool pprof``, Pyroscope, Grafana). Raises FlameError."""
    return write_export(pprof_export(profile, root, labels), path)
