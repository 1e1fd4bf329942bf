"""Fixtures of the collector tests: the C stand-in of libnvidia-ml.so.1 (tests/fakes/libnvml_standin.c,
a TEST DOUBLE of the driver's library), built once for the session."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.libnvml_standin import build


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stand-in, compiled with the system's C compiler (the tests that need it skip without one)."""
    out = build(tmp_path_factory.mktemp("libnvml"))
    if isinstance(out, str):
        pytest.skip(out)
    return out
