"""Other CPython interpreters on this machine (pyenv's versions, or ``python3.X`` on PATH), for layout tests.

Not a fake: the real interpreters the GPU-memory tracer must read (tests/integration/test_gpumem_python.py
and test_gpumem.py). A version this machine lacks gives None, and its test is skipped with the reason.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

MINORS = (10, 11, 12, 13)


def cpython(minor: int) -> str | None:
    """The path of a CPython 3.``minor`` interpreter, or None."""
    if sys.version_info[:2] == (3, minor):
        return sys.executable
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    for exe in sorted(root.glob(f"3.{minor}.*/bin/python3.{minor}"), reverse=True):
        if "t" not in exe.parent.parent.name.split(".")[-1] and os.access(exe, os.X_OK):  # not free-threaded
            return str(exe)
    found = shutil.which(f"python3.{minor}")
    return found if found and "/shims/" not in found else None  # a pyenv shim may refuse an inactive version


def skip_reason(minor: int) -> str:
    """Why a test of CPython 3.``minor`` cannot run here."""
    return f"no CPython 3.{minor} on this machine (pyenv versions or python3.{minor} on PATH)"
