"""What the screens with tables share: the ``/`` regex line and sorting by a column's letter.

:class:`FindingScreen` keeps one compiled :class:`~gpulens.tui.finding.Filter`
(compiled when typed, never per tick); an invalid regex says why in one line
under the filter and the old filter stays. A shifted letter sorts the focused
table by the column whose letter is underlined in its header; the same letter
again reverses.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from rich.text import Text
from textual import events
from textual.actions import SkipAction
from textual.app import SystemCommand
from textual.binding import Binding, BindingType
from textual.widgets import Input, Static

from gpulens.store.views import JobView
from gpulens.tui.context import ScreenContext
from gpulens.tui.finding import NO_FILTER, Filter, FilterError, Selection, compile_filter
from gpulens.tui.screens.base import DataScreen
from gpulens.tui.widgets._table import IncrementalTable
from gpulens.tui.widgets.ordered_input import OrderedInput

FILTER_HINT = "regex over hosts, jobs, users, tree IDs; !re inverts (Enter keeps, Esc clears)"


def sort_bindings(*tables: type[IncrementalTable]) -> list[BindingType]:
    """One binding per sort letter of ``tables`` (``U``: Util in one table, User in another)."""
    labels: dict[str, list[str]] = {}
    for table in tables:
        names = {c[0]: c[1] for c in table.COLUMNS}
        for column, letter in table.SORT_KEYS.items():
            if names[column] not in labels.setdefault(letter, []):
                labels[letter].append(names[column])
    return [Binding(letter, f"sort({letter!r})", f"Sort by {'/'.join(names)}", show=False)
            for letter, names in labels.items()]


HOSTS_TITLE = "Hosts · means over the window"
"""The host table's title (overview, ``:hosts``): its figures are window means."""
JOBS_TITLE = "Jobs · util: mean over the window; GPU memory: now"
"""The job table's title (overview, ``:jobs``)."""

class FilterInput(OrderedInput):
    """The ``/`` line. Keys that reach it after Enter hid it (typed fast, queued
    behind the Enter) go on to the table that now has focus."""

    async def _on_key(self, event: events.Key) -> None:
        target = self.screen.focused
        if not self.display and target is not None and target is not self:
            event.stop()
            event.prevent_default()
            target._forward_event(events.Key(event.key, event.character))
            return
        if event.key == "enter":
            # Here, not through the binding (which runs only once the key has
            # bubbled up to the app, after the keys queued behind it).
            event.stop()
            event.prevent_default()
            self.display = False
            screen = self.screen
            if isinstance(screen, FindingScreen) and screen.tables():
                screen.set_focus(screen.tables()[0])
            self.post_message(self.Submitted(self, self.value, None))
            return
        await super()._on_key(event)


