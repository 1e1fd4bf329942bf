"""Issue 33 item 5: docs and docstrings name files and modules that exist.

Every ``dir/file.ext`` path of this repository named in docs/*.md, README.md and
the product's and tests' Python files (docstrings and comments included) must
exist, and every ``gpulens.a.b`` module named there must be a module or a
package (or a name inside one). A rename that leaves a stale reference fails
here, naming the file and line that still says the old name.

Two more forms, read in the Markdown files and in the Python files' comments
and docstrings only (their code is checked by import):

- a module named without ``gpulens.`` (``ipc.serialize``, ``store.ring.Ring``) whose
  first part is a layer (:data:`LAYERS`): its longest prefix that is a module or a
  package must exist, and what follows must be defined there (``core.model.JobInfo``:
  a top-level name of core/model.py; ``core.model.JobInfo.pid``: JobInfo's own
  attribute, or any when it has a base class the check does not follow);
- a folder path without an extension (``analysis/trace``, ``analysis/flame/``): a
  folder, or a file named without its ``.py``.

``gpulens.a.b`` names get the same resolution.

Not read as names: anything after ``.``, ``/``, ``:``, ``@`` or ``-`` (``self.store.x``,
URLs, hosts, ``gpulens.store.x``, which MODULE reads); a first part that is not a
layer (``os.path``); a file name (``store.py``, :data:`FILE_SUFFIXES`); in Python, a
first part that is an argument or variable around the line (``store.series`` in a
method taking ``store``); two words with a slash (:data:`PROSE`).
"""

from __future__ import annotations

import ast
import functools
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOPS = ("core", "collectors", "ipc", "agent", "sources", "store", "analysis", "tui", "gpulens", "tests", "docs",
        "benchmarks", "scripts")
PATH = re.compile(r"(?<![\w./-])((?:" + "|".join(TOPS) + r")/[\w./-]*\w\.(?:py|md|sh|proto|c|toml|json(?:\.gz)?|o))")
MODULE = re.compile(r"(?<![\w.])gpulens\.([a-z_][\w]*(?:\.[a-z_][\w]*)*(?:\.[A-Za-z_]\w*)*)")
PACKAGES = ("core", "collectors", "ipc", "agent", "sources", "store", "analysis", "tui")

LAYERS: dict[str, Path] = {**{p: ROOT / p for p in PACKAGES}, "commands": ROOT / "gpulens" / "commands"}
"""The first part of a module named without ``gpulens.``, and the folder it names."""
BARE = re.compile(r"(?<![\w.$/@:-])((?:" + "|".join(LAYERS) + r")(?:\.[A-Za-z_]\w*)+)(?![\w/-]|\.\w)")
FILE_SUFFIXES = frozenset({"py", "pyi", "md", "sh", "json", "toml", "txt", "log", "c", "h", "o", "so", "gz", "proto",
                           "html", "yaml", "yml", "csv", "hex", "folded", "svg", "png", "bpf", "cfg"})
"""``store.py``, ``core.c``: a file named by its name, not a module (PATH checks paths)."""
FOLDER = re.compile(r"(?<![\w./@:~$-])((?:" + "|".join(TOPS) + r")(?:/[A-Za-z_][\w-]*)+/?)(?![\w/*<{-]|\.\w)")
"""``analysis/trace``, ``analysis/flame/``: a path with no extension (not one with a glob or a placeholder)."""
PROSE = frozenset({"agent/viewer", "viewer/agent"})
"""Two words with a slash, not a path."""


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


def _folder_exists(named: str) -> bool:
    """``analysis/trace`` or ``analysis/flame/`` is a folder; ``ipc/stream`` is ipc/stream.py named without ``.py``."""
    named = named.rstrip("/")
    return _path_exists(named) or _path_exists(named + ".py")


# -- what a module defines -----------------------------------------------------------


def _targets(node: ast.expr) -> Iterator[str]:
    if isinstance(node, ast.Name):
        yield node.id
    elif isinstance(node, (ast.Tuple, ast.List)):
        for elt in node.elts:
            yield from _targets(elt)
    elif isinstance(node, ast.Starred):
        yield from _targets(node.value)


def _bound(body: list[ast.stmt]) -> dict[str, ast.stmt]:
    """The names a module or class body binds (through if/try/with blocks, not into functions)."""
    out: dict[str, ast.stmt] = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                out.update(dict.fromkeys(_targets(target), node))
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            out.update(dict.fromkeys(_targets(node.target), node))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                out[alias.asname or alias.name.split(".")[0]] = node
        elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
            for block in ("body", "orelse", "finalbody"):
                out.update(_bound(getattr(node, block, [])))
            for handler in getattr(node, "handlers", []):
                out.update(_bound(handler.body))
    return out


@functools.cache
def _module_names(module: Path) -> dict[str, ast.stmt]:
    return _bound(ast.parse(module.read_text(encoding="utf-8")).body)


def _class_defines(cls: ast.ClassDef, name: str) -> bool:
    """``name`` is bound in the class body or as ``self.name`` in a method; or it may be inherited."""
    if name in _bound(cls.body) or cls.bases:
        return True
    return any(isinstance(node, (ast.Assign, ast.AnnAssign)) and any(
        isinstance(t, ast.Attribute) and t.attr == name and isinstance(t.value, ast.Name) and t.value.id == "self"
        for t in (node.targets if isinstance(node, ast.Assign) else [node.target])) for node in ast.walk(cls))


