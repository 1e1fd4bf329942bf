"""Shared pytest fixtures."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.paths import DATA


@pytest.fixture
def data_dir() -> Path:
    """tests/data: fixtures copied into the repo (see tests/data/SOURCES.md)."""
    return DATA


@pytest.fixture
def gpulens_exe() -> str:
    """The installed ``gpulens`` console script of the running interpreter's venv."""
    exe = Path(sys.executable).parent / "gpulens"
    if not exe.exists():
        pytest.skip(f"gpulens is not installed next to {sys.executable} (run 'make test')")
    return str(exe)


@pytest.fixture(autouse=True)
def _isolated_config(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reads the developer's own ~/.config/gpulens/config.toml."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("xdg")))
    os.environ.pop("NO_COLOR", None)