class FindingScreen(DataScreen):
    """A data screen with tables, the ``/`` filter and column sorting (subclasses compose them).

    Subclasses yield :meth:`filter_widgets` in their compose, list their sort
    letters with :func:`sort_bindings` and read :meth:`selection`.
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        # Priority: '/' runs when the key arrives, so the keys typed right after
        # it go into the filter line, not to the table.
        Binding("slash", "filter", "Filter", priority=True),
        Binding("r", "reverse", "Reverse sort", show=False),
        Binding("tab", "app.focus_next", "Next panel", show=False),
        Binding("shift+tab", "app.focus_previous", "Previous panel", show=False),
    ]

    def __init__(self, *, context: ScreenContext | None = None) -> None:
        super().__init__(context=context)
        self.finder: Filter = NO_FILTER
        """The filter in force (compiled once, when typed)."""
        self._kept: Filter = NO_FILTER
        """The filter Enter last kept: what an invalid regex leaves in force (not its valid beginning)."""
        self._selection_key: tuple[object, ...] | None = None
        self._selection: Selection | None = None

    def filter_widgets(self) -> Iterable[Input | Static]:
        """The filter line and its one-line error, hidden until ``/``."""
        yield Static("", id="filter-error")
        yield FilterInput(placeholder=FILTER_HINT, id="filter")

    def tables(self) -> list[IncrementalTable]:
        """The screen's tables, first one focused by default."""
        return list(self.query(IncrementalTable))

    def on_mount(self) -> None:
        """Hide the filter line until ``/``; the tables mark values past the config's thresholds."""
        for table in self.tables():
            if hasattr(table, "thresholds"):
                table.thresholds = self.ctx.cfg.thresholds
        self.query_one("#filter").display = False
        self.query_one("#filter-error").display = False

    def selection(self, hosts: list[str], jobs: list[JobView], gpus: list[tuple[str, int]]) -> Selection:
        """What the filter keeps, recomputed only when the data, window or filter changed."""
        store = self.ctx.store
        key = (self.finder, store.version, self.ctx.window_s, len(hosts), len(jobs), len(gpus))
        if key != self._selection_key or self._selection is None:
            self._selection = self.finder.select(hosts, jobs, gpus)
            self._selection_key = key
        return self._selection

    def filter_note(self) -> str:
        """`` · filter 'node0[1-3]'`` for a box subtitle ('' without a filter)."""
        # A border title is markup: the user's regex ("node0[1-3]") is escaped, never styled.
        shown = self.finder.text.replace("[", "\\[")
        return f" · filter '{shown}'" if self.finder.active else ""

    # ---- the filter line ----------------------------------------------------
    def _filtering(self) -> bool:
        return self.focused is self.query_one("#filter", Input)

    def action_filter(self) -> None:
        """Show the filter line."""
        box = self.query_one("#filter", Input)
        if self._filtering():
            raise SkipAction()  # a '/' typed in the filter
        box.display = True
        # At once, not via focus() (call_later): keys typed right after '/'
        # are already queued and would go to the table.
        self.set_focus(box)

    def set_filter(self, text: str) -> str | None:
        """Compile and apply ``text``; the error (old filter kept) or None."""
        error = self.query_one("#filter-error", Static)
        try:
            self.finder = compile_filter(text)
        except FilterError as err:
            error.update(Text(str(err)))  # the regex is the user's text, never markup
            error.display = True
            return str(err)
        error.display = False
        for table in self.tables():
            table.filter_text = self.finder.text
        self.refresh_data(force=True)
        return None

    def on_input_changed(self, event: Input.Changed) -> None:
        """Filter as you type."""
        if event.input.id == "filter":
            event.stop()
            self.set_filter(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter in the filter line: keep the filter; back to the table."""
        if event.input.id != "filter":
            return
        event.stop()
        error = self.set_filter(event.value)
        if error is not None:
            # As you typed, "bob|(" applied "bob|" (all of it valid): the filter kept before stays.
            self.set_filter(self._kept.text)
            with event.input.prevent(Input.Changed):
                event.input.value = self._kept.text
            self.notify(error, severity="error", timeout=4)
        self._kept = self.finder
        event.input.display = False
        self.query_one("#filter-error").display = False
        tables = self.tables()
        if tables:
            self.set_focus(tables[0])  # at once: the next keys are for the table

    def clear_filter(self) -> bool:
        """Drop the filter; True if there was one."""
        box = self.query_one("#filter", Input)
        had = bool(box.value) or box.display or self.finder.active
        with box.prevent(Input.Changed):
            box.value = ""
        box.display = False
        self.set_filter("")
        self._kept = self.finder
        tables = self.tables()
        if tables:
            self.set_focus(tables[0])
        return had

    def go_back(self) -> bool:
        """Esc clears the filter first; with none, the app goes back."""
        return self.clear_filter()

    # ---- sorting ------------------------------------------------------------
    def focused_table(self) -> IncrementalTable | None:
        """The table with focus, else the first."""
        tables = self.tables()
        return next((t for t in tables if t.has_focus), tables[0] if tables else None)

    def action_sort(self, letter: str) -> None:
        """Sort the focused table by the column of ``letter`` (again: reverse)."""
        table = self.focused_table()
        if table is None:
            return
        label = table.sort_by_letter(letter)
        if label is None:
            self.notify(f"{letter}: this table has no such column (its sort letters are underlined)",
                        severity="warning", timeout=2)
            return
        self.refresh_data(force=True)

    def action_reverse(self) -> None:
        """Reverse the focused table's order."""
        table = self.focused_table()
        if table is not None:
            table.reverse_sort()
            self.refresh_data(force=True)

    def commands(self) -> Iterable[SystemCommand]:
        """Filter and reverse, for the command palette."""
        yield SystemCommand("Filter", "/: regex over hosts, jobs, users and tree IDs", self.action_filter)
        yield SystemCommand("Reverse sort", "r: reverse the focused table", self.action_reverse)
