"""``?``: the keys of the screen below (its own and its widgets', from their BINDINGS), then the global ones."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.dom import DOMNode
from textual.screen import ModalScreen, Screen
from textual.widgets import Static

from gpulens.tui.widgets._keys import cursor_bindings
from gpulens.tui.widgets.header import crumb_of

GLOBAL_EXTRA = (
    ("ctrl+p", "command palette: every action"),
    (": hosts | jobs | gpus", "the fleet's hosts, jobs or GPUs as one table"),
    (": user NAME", "a user's jobs and the hosts they run on"),
    (": host NAME | job PID", "jump to a host or a job"),
    (": interval S | log", "refresh every S seconds; the warnings shown so far"),
)
"""Rows every screen's help ends with (not bound to one key)."""
MOVE_ACTIONS = ("cursor(", "page(")
ARROWS = {"up": "↑", "down": "↓", "pageup": "pgup", "pagedown": "pgdn"}
"""A table's cursor keys: one row, not six."""
CLEARER = {"help:Keys": "the keys of this screen (this list)", "jump:Jump": "command line (the : rows below)",
           "go_back:Back": "back (first: clear the filter)",
           "filter:Filter": "filter: a regex over hosts, jobs, users, tree IDs (!re inverts)",
           "pause:Pause": "pause / resume redrawing", "reverse:Reverse sort": "reverse the focused table's order",
           "select:Open": "open the row under the cursor", "open:Open": "open the row under the cursor"}
"""Longer help texts than the footer's word, by ``action:description`` (of the app and gpulens tables)."""
DATA_ONLY_ACTIONS = ("window(", "pause", "resume")
"""App keys that act on data screens only: not listed over a flame graph or a profiler."""
NAMES = (("question_mark", "?"), ("slash", "/"), ("colon", ":"), ("escape", "esc"), ("space", "space"),
         ("left_square_bracket", "["), ("right_square_bracket", "]"), ("plus", "+"), ("minus", "-"),
         ("equals_sign", "="), ("backspace", "bksp"), (",", " / "))


def _display(b: Binding) -> str:
    key = b.key_display or b.key
    for name, shown in NAMES:
        key = key.replace(name, shown)
    return key


def _own_bindings(node_type: type[DOMNode]) -> list[Binding]:
    """The bindings gpulens defines on ``node_type`` and its gpulens base classes, most derived first."""
    out: list[Binding] = []
    for klass in node_type.__mro__:
        if not klass.__module__.startswith("gpulens.") or not issubclass(klass, DOMNode):
            continue
        out += [b for b in klass.__dict__.get("BINDINGS", []) if isinstance(b, Binding)]
    return out


def screen_bindings(screen: Screen[Any]) -> list[Binding]:
    """The screen's keys, then those of the widgets on it that take focus (a table's, a timeline's).

    Read from ``BINDINGS``, so the help cannot drift from what the keys do.
    """
    out = _own_bindings(type(screen))
    seen_types: set[type[DOMNode]] = set()
    try:
        widgets = list(screen.query("*"))
    except (RuntimeError, AttributeError):  # a screen not mounted (a unit test builds the rows from the class)
        widgets = []
    for w in widgets:
        if type(w) in seen_types or not w.focusable:
            continue
        seen_types.add(type(w))
        out += _own_bindings(type(w))
    return out


def _hidden(screen: Screen[Any], b: Binding) -> bool:
    """Whether the screen hides ``b`` now (its ``check_action`` says False: ``--readonly``, no Kineto)."""
    try:
        return screen.check_action(b.action.split("(")[0], ()) is False
    except (RuntimeError, AttributeError):  # a screen not mounted (a unit test builds the rows from the class)
        return False


def key_rows(screen: Screen[Any], app_bindings: list[BindingType]) -> list[tuple[str, str]]:
    """(keys, what) rows: the screen's keys and its widgets', then the app's, then the global extras.

    Keys with the same description share a row (``q / ctrl+c``); three or
    more keys whose descriptions share a first word share one too (``1 2 3 4
    Window: 1m / 5m / 15m / 1h``); a key the screen binds hides the app's. The
    app's window and pause keys are listed on data screens only, and a key the
    screen hides now (``--readonly``, a job that does not poll Kineto) not at all.
    """
    rows, moves = _binding_rows(screen, _listed(screen, app_bindings))
    rows = [(" ".join(moves) if not k and w == "move the cursor" else k, w) for k, w in rows]
    return [(k, _lower(w)) for k, w in _grouped(rows)] + list(GLOBAL_EXTRA)


