"""Views opened from the flame graph: sandwich, function table, reading guide, thread picker, export."""

from __future__ import annotations

from typing import ClassVar, TypeVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen, Screen
from textual.widget import AwaitMount, Widget
from textual.widgets import DataTable, Footer, Input, OptionList, Static
from textual.widgets.option_list import Option

from gpulens.analysis.flame.group import ALL, ProfileGroup
from gpulens.analysis.flame.labels import format_value
from gpulens.analysis.flame.model import Profile
from gpulens.analysis.flame.query import FunctionRow, Sandwich, function_table
from gpulens.core.sanitize import clean_text
from gpulens.tui._compositor import SparseScreen
from gpulens.tui.widgets.flamegraph import FlameGraph
from gpulens.tui.widgets.header import AppHeader
from gpulens.tui.widgets.ordered_input import OrderedInput

ResultT = TypeVar("ResultT")

READING_GUIDE = """\
[b]How to read a flame graph[/b]

Each bar is a function; the bars stacked on it are the functions it called.
The root is at the bottom. A bar's width is how much of the measured
resource (samples, seconds, hardware events, or bytes of GPU memory)
passed through it.

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
CPython dispatch (ignore it); [b]libc10.so: malloc[/b] a native function;
[b]libffi.so+0x6f79[/b] or [b]0x7f15...[/b] native code without a symbol.
"""


def keys_text(keys: list[tuple[str, str]]) -> str:
    """``[b]Keys[/b]: enter focus · / search ...`` wrapped for the guide's width."""
    items = [f"{k} {what}" for k, what in keys]
    lines, line = [], "[b]Keys:[/b]"
    for item in items:
        if len(line) + len(item) + 3 > 76:
            lines.append(line)
            line = "  " + item
        else:
            line = f"{line} {item}" if line.endswith("[/b]") else f"{line} · {item}"
    lines.append(line)
    return "\n".join(lines)


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
        Binding("escape,question_mark,q", "app.pop_screen", "Close"),  # q closes a help, as in less (docs/keys.md)
    ]

    def __init__(self, keys: list[tuple[str, str]] | None = None) -> None:
        super().__init__()
        self.keys = keys or [("?", "this guide")]

    def compose(self) -> ComposeResult:
        # The keys first: a short terminal cuts the end of the guide, not them.
        yield Static(keys_text(self.keys) + "\n\n" + READING_GUIDE)


class CrumbedScreen(SparseScreen, Screen[ResultT]):
    """A flame screen that draws its own breadcrumbs until an :class:`AppHeader` shows them.

    ``gpulens flame`` has no header: each screen's first line is its crumbs. The main
    TUI mounts an :class:`AppHeader` on every screen without one, with crumbs from the
    screens' ``crumb``; the screen's own crumbs would repeat them, so they go
    (:meth:`header_mounted`) in the layout that brings the header.
    """

    DEFAULT_CSS = """
    CrumbedScreen .flame-crumbs { height: 1; background: $panel; text-style: bold; padding: 0 1; }
    CrumbedScreen.-app-header .flame-crumbs { display: none; }
    """

    crumb = ""
    """This screen's name in the breadcrumbs (``Functions``)."""

    def mount(self, *widgets: Widget, before: int | str | Widget | None = None,
              after: int | str | Widget | None = None) -> AwaitMount:
        """As Textual's; an :class:`AppHeader` among ``widgets`` takes over the crumbs."""
        if not self.has_header and any(isinstance(w, AppHeader) for w in widgets):
            self.add_class("-app-header")
            self.header_mounted()
        return super().mount(*widgets, before=before, after=after)

    @property
    def has_header(self) -> bool:
        """An :class:`AppHeader` shows the crumbs (the main TUI's screens)."""
        return self.has_class("-app-header")

    def header_mounted(self) -> None:
        """Called as an :class:`AppHeader` is mounted; the ``.flame-crumbs`` line is hidden by then."""


