"""``?``: every key, for the app and the screen below."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Static

EXTRA = (
    ("enter", "open the row under the cursor"),
    ("esc", "back (or clear the filter)"),
    ("tab / shift+tab", "next / previous table"),
    ("up down j k", "move in a table (pageup, pagedown, home, end)"),
    ("click", "a row: cursor there; again: open it"),
    ("ctrl+p", "command palette: every action"),
    (": host NAME", "jump to a host"),
    (": job PID|KEY", "jump to a job"),
)


def key_table(screen: Screen[object], app_bindings: list[BindingType]) -> Table:
    """Keys of ``screen`` and the app as a two-column table."""
    table = Table(box=None, show_header=False, padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    seen: set[str] = set()
    for b in [*getattr(screen, "BINDINGS", []), *app_bindings]:
        if not isinstance(b, Binding) or not b.description or b.key in seen:
            continue
        seen.add(b.key)
        table.add_row(b.key_display or b.key.replace("question_mark", "?").replace("slash", "/")
                      .replace("colon", ":"), b.description)
    for k, d in EXTRA:
        table.add_row(k, d)
    return table


class HelpScreen(ModalScreen[None]):
    """All keys; any of esc, ?, q closes it."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,question_mark,q", "dismiss", "Close"),
    ]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 64; max-width: 100%; height: auto; max-height: 90%;
        border: round $accent; background: $surface; padding: 0 1; }
    """

    def __init__(self, below: Screen[object], app_bindings: list[BindingType]) -> None:
        super().__init__()
        self.below = below
        self.app_bindings = app_bindings

    def compose(self) -> ComposeResult:
        """The key table."""
        with VerticalScroll() as box:
            box.border_title = "keys"
            yield Static(key_table(self.below, self.app_bindings), id="keys")

    async def action_dismiss(self, result: None = None) -> None:
        """Close."""
        self.dismiss(None)
