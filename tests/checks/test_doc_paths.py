"""Issue 33 item 5: docs and docstrings name files and modules that exist.

Every ``dir/file.ext`` path of this repository named in docs/*.md, README.md and
the product's and tests' Python files (docstrings and comments included) must
exist, and every ``gpulens.a.b`` module named there must be a module or a
package (or a name inside one). A rename that leaves a stale reference fails
here, naming the file and line that still says the old name.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOPS = ("core", "collectors", "ipc", "agent", "sources", "store", "analysis", "tui", "gpulens", "tests", "docs",
        "benchmarks", "scripts")
PATH = re.compile(r"(?<![\w./-])((?:" + "|".join(TOPS) + r")/[\w./-]*\w\.(?:py|md|sh|proto|c|toml|json(?:\.gz)?|o))")
MODULE = re.compile(r"(?<![\w.])gpulens\.([a-z_][\w]*(?:\.[a-z_][\w]*)*)")
PACKAGES = ("core", "collectors", "ipc", "agent", "sources", "store", "analysis", "tui")


GENERATED = ("_pb2.py", "_pb2_grpc.py")
"""grpc-tools' output names the proto by the path it was generated from."""


def _files() -> list[Path]:
    out = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for top in (*PACKAGES, "gpulens", "tests", "benchmarks", "scripts"):
        out += sorted(p for p in (ROOT / top).rglob("*.py") if "__snapshots__" not in p.parts)
    return [p for p in out if p.is_file() and not p.name.endswith(GENERATED) and p != Path(__file__).resolve()]


def _path_exists(named: str) -> bool:
    """``ipc/stream.py``, also as installed (``gpulens/ipc/stream.py``)."""
    if (ROOT / named).exists():
        return True
    top, _, rest = named.partition("/")
    return top == "gpulens" and rest.split("/", 1)[0] in PACKAGES and (ROOT / rest).exists()


def _module_exists(dotted: str) -> bool:
    """``core.model`` -> core/model.py or core/model/; ``core.model.JobInfo`` -> a name in core/model.py;
    ``collectors.kubelet.attach`` -> a name in collectors/kubelet/__init__.py when no such module."""
    here = ROOT
    for name in dotted.split("."):
        if (here / name).is_dir():
            here = here / name
        elif (here / f"{name}.py").is_file():
            return True  # what follows is a name inside the module
        else:
            init = here / "__init__.py"
            return here != ROOT and init.is_file() and re.search(rf"\b{re.escape(name)}\b", init.read_text()) is not None
    return True


def test_named_paths_and_modules_exist() -> None:
    stale: list[str] = []
    for path in _files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for n, line in enumerate(text.splitlines(), 1):
            for m in PATH.finditer(line):
                named = m.group(1).rstrip(".")
                if "*" in named or "<" in named:
                    continue
                if not _path_exists(named):
                    stale.append(f"{path.relative_to(ROOT)}:{n}: {named}")
            for m in MODULE.finditer(line):  # gpulens.log, gpulens.stream: logger names, not modules
                if m.group(1).split(".")[0] in PACKAGES and not _module_exists(m.group(1)):
                    stale.append(f"{path.relative_to(ROOT)}:{n}: gpulens.{m.group(1)}")
    assert not stale, "stale references (renamed or removed files and modules):\n" + "\n".join(stale)