def _listed(screen: Screen[Any], app_bindings: list[BindingType]) -> list[Binding]:
    """The bindings to list, screen's first: described, first of their key, and not hidden on this screen."""
    from gpulens.tui.screens.base import DataScreen

    data = isinstance(screen, DataScreen)
    seen: set[str] = set()
    app_own = [b for b in app_bindings if isinstance(b, Binding)]
    out: list[Binding] = []
    for b in [*screen_bindings(screen), *app_own]:
        if not b.description or b.key in seen:
            continue
        if b in app_own and not data and b.action.startswith(DATA_ONLY_ACTIONS):
            continue
        if b not in app_own and _hidden(screen, b):
            continue
        seen.add(b.key)
        out.append(b)
    return out


def _binding_rows(screen: Screen[Any], listed: list[Binding]) -> tuple[list[tuple[str, str]], list[str]]:
    """(keys, what) rows, keys of the same description on one row; and the cursor keys, whose row has no keys yet."""
    rows: list[tuple[str, str]] = []
    moves: list[str] = []
    for b in listed:
        if b.action.startswith(MOVE_ACTIONS):
            if not moves:
                rows.append(("", "move the cursor"))
            moves += [ARROWS.get(k, k) for k in b.key.split(",")]
            continue
        key, what = _display(b), _what(screen, b)
        same = next((i for i, r in enumerate(rows) if r[1] == what), None)
        if same is not None:
            rows[same] = (f"{rows[same][0]} / {key}", what)
        else:
            rows.append((key, what))
    return rows, moves


def _what(screen: Screen[Any], b: Binding) -> str:
    """What ``b`` does, in words: the clearer text where there is one."""
    if b.action == "go_back" and not hasattr(screen, "filter_widgets"):
        return "back"  # a screen without a / filter has none to clear first
    return CLEARER.get(f"{b.action.split('(')[0]}:{b.description}", b.description)


