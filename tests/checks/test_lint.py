"""The code stays ruff- and mypy-clean (STYLE.md): checked in the suite so CI enforces it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import ROOT

BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    exe = BIN / name
    if exe.exists():
        return str(exe)
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (it comes with the [test] extra: make test)")
    return found


def test_ruff_clean() -> None:
    out = subprocess.run(
        [_tool("ruff"), "check", "gpulens", "core", "collectors", "ipc", "agent", "sources", "store", "analysis", "tui", "tests", "benchmarks", "scripts", "setup.py"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


def test_mypy_strict_clean() -> None:
    out = subprocess.run(
        ["bash", "scripts/typecheck.sh"], cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={"MYPY": _tool("mypy"), "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
