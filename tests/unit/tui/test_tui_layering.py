"""Screens and widgets never import the app: they read a ScreenContext and post messages.

The import walk reads every ``import`` with ``ast`` — at module level, inside
functions and under ``if TYPE_CHECKING:`` alike — and follows imports of
other ``gpulens.tui`` modules, so neither a lazy nor a types-only import of
``gpulens.tui.app`` can hide. The Pilot tests run a host screen in a plain
``App`` on a fake context: no GpulensApp anywhere.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

from textual.app import App
from textual.message import Message

from gpulens.core.events import SampleEvent
from gpulens.core.model import (
    CpuSample,
    HostSample,
    JobInfo,
    MemorySample,
    NetworkSample,
    StorageSample,
)
from gpulens.tui.messages import OpenFlame, OpenJob
from gpulens.tui.screens.host import HostScreen
from gpulens.tui.widgets.job_table import JobTable
from tests.fakes.tui_fakes import FROZEN, FakeContext, sync
from tests.paths import ROOT

TUI = ROOT / "tui"
APP = "gpulens.tui.app"
# Everything a screen or widget may use; none of it may lead back to the app.
FREE_OF_THE_APP = ("screens", "widgets", "context.py", "messages.py", "profiling.py", "workers.py")


def _name(path: Path) -> str:
    parts = list(path.relative_to(TUI).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["gpulens", "tui", *parts])


@cache
def tui_modules() -> dict[str, Path]:
    return {_name(p): p for p in sorted(TUI.rglob("*.py"))}


def imports_in(source: str, package: list[str]) -> frozenset[str]:
    """Every module ``source`` (a module of ``package``) imports: TYPE_CHECKING, function-level, relative."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            found.add(mod)
            found.update(f"{mod}.{a.name}" for a in node.names)  # "from pkg import module"
    return frozenset(found)


@cache
def imports(name: str) -> frozenset[str]:
    path = tui_modules()[name]
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    return imports_in(path.read_text(), package)


def reaches_app(name: str) -> list[str] | None:
    """The import chain from ``name`` to the app, or None."""
    seen: set[str] = set()

    def walk(mod: str, chain: list[str]) -> list[str] | None:
        if mod == APP:
            return chain
        if mod in seen or mod not in tui_modules():
            return None
        seen.add(mod)
        for target in sorted(imports(mod)):
            found = walk(target, [*chain, target])
            if found:
                return found
        return None

    return walk(name, [name])


def _free_modules() -> list[str]:
    out = []
    for part in FREE_OF_THE_APP:
        paths = sorted((TUI / part).rglob("*.py")) if (TUI / part).is_dir() else [TUI / part]
        out += [_name(p) for p in paths]
    return out


SNEAKY = (
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from gpulens.tui.app import GpulensApp\n",
    "def app_of() -> object:\n    import gpulens.tui.app\n    return gpulens.tui.app\n",
    "from .. import app\n",
    "from ..app import GpulensApp as G\n",
)


def test_the_walk_sees_every_kind_of_import() -> None:
    for source in SNEAKY:  # as if in a screen module
        assert APP in imports_in(source, ["gpulens", "tui", "screens"]), source
    assert "gpulens.tui.screens.base" in imports("gpulens.tui.app")  # the app may import screens
    assert "gpulens.tui.screens.base" in imports("gpulens.tui.profiling")  # under TYPE_CHECKING
    assert "gpulens.tui.screens.flame" in imports("gpulens.tui.app")  # inside a function
    assert reaches_app("gpulens.tui.app") == [APP]


def test_screens_and_widgets_never_import_the_app() -> None:
    names = _free_modules()
    assert "gpulens.tui.screens.job" in names and "gpulens.tui.widgets.header" in names
    chains = {n: c for n in names if (c := reaches_app(n))}
    assert not chains, "\n".join(" -> ".join(c) for c in chains.values())


def _names_the_app(source: str) -> bool:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name) and node.id == "GpulensApp":
            return True
        if isinstance(node, ast.Constant) and node.value == "GpulensApp":  # cast("GpulensApp", ...)
            return True
    return False


def test_screens_and_widgets_never_name_the_app_class() -> None:
    # cast("GpulensApp", self.app) needs no import: catch the name in code (docstrings may mention it)
    assert _names_the_app('cast("GpulensApp", self.app)') and _names_the_app("x: GpulensApp")
    named = [n for n in _free_modules() if _names_the_app(tui_modules()[n].read_text())]
    assert not named, named


class Bare(App[None]):
    """A plain Textual app: shows one screen and records the navigation it is asked for."""

    def __init__(self, screen: HostScreen) -> None:
        super().__init__()
        self.first = screen
        self.asked: list[Message] = []

    def on_mount(self) -> None:
        self.push_screen(self.first)

    def on_open_job(self, message: OpenJob) -> None:
        self.asked.append(message)

    def on_open_flame(self, message: OpenFlame) -> None:
        self.asked.append(message)


def _far_host(tmp_path: Path) -> tuple[list[SampleEvent], Path]:
    job = JobInfo(pid=777, tree_id="slurmstepd/python", cmdline="python train.py", user="u",
                  start_time=FROZEN - 100, cpu_percent=99.0, job_key="j1")
    events = [SampleEvent(HostSample(
        host="far-host", time=FROZEN - i, cpu=CpuSample(total_percent=10.0),
        memory=MemorySample(total_bytes=100, used_bytes=50),
        network=NetworkSample(rx_bytes_per_s=1.0, tx_bytes_per_s=1.0),
        storage=StorageSample(read_bytes_per_s=1.0, write_bytes_per_s=1.0), jobs=(job,))) for i in range(5)]
    folded = tmp_path / "far.folded"
    folded.write_bytes(b"main;train;matmul 30\nmain;train;load 10\n")
    return events, folded


@sync
async def test_a_screen_runs_on_a_fake_context_and_posts_its_navigation(tmp_path: Path) -> None:
    from gpulens.ipc.request_schema import ProfileAnswer
    from tests.fakes.request_source import Answered, FakeAgent
    from tests.fakes.tui_fakes import AgentSource

    events, folded = _far_host(tmp_path)
    source = AgentSource(events, FakeAgent({"profile": Answered(ProfileAnswer(files=(folded.name,)), {folded.name: folded})}))
    app = Bare(HostScreen("far-host", context=FakeContext(source, events)))
    async with app.run_test(size=(160, 45)) as pilot:
        for _ in range(3):
            await pilot.pause()
        screen = app.screen
        assert isinstance(screen, HostScreen)
        assert screen.query_one(JobTable).row_count == 1
        screen.query_one(JobTable).focus()
        await pilot.press("enter")
        await pilot.pause()
        assert [type(m) for m in app.asked] == [OpenJob] and app.asked[0].key == "j1"  # type: ignore[attr-defined]
        await pilot.press("f")  # far-host is not this host: through the source's agent
        for _ in range(100):
            if len(app.asked) == 2:
                break
            await pilot.pause(0.05)
        flame = app.asked[-1]
        assert isinstance(flame, OpenFlame) and flame.profile.total == 40
