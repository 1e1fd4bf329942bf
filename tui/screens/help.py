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


def _display(b: Binding) -> str:
    key = b.key_display or b.key
    for name, shown in (("question_mark", "?"), ("slash", "/"), ("colon", ":"), ("escape", "esc")):
        key = key.replace(name, shown)
    return key


def key_rows(screen: Screen[object], app_bindings: list[BindingType]) -> list[tuple[str, str]]:
    """(keys, what) rows: the screen's keys, then the app's, then the extras.

    Keys with the same description share a row (``q / ctrl+c``); three or
    more keys whose descriptions share a first word share one too (``1 2 3 4
    Window: 1m / 5m / 15m / 1h``); an extra replaces a bound key's terse text.
    """
    rows: list[tuple[str, str]] = []
    seen: set[str] = set()
    for b in [*getattr(screen, "BINDINGS", []), *app_bindings]:
        if not isinstance(b, Binding) or not b.description or b.key in seen:
            continue
        seen.add(b.key)
        key, what = _display(b), b.description
        same = next((i for i, r in enumerate(rows) if r[1] == what), None)
        if same is not None:
            rows[same] = (f"{rows[same][0]} / {key}", what)
        else:
            rows.append((key, what))
    grouped: list[tuple[str, str]] = []
    i = 0
    while i < len(rows):
        first = rows[i][1].split(" ", 1)
        j = i
        while (j < len(rows) and len(first) == 2 and len(rows[j][0]) == 1
               and rows[j][1].startswith(first[0] + " ")):
            j += 1
        if j - i >= 3:
            grouped.append((" ".join(r[0] for r in rows[i:j]),
                            f"{first[0]}: " + " / ".join(r[1].split(" ", 1)[1] for r in rows[i:j])))
            i = j
        else:
            grouped.append(rows[i])
            i += 1
    extras = dict(EXTRA)
    out = [(k, extras.pop(k, w)) for k, w in grouped]
    return out + list(extras.items())


def key_table(screen: Screen[object], app_bindings: list[BindingType]) -> Table:
    """Keys of ``screen`` and the app as a two-column table."""
    table = Table(box=None, show_header=False, padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    for k, d in key_rows(screen, app_bindings):
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
