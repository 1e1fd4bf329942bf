"""Packaging promises: ``Typing :: Typed`` ships a ``py.typed``; completion offers ``--window``'s values (issue 32 item 17)."""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import tomllib

from gpulens.cli import build_parser
from gpulens.core.config import WINDOWS

ROOT = Path(__file__).resolve().parents[3]


def test_typed_classifier_comes_with_py_typed_as_package_data() -> None:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "Typing :: Typed" in meta["project"]["classifiers"]
    assert "py.typed" in meta["tool"]["setuptools"]["package-data"]["gpulens"]
    assert (ROOT / "gpulens" / "py.typed").is_file()


def test_window_choices_are_the_config_windows_and_completion_offers_them() -> None:
    parser = build_parser()
    assert parser.parse_args(["--window", "15m"]).window == "15m"
    with pytest.raises(SystemExit), redirect_stdout(io.StringIO()):
        parser.parse_args(["--window", "2m"])
    action = next(a for a in parser._actions if "--window" in a.option_strings)
    assert tuple(action.choices or ()) == tuple(WINDOWS)
    shtab = pytest.importorskip("shtab")
    script = shtab.complete(parser, "bash")
    assert "_shtab_gpulens___window_choices=(1m 5m 15m 1h)" in script