class SandwichScreen(CrumbedScreen[None]):
    """Callers (above: the function at the bottom, its callers on it) and callees."""

    DEFAULT_CSS = """
    SandwichScreen .sandwich-title { height: 1; background: $primary-muted; color: $foreground; padding: 0 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "app.pop_screen", "Back"),
                                              Binding("q", "app.quit", "Quit")]

    def __init__(self, sandwich: Sandwich, crumbs: str = "") -> None:
        super().__init__()
        self.sandwich = sandwich
        self.crumbs = crumbs
        """The crumbs of the screens below (``gpulens flame › Flame graph``)."""
        self.crumb = f"Sandwich: {sandwich.name}"

    @property
    def crumbs_line(self) -> str:
        """``gpulens flame › Flame graph › Sandwich: step``."""
        return f"{self.crumbs} › {self.crumb}".lstrip(" ›")

    def compose(self) -> ComposeResult:
        with Vertical():
            # Text, not str: a frame's name ("[@click=...]" in a profiled file's path) is never markup.
            yield Static(Text(self.crumbs_line), classes="flame-crumbs")
            yield Static(Text(f"callers of {self.sandwich.name} (read upwards: who called it)"), classes="sandwich-title")
            yield FlameGraph(self.sandwich.callers, id="callers")
            yield Static(Text(f"callees of {self.sandwich.name} (what it spent its value on)"), classes="sandwich-title")
            yield FlameGraph(self.sandwich.callees, id="callees")
        yield Footer()

    def on_flame_graph_sandwich_requested(self, message: FlameGraph.SandwichRequested) -> None:
        from gpulens.analysis.flame.query import sandwich

        self.app.push_screen(SandwichScreen(sandwich(message.control.profile, message.node), self.crumbs_line))

    def on_flame_graph_help_requested(self, message: FlameGraph.HelpRequested) -> None:
        self.app.push_screen(FlameHelpScreen([*message.control.key_help(), ("q", "quit"), ("?", "this guide")]))


class FunctionTableScreen(CrumbedScreen[str | None]):
    """Functions merged across the tree; ``s``/``t`` sort by self/total, enter searches."""

    DEFAULT_CSS = """
    /* The table scrolls, not the screen: at its auto height it would push the crumbs off the top. */
    FunctionTableScreen DataTable { height: 1fr; }
    """
    crumb = "Functions"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Back"),
        Binding("s", "sort('self')", "Sort by self"),
        Binding("t", "sort('total')", "Sort by total"),
        Binding("q", "app.quit", "Quit"),
    ]

    def __init__(self, profile: Profile, crumbs: str = "") -> None:
        super().__init__()
        self.profile = profile
        self.crumbs = crumbs
        self.sort_key = "self"
        self._rows: list[FunctionRow] = []

    def compose(self) -> ComposeResult:
        yield Static(Text(f"{self.crumbs} › {self.crumb}".lstrip(" ›")), classes="flame-crumbs")
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


class ProfilePickerScreen(ModalScreen[int | str | None]):
    """Choose a thread's profile (or all merged) of a file with several; enter picks, esc keeps."""

    DEFAULT_CSS = """
    ProfilePickerScreen { align: center middle; }
    ProfilePickerScreen > Vertical {
        width: 80%; max-width: 100; height: auto; max-height: 80%;
        border: round $primary; background: $panel; padding: 0 1;
    }
    ProfilePickerScreen OptionList, ProfilePickerScreen OptionList:focus {
        width: 100%; height: auto; max-height: 20; border: none; padding: 0;
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "close", "Keep"), Binding("q", "app.quit", "Quit")]

    def __init__(self, group: ProfileGroup, current: int | str | None) -> None:
        super().__init__()
        self.group = group
        self.current = group.active if current is None else current
        self.choices: list[int | str] = [ALL, *range(len(group))]

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(Text.assemble(("Profiles in " + clean_text(self.group.title or "this file"), "bold"),
                                       " (one per thread): enter shows one"))
            options = [Option(Text(("● " if c == self.current else "  ") + clean_text(self.group.label(c))))
                       for c in self.choices]
            yield OptionList(*options)

    def on_mount(self) -> None:
        menu = self.query_one(OptionList)
        menu.highlighted = self.choices.index(self.current) if self.current in self.choices else 0
        menu.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(self.choices[event.option_index])

    def action_close(self) -> None:
        """Keep the profile shown."""
        self.dismiss(None)


class ExportScreen(ModalScreen[str | None]):
    """Ask where to export the focused subtree: ``*.json`` writes speedscope, anything else folded."""

    DEFAULT_CSS = """
    ExportScreen { align: center middle; }
    ExportScreen > Vertical {
        width: 80%; max-width: 100; height: auto; border: round $primary; background: $panel; padding: 0 1;
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "close", "Cancel")]

    def __init__(self, what: str, default: str) -> None:
        super().__init__()
        self.what = what
        self.default = default

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(f"Export {self.what}: folded stacks (integer samples/µs/bytes, as the name's suffix "
                         "says) or, for a name ending .json, speedscope. Enter writes, esc cancels.")
            yield OrderedInput(value=self.default, id="export-path")

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)

    def action_close(self) -> None:
        """Write nothing."""
        self.dismiss(None)
