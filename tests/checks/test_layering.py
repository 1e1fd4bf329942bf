"""The tree is the architecture (docs/architecture.md): one-way layers, no cycles, small modules.

Layer rules (an arrow = may import): core -> nothing of ours; collectors,
ipc, analysis, store -> core; sources -> ipc, analysis, core; agent ->
collectors, ipc, analysis, store, core; tui -> sources, store, analysis,
ipc, core; gpulens (the command line) -> everything. textual/rich only in
tui/, pynvml only in collectors/. Imports under ``if TYPE_CHECKING:`` are
types only and do not count. The import graph is read from the source with
``ast`` (every import, including those inside functions), so a lazy import
cannot hide a violation.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from functools import cache
from pathlib import Path

from tests.paths import ROOT

LAYERS = ("core", "collectors", "ipc", "agent", "sources", "store", "analysis", "tui", "gpulens")
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "collectors": {"core"},
    "ipc": {"core"},
    "analysis": {"core"},
    "store": {"core"},
    "sources": {"ipc", "analysis", "core"},
    "agent": {"collectors", "ipc", "analysis", "store", "core"},
    "tui": {"sources", "store", "analysis", "ipc", "core"},
    "gpulens": set(LAYERS),
}
THIRD_PARTY_ONLY_IN = {"textual": {"tui"}, "rich": {"tui"}, "plotext": {"tui"}, "pynvml": {"collectors"},
                       "amdsmi": {"collectors"}}
MAX_LINES = 500


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["gpulens", *parts[1:]]) if parts[0] == "gpulens" else ".".join(["gpulens", *parts])


@cache
def modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for layer in LAYERS:
        for path in sorted((ROOT / layer).rglob("*.py")):
            out[_module_name(path)] = path
    return out


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                for sub in ast.walk(child):
                    if hasattr(sub, "lineno"):
                        lines.add(sub.lineno)
    return lines


@cache
def imports_of(name: str) -> tuple[tuple[str, int], ...]:
    """(imported module, line) for every import in module ``name`` (TYPE_CHECKING aside)."""
    path = modules()[name]
    return imports_in(ast.parse(path.read_text(), str(path)), name, path.name == "__init__.py")


def _dynamic(node: ast.Call) -> str | None:
    """The module a call imports by name: ``importlib.import_module("x")``, ``import_module("x")``, ``__import__("x")``."""
    func = ast.unparse(node.func)
    if func not in ("importlib.import_module", "import_module", "__import__") or not node.args:
        return None
    arg = node.args[0]
    return arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else None


def imports_in(tree: ast.AST, name: str, is_pkg: bool) -> tuple[tuple[str, int], ...]:
    """(imported module, line) of every import statement and import-by-name call in ``tree`` (module ``name``)."""
    skip = _type_checking_lines(tree)
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.Call) and (dynamic := _dynamic(node)) is not None:
            found.append((dynamic, node.lineno))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            found.append((mod, node.lineno))
            # "from pkg import module" imports the module too
            for a in node.names:
                if f"{mod}.{a.name}" in modules():
                    found.append((f"{mod}.{a.name}", node.lineno))
    return tuple(found)


def layer_of(module: str) -> str:
    parts = module.split(".")
    if parts[0] != "gpulens":
        return ""
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else "gpulens"


def test_every_layer_is_found() -> None:
    layers = {layer_of(m) for m in modules()}
    assert layers == set(LAYERS), layers
    assert "gpulens.collectors.sampler" in modules() and "gpulens.tui.app" in modules()


def test_layers_import_one_way() -> None:
    bad = []
    for name in modules():
        src = layer_of(name)
        for target, line in imports_of(name):
            dst = layer_of(target)
            if dst and dst != src and dst not in ALLOWED[src]:
                bad.append(f"{modules()[name].relative_to(ROOT)}:{line}: {src} imports {target}")
    assert not bad, "layer violations:\n" + "\n".join(bad)


def test_ui_and_nvml_stay_in_their_layer() -> None:
    bad = []
    for name in modules():
        for target, line in imports_of(name):
            top = target.split(".")[0]
            if top in THIRD_PARTY_ONLY_IN and layer_of(name) not in THIRD_PARTY_ONLY_IN[top]:
                bad.append(f"{modules()[name].relative_to(ROOT)}:{line}: imports {target}")
    assert not bad, "\n".join(bad)


def test_the_third_party_rule_sees_imports_by_name() -> None:
    """``importlib.import_module("pynvml")`` counts as importing pynvml (gpulens loads NVML that way)."""
    tree = ast.parse("import importlib\nnvml = importlib.import_module('pynvml')\nsmi = __import__('amdsmi')\n")
    assert ("pynvml", 2) in imports_in(tree, "gpulens.tui.app", False)
    assert ("amdsmi", 3) in imports_in(tree, "gpulens.tui.app", False)
    assert "pynvml" in {t for t, _ in imports_of("gpulens.collectors.nvml.collector")}  # the real one, in its layer


def test_only_the_command_line_sees_argparse() -> None:
    """The layers below take typed options (``ConfigFlags``, ``StreamFlags``, ...), never parsed flags."""
    bad = [f"{modules()[name].relative_to(ROOT)}:{line}: imports {target}"
           for name in modules() if layer_of(name) != "gpulens"
           for target, line in imports_of(name) if target.split(".")[0] == "argparse"]
    assert not bad, "\n".join(bad)


def test_no_import_cycles() -> None:
    mods = modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name in mods:
        for target, _line in imports_of(name):
            # importing a.b.c also runs a/__init__ and a/b/__init__: count the real module only
            if target in mods and target != name:
                graph[name].add(target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def strongconnect(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    old_limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old_limit, 10_000))
    try:
        for v in graph:
            if v not in index:
                strongconnect(v)
    finally:
        sys.setrecursionlimit(old_limit)  # other tests depend on the default depth
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_no_module_over_500_lines() -> None:
    big = {str(p.relative_to(ROOT)): n for p in modules().values() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not big, f"modules over {MAX_LINES} lines: {big}"


SCRIPT = r"""
import importlib, json, pkgutil, sys
names, failed = [], {}
for top in ("core", "collectors", "ipc", "agent", "sources", "store", "analysis"):
    pkg = importlib.import_module("gpulens." + top)
    names.append(pkg.__name__)
    for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
        try:
            importlib.import_module(info.name)
            names.append(info.name)
        except Exception as err:
            failed[info.name] = repr(err)
