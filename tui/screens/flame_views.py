"""Views opened from the flame graph: sandwich, function table, reading guide."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Footer, Static

from gpulens.analysis.flame.labels import format_value
from gpulens.analysis.flame.model import Profile
from gpulens.analysis.flame.query import FunctionRow, Sandwich, function_table
from gpulens.tui.widgets.flamegraph import FlameGraph

READING_GUIDE = """\
[b]How to read a flame graph[/b]

Each bar is a function; the bars stacked on it are the functions it called.
The root is at the bottom. A bar's width is how much of the measured
resource (samples, seconds, or bytes of GPU memory) passed through it.

[b]self[/b]   what the function used itself, not counting its callees.
[b]total[/b]  self plus everything it called.

- The [b]widest bars at the top[/b] (leaves) are the biggest self consumers:
  they do the work or allocate the memory.
- A [b]wide bar with self 0[/b] only orchestrates calls; skip it when hunting
  the source, look above it.
- A wide bar with a [b]large self[/b] is an optimisation candidate.
- Read a stack [b]bottom-up[/b] to see why a function was called.

Labels: [b]Foo > bar[/b] method bar of class Foo; [b]Foo > __init__[/b] its
constructor; [b]bar[/b] a module-level function; [b]<interpreter trampoline>[/b]
CPython dispatch (ignore it); [b]0x7f15...[/b] native code without symbols.

Keys: arrows/hjkl move · enter focus · esc back · / search · n/N matches ·
e expand · c collapse chains · s sandwich · t functions · p pause · ? this guide
"""


class FlameHelpScreen(ModalScreen[None]):
    """The reading guide, after Azure's GPU-memory flame graph docs."""

    DEFAULT_CSS = """
    FlameHelpScreen { align: center middle; }
    FlameHelpScreen > Static {
        width: 84; height: auto; max-height: 90%;
        border: round $primary; background: $panel; padding: 1 2;
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,question_mark,q", "app.pop_screen", "Close"),
    ]

    def compose(self) -> ComposeResult:
        yield Static(READING_GUIDE)


class SandwichScreen(Screen[None]):
    """Callers (above: the function at the bottom, its callers on it) and callees."""

    DEFAULT_CSS = """
    SandwichScreen .sandwich-title { height: 1; background: $primary-muted; color: $foreground; padding: 0 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "app.pop_screen", "Back")]

    def __init__(self, sandwich: Sandwich) -> None:
        super().__init__()
        self.sandwich = sandwich

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(f"callers of {self.sandwich.name} (read upwards: who called it)", classes="sandwich-title")
            yield FlameGraph(self.sandwich.callers, id="callers")
            yield Static(f"callees of {self.sandwich.name} (what it spent its value on)", classes="sandwich-title")
            yield FlameGraph(self.sandwich.callees, id="callees")
        yield Footer()

    def on_flame_graph_sandwich_requested(self, message: FlameGraph.SandwichRequested) -> None:
        from gpulens.analysis.flame.query import sandwich

        self.app.push_screen(SandwichScreen(sandwich(message.control.profile, message.node)))

    def on_flame_graph_help_requested(self) -> None:
        self.app.push_screen(FlameHelpScreen())


class FunctionTableScreen(Screen[str | None]):
    """Functions merged across the tree; ``s``/``t`` sort by self/total, enter searches."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Back"),
        Binding("s", "sort('self')", "Sort by self"),
        Binding("t", "sort('total')", "Sort by total"),
    ]

    def __init__(self, profile: Profile) -> None:
        super().__init__()
        self.profile = profile
        self.sort_key = "self"
        self._rows: list[FunctionRow] = []

    def compose(self) -> ComposeResult:
        yield DataTable(cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("self", "self %", "total", "total %", "function", "file")
        self._fill()
        table.focus()

    def _fill(self) -> None:
        table = self.query_one(DataTable)
        table.clear()
        rows = list(function_table(self.profile))
        if self.sort_key == "total":
            rows.sort(key=lambda r: (-r.total_value, -r.self_value, r.name))
        self._rows = rows
        unit, whole = self.profile.unit, self.profile.total or 1.0
        for r in rows[:5000]:
            table.add_row(
                format_value(r.self_value, unit), f"{100 * r.self_value / whole:.1f}",
                format_value(r.total_value, unit), f"{100 * r.total_value / whole:.1f}",
                r.label, r.file or "",
            )

    def action_sort(self, key: str) -> None:
        """Sort the table by ``self`` or ``total``."""
        self.sort_key = key
        self._fill()

    def action_close(self) -> None:
        """Back to the graph."""
        self.dismiss(None)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.dismiss(self._rows[event.cursor_row].name)
