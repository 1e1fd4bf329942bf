"""Issue 33 item 3: one error tree. Every public exception class of the product derives from GpulensError and
is named in core/errors.py's tree; the only ones outside are the signals that docstring names."""

from __future__ import annotations

import ast
import importlib

from gpulens.core.errors import GpulensError
from tests.checks.test_layering import modules

SIGNALS = {"gpulens.tui.workers.Cancelled"}
"""Not errors: a worker nobody waits for any more stops (as asyncio's CancelledError)."""


def _exception_classes() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for name, path in modules().items():
        tree = ast.parse(path.read_text(), str(path))
        names = [n.name for n in tree.body if isinstance(n, ast.ClassDef) and not n.name.startswith("_")]
        if not names:
            continue
        module = importlib.import_module(name)
        for cls_name in names:
            cls = getattr(module, cls_name, None)
            if isinstance(cls, type) and issubclass(cls, BaseException) and cls.__module__ == name:
                found[f"{name}.{cls_name}"] = cls
    return found


def test_every_public_exception_is_a_gpulens_error() -> None:
    classes = _exception_classes()
    assert len(classes) > 25  # the walk found the tree
    outside = sorted(n for n, c in classes.items() if not issubclass(c, GpulensError) and n not in SIGNALS)
    assert not outside, f"exceptions outside the GpulensError tree: {outside}"


def test_the_tree_in_core_errors_names_every_one() -> None:
    import gpulens.core.errors as errors

    doc = errors.__doc__ or ""
    missing = sorted(n for n in _exception_classes() if n.rsplit(".", 1)[1] not in doc)
    assert not missing, f"not in core/errors.py's tree: {missing}"


def test_every_error_has_its_own_title_where_it_is_a_kind_of_its_own() -> None:
    """A user reads ``gpulens: <title>: …``: a direct child of GpulensError says what kind it is."""
    untitled = sorted(n for n, c in _exception_classes().items()
                      if GpulensError in c.__bases__ and c.__dict__.get("title") is None)
    assert not untitled, f"no title of their own: {untitled}"