ui = sorted(m for m in sys.modules if m.split(".")[0] in ("textual", "rich"))
print(json.dumps({"names": names, "failed": failed, "ui": ui}))
"""


def test_headless_packages_do_not_import_ui() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert "gpulens.collectors.sampler" in result["names"]
    assert "gpulens.agent.agent" in result["names"]
    assert result["failed"] == {}, result["failed"]
    assert result["ui"] == [], f"UI modules imported by a headless package: {result['ui']}"


def test_every_package_says_what_lives_there() -> None:
    missing = [str(p.relative_to(ROOT)) for n, p in modules().items()
               if p.name == "__init__.py" and not (ast.get_docstring(ast.parse(p.read_text())) or "").strip()]
    assert not missing, f"packages without a one-line docstring: {missing}"


def test_import_linter_contracts_hold() -> None:
    """The same rules as import-linter contracts (pyproject.toml [tool.importlinter]), as harlequin does.

    Run from the repository root as a developer would, with no generated tree: the
    links ``gpulens/<layer> -> ../<layer>`` give the layers their installed names.
    """
    import shutil

    exe = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    if not Path(exe).exists():
        import pytest

        pytest.skip("import-linter is not installed (it comes with the [test] extra: make test)")
    out = subprocess.run([exe], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "8 kept, 0 broken" in out.stdout, out.stdout[-2000:]


def test_every_layer_is_linked_under_gpulens_for_tools_run_from_the_root() -> None:
    """``import gpulens.core`` from the root, lint-imports, mypy and pyright see the installed names through these."""
    for layer in LAYERS[:-1]:
        link = ROOT / "gpulens" / layer
        assert link.is_symlink() and link.resolve() == (ROOT / layer).resolve(), layer
    code = ("import sys; sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]\n"
            "import gpulens.core.config as c, gpulens.tui.app; print(c.__file__)")  # no editable install's hook
    out = subprocess.run([sys.executable, "-c", code],
                         cwd=ROOT, capture_output=True, text=True, timeout=60,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "PYTHONNOUSERSITE": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert Path(out.stdout.strip()).resolve() == (ROOT / "core" / "config.py").resolve()


def test_pyright_resolves_the_layers_from_the_root() -> None:
    """pyright, run from the root on a file importing every layer, finds them all (.ci/run installs it with npm)."""
    import shutil

    exe = shutil.which("pyright") or str(ROOT / "build" / "pyright" / "node_modules" / ".bin" / "pyright")
    if not Path(exe).exists():
        import pytest

        pytest.skip("pyright is not installed (.ci/run: npm install --prefix build/pyright pyright)")
    probe = ROOT / "build" / "pyright_probe.py"
    probe.parent.mkdir(exist_ok=True)
    probe.write_text("".join(f"import gpulens.{layer}\n" for layer in LAYERS[:-1])
                     + "from gpulens.collectors.gpumem.layouts import LAYOUTS\nreveal_type(LAYOUTS)\n")
    try:
        out = subprocess.run([exe, "--pythonpath", sys.executable, str(probe)], cwd=ROOT, capture_output=True,
                             text=True, timeout=300)
    finally:
        probe.unlink()
    assert "0 errors" in out.stdout, out.stdout[-3000:]
    assert 'Type of "LAYOUTS" is "dict[tuple[int, int], PyLayout]"' in out.stdout, out.stdout[-3000:]

