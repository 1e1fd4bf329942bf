"""The job screen at 1 Hz repaints only what changed (issue 13: a --demo viewer on a job cost 4x the overview).

A tick is a new sample from each of the job's hosts; the test makes the
samples itself (copies of the newest ones, one process changed or none) so
that what should change is known independently of the screen.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

from rich.text import Text
from textual.strip import Strip
from textual.widgets import Static

from gpulens.core.events import SampleEvent
from gpulens.tui.app import GpulensApp
from gpulens.tui.screens.job import JobScreen
from gpulens.tui.screens.process import ProcessScreen
from gpulens.tui.widgets.fields import FieldsLine
from gpulens.tui.widgets.process_table import ProcessTable
from tests.fakes.tui_fakes import cell, demo_app, settle, sync


def tick(app: GpulensApp, hosts: tuple[str, ...], cpu_of: dict[int, float] | None = None) -> None:
    """One more sample per host, 1 s later, equal to the newest but for ``cpu_of`` (pid -> CPU %)."""
    for host in hosts:
        s = app.store.latest(host)
        assert s is not None
        jobs = tuple(dataclasses.replace(j, cpu_percent=(cpu_of or {}).get(j.pid, j.cpu_percent)) for j in s.jobs)
        app.store.apply(SampleEvent(dataclasses.replace(s, time=s.time + 1.0, jobs=jobs)))


class Watch:
    """Counts the process table's rendered lines and the job line's updates."""

    def __init__(self, screen: JobScreen) -> None:
        self.table = screen.query_one(ProcessTable)
        self.lines: Counter[int] = Counter()
        self.info_updates = 0
        table, info = self.table, screen.query_one("#job-info", FieldsLine)
        render, show = table.render_line, info.show

        def counted_render(y: int) -> Strip:
            self.lines[y] += 1
            return render(y)

        def counted_show(text: Any) -> None:
            self.info_updates += 1
            show(text)

        table.render_line = counted_render  # type: ignore[method-assign]
        info.show = counted_show  # type: ignore[method-assign]

    def clear(self) -> None:
        self.lines.clear()
        self.info_updates = 0


@sync
async def test_a_tick_without_job_change_repaints_no_row_and_keeps_the_job_line() -> None:
    app = demo_app(backfill_s=20)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        app.jump("job 4711")
        await settle(app, pilot)
        screen = app.screen
        assert isinstance(screen, JobScreen) and screen.view is not None
        hosts = screen.view.hosts
        watch = Watch(screen)
        for _ in range(2):  # the first tick may change the window figures of the job line
            tick(app, hosts)
            app.refresh_data()
            await pilot.pause()
        watch.clear()
        before = screen.query_one("#job-info", FieldsLine).text.copy()
        tick(app, hosts)
        app.refresh_data()
        await pilot.pause()
        assert screen.view is not None and screen.view.hosts == hosts  # the tick reached the screen
        assert not watch.lines, watch.lines
        assert watch.info_updates == 0
        assert screen.query_one("#job-info", FieldsLine).text == before


@sync
async def test_one_process_changing_repaints_only_its_row() -> None:
    app = demo_app(backfill_s=20)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        app.jump("job 4711")
        await settle(app, pilot)
        screen = app.screen
        assert isinstance(screen, JobScreen) and screen.view is not None
        hosts = screen.view.hosts
        tick(app, hosts)
        app.refresh_data()
        await pilot.pause()
        watch = Watch(screen)
        table = watch.table
        host, proc = screen.view.processes[2]
        key = f"{host}:{proc.pid}"
        line = table.order.index(key) + 1 - int(table.scroll_offset.y)
        assert 1 <= line < table.size.height  # its row is on screen
        tick(app, hosts, {proc.pid: 123.0})
        app.refresh_data()
        await pilot.pause()
        assert cell(table, key, "cpu") == ProcessTable.cells(host, dataclasses.replace(proc, cpu_percent=123.0))[4]
        assert set(watch.lines) == {line}, watch.lines
        assert "123" in Text.from_markup(table.render_line(line).text).plain


@sync
async def test_process_screen_tick_without_change_updates_nothing() -> None:
    app = demo_app(backfill_s=20)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        view = app.store.job("4711", app.window_s)
        assert view is not None
        host, proc = view.processes[0]
        screen = ProcessScreen(host, proc.pid)
        app.push_screen(screen)
        await settle(app, pilot)
        tick(app, (host,))
        app.refresh_data()
        await pilot.pause()
        counts: Counter[str] = Counter()
        for name in ("proc-info", "proc-who", "proc-note", "proc-actions"):
            widget = screen.query_one(f"#{name}", Static)
            original = widget.update

            def counted(content: Any = "", _name: str = name, _orig: Any = original, **kw: Any) -> None:
                counts[_name] += 1
                _orig(content, **kw)

            widget.update = counted  # type: ignore[method-assign]
        refresh_bindings = screen.refresh_bindings

        def counted_bindings() -> None:
            counts["bindings"] += 1
            refresh_bindings()

        screen.refresh_bindings = counted_bindings  # type: ignore[method-assign]
        seen = screen._seen
        tick(app, (host,))
        app.refresh_data()
        await pilot.pause()
        assert screen._seen != seen  # the tick reached the screen
        assert not counts, counts
        tick(app, (host,), {proc.pid: 321.0})
        app.refresh_data()
        await pilot.pause()
        assert counts == Counter({"proc-info": 1}), counts
        assert "321" in str(screen.query_one("#proc-info", Static).render())
