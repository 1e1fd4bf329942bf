"""analysis/ computes; it writes no file (docs/architecture.md: I/O is where the table says it is).

Writing where the user asked, and checking that place first, is the sources'
(``sources/trace_export.py``, ``sources/flame_export.py``): analysis hands back
bytes and what they hold. The scan reads analysis/ with ``ast``: no call of
``write_new_file`` / ``new_file`` (or an import of them), no ``open`` of any kind
with a writing mode (``w``, ``x``, ``a``, ``+``), no ``os.open`` / ``os.access`` /
``os.fdopen`` or other ``os`` call that changes the file system, no
``Path.write_text`` / ``write_bytes`` / ``touch`` / ``mkdir``. Reading input files stays allowed.
"""

from __future__ import annotations

import ast
import re

from tests.paths import ROOT

WRITERS = {"write_new_file", "new_file"}
"""core.safefs's writers: a file made at a path."""
OS_CALLS = {"open", "access", "fdopen", "replace", "rename", "unlink", "remove", "mkdir", "makedirs", "rmdir",
            "chmod", "chown", "symlink", "link", "truncate", "mkfifo"}
"""``os.X`` calls that create, change or probe a destination."""
PATH_WRITES = {"write_text", "write_bytes", "touch", "mkdir", "unlink", "symlink_to"}
"""``Path`` methods that write (not ``replace`` / ``rename``: ``str.replace`` reads alike)."""
WRITE_MODE = re.compile(r"^[rbt]*[wxa+][rwxabt+]*$")


def _mode_args(node: ast.Call) -> list[ast.expr]:
    return [*node.args[:2], *(k.value for k in node.keywords if k.arg == "mode")]


def io_calls(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, call) for every file write, destination probe, or writer import in ``tree``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any(a.name in WRITERS for a in node.names):
            found.append((node.lineno, f"from {node.module} import {', '.join(a.name for a in node.names)}"))
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        owner = ast.unparse(func.value) if isinstance(func, ast.Attribute) else ""
        bad = (name in WRITERS
               or (owner == "os" and name in OS_CALLS)
               or (isinstance(func, ast.Attribute) and owner != "os" and name in PATH_WRITES)
               or (name == "open" and any(isinstance(a, ast.Constant) and isinstance(a.value, str)
                                          and WRITE_MODE.match(a.value) for a in _mode_args(node))))
        if bad:
            found.append((node.lineno, ast.unparse(node)[:80]))
    return found


def test_the_scan_sees_each_kind_of_write() -> None:
    code = ("from gpulens.core.safefs import write_new_file\nwrite_new_file(p, b'')\nopen(p, 'w')\n"
            "gzip.open(p, mode='wb')\nPath(p).open('x')\nos.open(p, flags)\nos.access(p, os.W_OK)\n"
            "Path(p).write_text('')\nopen(p)\nopen(p, 'rb')\nos.path.isdir(p)\nPath(p).read_bytes()\n")
    assert [line for line, _ in io_calls(ast.parse(code))] == [1, 2, 3, 4, 5, 6, 7, 8]


def test_analysis_writes_no_file() -> None:
    bad = [f"{path.relative_to(ROOT)}:{line}: {call}"
           for path in sorted((ROOT / "analysis").rglob("*.py"))
           for line, call in io_calls(ast.parse(path.read_text(), str(path)))]
    assert not bad, "file I/O in analysis/ (it belongs in sources/):\n" + "\n".join(bad)