def _resolve(top: Path, parts: list[str]) -> bool:
    """``parts`` under the package folder ``top``: the longest module prefix exists, and what follows is defined
    in it (a top-level name; then, in a class, one of its attributes; deeper names are not followed)."""
    here, module, rest = top, top / "__init__.py", list(parts)
    while rest:
        name = rest[0]
        if (here / name / "__init__.py").is_file():
            here, module = here / name, here / name / "__init__.py"
        elif (here / f"{name}.py").is_file():
            module = here / f"{name}.py"
            rest.pop(0)
            break
        else:
            break
        rest.pop(0)
    if not rest:
        return True
    if not module.is_file():
        return False
    names = _module_names(module)
    if "__getattr__" in names:
        return True  # a module that makes its names when asked (a lazy re-export)
    found = names.get(rest[0])
    if found is None:
        return False
    if len(rest) > 1 and isinstance(found, ast.ClassDef):
        return _class_defines(found, rest[1])
    return True


@functools.cache
def _module_exists(dotted: str) -> bool:
    """``core.model`` -> core/model.py or core/model/; ``core.model.JobInfo`` -> a name in core/model.py;
    ``collectors.kubelet.attach`` -> a name in collectors/kubelet/__init__.py when no such module."""
    first, *rest = dotted.split(".")
    if first in LAYERS:
        return _resolve(LAYERS[first], rest)
    return _resolve(ROOT / "gpulens", [first, *rest])


# -- where names are read ------------------------------------------------------------


def _scopes(tree: ast.Module) -> list[tuple[int, int, frozenset[str]]]:
    """(first line, last line, names bound there) of each function, and of the module (its assignments):
    in ``store.series_stamp`` of a function taking ``store``, ``store`` is that argument, not the package."""
    out = [(1, 1 << 30, frozenset(n for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
                                  for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
                                  for n in _targets(t)))]
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = node.args
            names = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg) if a}
            names |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
            out.append((node.lineno, node.end_lineno or node.lineno, frozenset(names)))
    return out


class _Python:
    """One Python file's comments and docstrings, and the variables in scope at a line."""

    def __init__(self, text: str) -> None:
        self.tree = ast.parse(text)
        self.text = text

    def prose(self) -> Iterator[tuple[int, str]]:
        docstrings = {(node.value.lineno, node.value.col_offset) for node in ast.walk(self.tree)
                      if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                      and isinstance(node.value.value, str)}
        for tok in tokenize.generate_tokens(io.StringIO(self.text).readline):
            if tok.type == tokenize.COMMENT or (tok.type == tokenize.STRING and tok.start in docstrings):
                yield from enumerate(tok.string.splitlines(), tok.start[0])

    @functools.cached_property
    def _scopes(self) -> list[tuple[int, int, frozenset[str]]]:
        return _scopes(self.tree)

    def variable(self, name: str, row: int) -> bool:
        """Whether ``name`` is an argument or a variable of a function around line ``row`` (or of the module)."""
        return any(first <= row <= last and name in names for first, last, names in self._scopes)


def _stale_in(path: Path) -> Iterator[tuple[int, str]]:
    text = path.read_text(encoding="utf-8", errors="replace")
    for n, line in enumerate(text.splitlines(), 1):
        for m in PATH.finditer(line):
            named = m.group(1).rstrip(".")
            if "*" not in named and "<" not in named and not _path_exists(named):
                yield n, named
        for m in MODULE.finditer(line):  # gpulens.log, gpulens.stream: logger names, not modules
            if m.group(1).split(".")[0] in PACKAGES and not _module_exists(m.group(1)):
                yield n, f"gpulens.{m.group(1)}"
    if not any(_bad_bare(m.group(1)) for m in BARE.finditer(text)) and not any(
            _bad_folder(m.group(1)) for m in FOLDER.finditer(text)):
        return  # nothing to place (most files): no need to tell prose from code
    python = _Python(text) if path.suffix == ".py" else None
    prose = python.prose() if python is not None else enumerate(text.splitlines(), 1)
    for n, line in prose:  # a Markdown file's every line, a Python file's comments and docstrings
        for m in BARE.finditer(line):
            dotted = m.group(1)
            if _bad_bare(dotted) and not (python is not None and python.variable(dotted.split(".")[0], n)):
                yield n, dotted
        for m in FOLDER.finditer(line):
            if _bad_folder(m.group(1)):
                yield n, m.group(1)


def _bad_bare(dotted: str) -> bool:
    """``dotted`` (``ipc.serialize.sample_to_dict``) names nothing, and is not a file name (``store.py``)."""
    return dotted.rsplit(".", 1)[1] not in FILE_SUFFIXES and not _module_exists(dotted)


def _bad_folder(named: str) -> bool:
    """``named`` (``analysis/trace``) is neither a folder nor a module, nor two words with a slash."""
    return named.rstrip("/") not in PROSE and not _folder_exists(named)


def stale_references(files: list[Path] | None = None) -> list[str]:
    """``file:line: name`` for each stale name in ``files`` (default: every file the check reads)."""
    return [f"{path.relative_to(ROOT)}:{n}: {named}" for path in (files or _files()) for n, named in _stale_in(path)]


def test_named_paths_and_modules_exist() -> None:
    stale = stale_references()
    assert not stale, "stale references (renamed or removed files and modules):\n" + "\n".join(stale)
