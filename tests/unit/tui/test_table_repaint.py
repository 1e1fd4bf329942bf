"""The incremental table repaints only the lines whose text changed (issue 13: cost at 1 Hz).

Each test counts what Textual really re-renders: the table's ``render_line``
calls (the compositor calls it only for dirty lines; its style cache keeps
the others) and the rows rebuilt into strips (``_line``).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, ClassVar

from textual.app import App, ComposeResult
from textual.scrollbar import ScrollBar
from textual.strip import Strip
from textual.widget import Widget

from gpulens.tui.widgets._table import IncrementalTable
from tests.fakes.tui_fakes import cell, sync


class Counted(IncrementalTable):
    """A two-column table that counts the lines rendered (by widget line) and the rows rebuilt."""

    COLUMNS = (("name", "Name", False, 10), ("value", "Value", True, 8))
    SORT_KEYS: ClassVar[dict[str, str]] = {"name": "N", "value": "V"}

    def __init__(self) -> None:
        super().__init__(id="t")
        self.rendered: Counter[int] = Counter()
        self.rebuilt: list[tuple[str, ...]] = []

    def render_line(self, y: int) -> Strip:
        self.rendered[y] += 1
        return super().render_line(y)

    def _line(self, cells: Any, style: Any, width: int) -> Strip:
        self.rebuilt.append(tuple(cells))
        return super()._line(cells, style, width)


class TableApp(App[None]):
    CSS = "Counted { height: 8; }"

    def compose(self) -> ComposeResult:
        yield Counted()


def rows(values: dict[str, int]) -> dict[str, tuple[str, ...]]:
    return {k: (k, str(v)) for k, v in values.items()}


VALUES = {f"host{i:02d}": 10 * i for i in range(12)}  # more rows than the 7 the table shows: a scrollbar


async def drawn(app: TableApp, pilot: Any, values: dict[str, int]) -> Counted:
    table = app.query_one(Counted)
    table.sync(rows(values), sorted(values))
    await pilot.pause()
    await pilot.pause()
    return table


@sync
async def test_one_changed_row_repaints_only_its_line() -> None:
    app = TableApp()
    async with app.run_test(size=(40, 12)) as pilot:
        table = await drawn(app, pilot, VALUES)
        assert table.show_vertical_scrollbar  # the case where a whole repaint also redrew the scrollbar
        bar_lines = Counter[int]()
        bar = table.vertical_scrollbar
        original = ScrollBar.render_line  # ScrollBar draws through the Line API too

        def counting(self: Widget, y: int) -> Strip:  # render_line as Widget declares it
            if self is bar:
                bar_lines[y] += 1
            return original(self, y)

        ScrollBar.render_line = counting  # type: ignore[method-assign]
        try:
            table.rendered.clear()
            table.rebuilt.clear()
            changed = dict(VALUES, host03=999)
            assert table.sync(rows(changed), sorted(changed))
            await pilot.pause()
            await pilot.pause()
        finally:
            ScrollBar.render_line = original  # type: ignore[method-assign]
        row = sorted(changed).index("host03") + 1  # line 0 is the header
        assert set(table.rendered) == {row}, table.rendered
        assert table.rebuilt == [("host03", "999")]
        assert "999" in table.render_line(row).text
        assert not bar_lines, bar_lines  # nothing about the scroll changed


@sync
async def test_equal_rows_repaint_and_rebuild_nothing() -> None:
    app = TableApp()
    async with app.run_test(size=(40, 12)) as pilot:
        table = await drawn(app, pilot, VALUES)
        table.rendered.clear()
        table.rebuilt.clear()
        assert not table.sync(rows(VALUES), sorted(VALUES))
        await pilot.pause()
        assert not table.rendered
        table.refresh()  # a whole repaint (a resize, a scroll) draws the same strips from the cache
        await pilot.pause()
        assert set(table.rendered) == set(range(table.size.height))
        assert table.rebuilt == []


@sync
async def test_header_repaints_on_sort_change_only_and_cursor_moves_touch_two_lines() -> None:
    app = TableApp()
    async with app.run_test(size=(40, 12)) as pilot:
        table = await drawn(app, pilot, VALUES)
        table.focus()
        await pilot.pause()
        table.rendered.clear()
        await pilot.press("down")
        await pilot.pause()
        assert set(table.rendered) == {1, 2}, table.rendered  # the old and the new cursor line
        assert table.selected_key() == "host01"
        table.rendered.clear()
        assert table.sort_by_letter("V") == "Value"
        order = sorted(VALUES, key=VALUES.__getitem__, reverse=True)
        table.sort_reverse = True
        table.sync(rows(VALUES), order)
        await pilot.pause()
        assert table.rendered[0] >= 1  # the header shows the new sort
        assert "Value↓" in table.render_line(0).text
        assert table.selected_key() == "host01"  # the cursor follows its row to the new place
        assert table.cursor == order.index("host01")


@sync
async def test_a_row_moving_repaints_the_lines_whose_row_changed() -> None:
    app = TableApp()
    async with app.run_test(size=(40, 12)) as pilot:
        values = {"a": 1, "b": 2, "c": 3, "d": 4}
        table = await drawn(app, pilot, values)
        table.rendered.clear()
        table.sync(rows(values), ["a", "c", "b", "d"])  # b and c swap places: lines 2 and 3
        await pilot.pause()
        assert set(table.rendered) == {2, 3}, table.rendered
        assert [table.render_line(y).text.split()[0] for y in (1, 2, 3, 4)] == ["a", "c", "b", "d"]
        table.rendered.clear()
        table.placeholder = "nothing here"
        table.sync({}, [])  # no rows: the placeholder replaces them (a new scroll size: a whole repaint)
        await pilot.pause()
        assert "nothing here" in table.render_line(1).text


class Narrow(IncrementalTable):
    """A three-column table whose "power" column is dropped first when narrow (as the host table's Power)."""

    COLUMNS = (("name", "Name", False, 10), ("value", "Value", True, 8), ("power", "Power", True, 8))
    DROP: ClassVar[tuple[str, ...]] = ("power",)

    def __init__(self) -> None:
        super().__init__(id="t")
        self.rendered: Counter[int] = Counter()

    def render_line(self, y: int) -> Strip:
        self.rendered[y] += 1
        return super().render_line(y)


class NarrowApp(App[None]):
    CSS = "Narrow { height: 8; }"

    def compose(self) -> ComposeResult:
        yield Narrow()


@sync
async def test_a_change_in_a_dropped_column_repaints_nothing() -> None:
    app = NarrowApp()
    async with app.run_test(size=(24, 12)) as pilot:  # room for name and value only
        table = app.query_one(Narrow)
        data: dict[str, tuple[str, ...]] = {f"h{i}": (f"h{i}", str(i), f"{100 + i}W") for i in range(5)}
        table.sync(data, sorted(data))
        await pilot.pause()
        await pilot.pause()
        assert [i for i, _ in table.column_layout(table._row_width())] == [0, 1]  # power dropped
        table.rendered.clear()
        hidden: dict[str, tuple[str, ...]] = {k: (v[0], v[1], "999W") for k, v in data.items()}  # only the hidden column changed
        table.sync(hidden, sorted(hidden))
        await pilot.pause()
        assert not table.rendered, table.rendered
        shown = dict(hidden, h2=("h2", "77", "999W"))  # a shown cell changed: its line only
        table.sync(shown, sorted(shown))
        await pilot.pause()
        assert set(table.rendered) == {3}, table.rendered
        assert "77" in table.render_line(3).text


class ClippedApp(App[None]):
    """The table's last lines lie below its scrolling parent's bottom: Textual never draws them."""

    CSS = "VerticalScroll { height: 5; } #pad { height: 3; } Counted { height: 4; }"

    def compose(self) -> ComposeResult:
        from textual.containers import VerticalScroll
        from textual.widgets import Static

        with VerticalScroll():
            yield Static("above", id="pad")
            yield Counted()


@sync
async def test_a_line_clipped_out_of_view_is_marked_once_not_every_tick() -> None:
    app = ClippedApp()
    async with app.run_test(size=(40, 12)) as pilot:
        table = await drawn(app, pilot, VALUES)  # type: ignore[arg-type]
        assert table.size.height == 4 and table.rendered[1] and not table.rendered[3]  # line 3: never drawn
        table.sync(rows(VALUES), sorted(VALUES))
        # Nothing changed: no line is marked. (It was marked every tick: each frame's crop then
        # reached the clipped line, and Textual re-rendered every widget above it.)
        assert table._repaint_changed() == 0
        changed = dict(VALUES, host11=999)
        table.sync(rows(changed), sorted(changed))
        assert table._repaint_changed() == 0  # the change was marked by sync, once
        assert cell(table, "host11", "value") == "999"