def _grouped(rows: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Runs of three or more one-character keys whose descriptions share a first word, each as one row."""
    grouped: list[tuple[str, str]] = []
    i = 0
    while i < len(rows):
        j = _run_end(rows, i)
        if j - i >= 3:
            grouped.append(_group(rows[i:j]))
            i = j
        else:
            grouped.append(rows[i])
            i += 1
    return grouped


def _run_end(rows: list[tuple[str, str]], i: int) -> int:
    """The end of the run from ``i``: one-character keys whose descriptions start with row i's first word."""
    first = rows[i][1].split(" ", 1)
    j = i
    while (j < len(rows) and len(first) == 2 and len(rows[j][0]) == 1
           and rows[j][1].startswith(first[0] + " ")):
        j += 1
    return j


def _group(run: list[tuple[str, str]]) -> tuple[str, str]:
    """One row for a run: ``1 2 3 4``, ``Window: 1m / 5m / 15m / 1h``."""
    first = run[0][1].split(" ", 1)[0]
    rest = [r[1].split(" ", 1)[1] for r in run]
    if first == "Sort":  # "Sort by Util", ...: the letters are underlined in the headers
        what = "sort the focused table by the column with that letter underlined; again: reverse"
    else:
        what = f"{first}: " + " / ".join(rest)
    return " ".join(r[0] for r in run), what


def _lower(what: str) -> str:
    """``Next panel`` -> ``next panel``; ``GPU util`` stays."""
    return what[0].lower() + what[1:] if len(what) > 1 and not what[1].isupper() else what


def alert_rows(screen: Screen[Any]) -> list[tuple[str, str]]:
    """The alert legend, for screens whose tables show alerts (``SHOWS_ALERTS``): marker + code, meaning."""
    if not getattr(screen, "SHOWS_ALERTS", False):
        return []
    from gpulens.tui.widgets.thresholds import ALERT_HELP, MARKS

    return [(f"{MARKS[info.level]} {code}".strip(), info.meaning) for code, info in ALERT_HELP.items()]


def level_rows(screen: Screen[Any]) -> list[tuple[str, str]]:
    """Where coloured values start, for screens that colour GPU values (``SHOWS_LEVELS``), as configured."""
    if not getattr(screen, "SHOWS_LEVELS", False):
        return []
    from gpulens.tui.widgets.thresholds import DEFAULT, threshold_rows

    try:
        thresholds = screen.ctx.cfg.thresholds  # type: ignore[attr-defined]
    except (RuntimeError, AttributeError):  # a screen not mounted (a unit test reads the class): the defaults
        thresholds = DEFAULT
    return threshold_rows(thresholds)


def key_table(screen: Screen[Any], app_bindings: list[BindingType]) -> Table:
    """Keys of ``screen`` and the app as a two-column table."""
    table = Table(box=None, show_header=False, padding=(0, 2))
    table.add_column(style="bold", max_width=26)
    table.add_column()
    for k, d in key_rows(screen, app_bindings):
        table.add_row(Text(k), Text(d))  # plain: "[thresholds]", "[ ]" are not markup
    alerts = alert_rows(screen)
    if alerts:
        table.add_row("", "")
        table.add_row("alerts", "(! critical · ▲ warning · ▽ idle; the marker keeps the meaning without colour)")
        for k, d in alerts:
            table.add_row(Text(k), Text(d))
    notes: tuple[tuple[str, str], ...] = getattr(screen, "HELP_NOTES", ())
    if notes:  # what the screen's figures mean, where a key does not say it
        table.add_row("", "")
        for k, d in notes:
            table.add_row(Text(k), Text(d))
    levels = level_rows(screen)
    if levels:
        table.add_row("", "")
        table.add_row(Text("values"), Text("marked where they pass the thresholds ([thresholds] in the config file)"))
        for k, d in levels:
            table.add_row(Text(k), Text(d))
    return table


class HelpScreen(ModalScreen[None]):
    """All keys; esc, ? or q closes it (as q closes less, man and k9s' help; docs/keys.md)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,question_mark,q", "dismiss", "Close"),
        *cursor_bindings("dismiss", "Close"),  # the tables' keys move the list: k j pgup pgdn home end
        Binding("space,ctrl+f", "page(1)", "Page down", show=False),
        Binding("ctrl+b", "page(-1)", "Page up", show=False),
        Binding("g", "cursor(-1000000)", "Top", show=False),
        Binding("G", "cursor(1000000)", "Bottom", show=False),
    ]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 84; max-width: 100%; height: auto; max-height: 90%;
        border: round $accent; background: $surface; padding: 0 1; }
    """

    def __init__(self, below: Screen[Any], app_bindings: list[BindingType]) -> None:
        super().__init__()
        self.below = below
        self.app_bindings = app_bindings

    def compose(self) -> ComposeResult:
        """The key table."""
        with VerticalScroll() as box:
            box.border_title = f"keys · {crumb_of(self.below)}"
            yield Static(key_table(self.below, self.app_bindings), id="keys")

    def on_mount(self) -> None:
        """Say when the list goes on below the box (the alert legend and thresholds come last)."""
        box = self.query_one(VerticalScroll)
        self.watch(box, "scroll_y", lambda _: self._more(), init=False)
        self.call_after_refresh(self._more)

    def on_resize(self, event: object) -> None:
        """A new size: more may fit, or less."""
        self.call_after_refresh(self._more)

    def _more(self) -> None:
        box = self.query_one(VerticalScroll)
        below = int(box.max_scroll_y - box.scroll_y)
        box.border_subtitle = f"↓ j: {below} more line{'s' * (below != 1)}" if below > 0 else ""

    def action_cursor(self, lines: int) -> None:
        """j / k, g / G (home / end): scroll the list by ``lines``."""
        box = self.query_one(VerticalScroll)
        box.scroll_to(y=max(0, min(box.max_scroll_y, box.scroll_y + lines)), animate=False)
        self._more()

    def action_page(self, pages: int) -> None:
        """space / pgdn, pgup: scroll the list by ``pages`` of the box's height."""
        self.action_cursor(pages * max(1, self.query_one(VerticalScroll).size.height - 1))

    async def action_dismiss(self, result: None = None) -> None:
        """Close."""
        self.dismiss(None)
