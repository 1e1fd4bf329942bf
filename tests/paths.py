"""Where things are, for every test: the repository root and tests/data.

Tests live at different depths (tests/unit/<package>/, tests/integration/, ...),
so none computes paths from its own ``__file__``; they import these instead.
"""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
DATA = TESTS / "data"
FAKES = TESTS / "fakes"
SCRIPTS = ROOT / "scripts"
KINETO_WORKLOAD = FAKES / "kineto_workload.py"
