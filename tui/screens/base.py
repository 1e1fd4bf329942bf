"""What every gpulens data screen shares: its context, header, breadcrumbs, narrow layout, refresh."""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterable, Sequence

from rich.cells import cell_len
from rich.text import Text
from textual import events
from textual.app import ComposeResult, SystemCommand
from textual.containers import Grid
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import Static

from gpulens.tui._compositor import SparseScreen
from gpulens.tui.context import ScreenContext
from gpulens.tui.screens._plots import PlotSpec, absent_text
from gpulens.tui.widgets.header import STATE_FIELDS, AppHeader, crumbs_of, header_state
from gpulens.tui.widgets.panel import CustomPanel
from gpulens.tui.widgets.plot import TimeSeriesPlot
from gpulens.tui.workers import Background

NARROW_WIDTH = 100
UPDATE_TAKES_LAYOUT = "layout" in inspect.signature(Static.update).parameters
"""Textual >= 8: ``Static.update(..., layout=False)`` repaints without laying the screen out again."""
_NON_BLANK = re.compile(r"\S")


def update_static(shown: dict[str, object], widget: Static, content: Text | str, *,
                  display: bool | None = None, same_shape_repaints: bool = False) -> bool:
    """``widget.update(content)`` only when it differs from what ``shown`` says it was given; True if it did.

    ``Static.update`` repaints and lays out the widget even for equal content:
    a screen calling it every tick for an unchanged line pays for nothing.
    ``display``: show or hide the widget too. ``same_shape_repaints``: text whose
    words keep their lengths wraps to the same lines, so it is only repainted
    (a layout costs ~17 ms).
    """
    key = widget.id or str(id(widget))
    state = content if display is None else (content, display)
    old = shown.get(key)
    if old == state:
        return False
    shown[key] = state
    if display is not None:
        widget.display = display
    if (same_shape_repaints and UPDATE_TAKES_LAYOUT and isinstance(old, Text) and isinstance(content, Text)
            and _NON_BLANK.sub("x", old.plain) == _NON_BLANK.sub("x", content.plain)):
        widget.update(content, layout=False)
    else:
        widget.update(content)
    return True


_LEFT_OUT = "#plots-na:left-out"
"""The key under which :meth:`DataScreen.leave_out_plots` keeps the reasons it was last given."""

_HEADER_FIELDS = ("crumbs", *STATE_FIELDS)
"""The header's fields, in the order :meth:`DataScreen.update_header` works them out."""


class DataScreen(SparseScreen, Screen[None]):
    """A screen fed by the store; the app calls :meth:`refresh_data` after new data.

    It reads through :attr:`ctx` (the ``context`` given, else the app, which
    provides one) and navigates by posting :mod:`gpulens.tui.messages`.
    """

    crumb = "Overview"

    def __init__(self, *, context: ScreenContext | None = None) -> None:
        super().__init__()
        self._screen_context = context
        self.background = Background(self)
        """This screen's thread workers, cancelled when it goes away."""
        self._header_state: tuple[AppHeader, tuple[object, ...]] | None = None
        self._shown: dict[str, object] = {}
        """What each Static last showed (:meth:`update_static`)."""
        """What :meth:`update_header` last set, by header: an equal tick sets nothing."""

    @property
    def ctx(self) -> ScreenContext:
        """What the screen reads: store, clock, window, source, trace service, config."""
        if self._screen_context is None:
            app = self.app
            if not isinstance(app, ScreenContext):
                raise TypeError(f"{type(self).__name__} needs a ScreenContext: pass context= or run it "
                                "in an app that provides one")
            self._screen_context = app
        return self._screen_context

    def is_local(self, host: str) -> bool:
        """True for this machine (py-spy and the trace service reach only local pids)."""
        return host == self.ctx.hostname

    def on_resize(self, event: events.Resize) -> None:
        """The ``.narrow`` layout below 100 columns (80x24 works)."""
        self.set_class(event.size.width < NARROW_WIDTH, "narrow")

    def on_screen_resume(self) -> None:
        """Back on top (after Esc): catch up with the data."""
        self.set_class(self.app.size.width < NARROW_WIDTH, "narrow")
        self.refresh_data(force=True)

    def on_unmount(self) -> None:
        """Gone: its workers' results are no longer wanted."""
        self.background.cancel()

    def update_header(self) -> None:
        """Breadcrumbs and state from the context."""
        ctx = self.ctx
        try:
            header = self.query_one(AppHeader)
        except NoMatches:
            if self.torn_down():
                return
            raise
        state = (crumbs_of(self.app.screen_stack, self), *header_state(ctx))
        last = self._header_state[1] if self._header_state and self._header_state[0] is header else None
        if state == last:
            return  # a tick whose clock reads the same second: nothing to set
        self._header_state = (header, state)
        # Only what changed (the clock, most ticks): each set costs a reactive's checks.
        for name, value, old in zip(_HEADER_FIELDS, state, last or (None,) * len(state), strict=True):
            if value != old:
                setattr(header, name, value)

    def update_static(self, selector: str, content: Text | str, *, display: bool | None = None,
                      same_shape_repaints: bool = False) -> bool:
        """:func:`update_static` of the Static ``selector`` on this screen."""
        return update_static(self._shown, self.query_one(selector, Static), content, display=display,
                             same_shape_repaints=same_shape_repaints)

    def leave_out_plots(self, specs: Sequence[PlotSpec], reasons: Sequence[str | None]) -> bool:
        """Hide the plots of ``specs`` that have a reason (nothing to draw), named with it on one line.

        Eight empty GPU boxes on a host without GPUs tell less than one line
        that names them and says why; the plots that do read get the room.
        True when what is left out changed (the screen lays its plots out again).
        """
        key = tuple(reasons)
        if self._shown.get(_LEFT_OUT) == key:
            return False
        self._shown[_LEFT_OUT] = key
        for spec, reason in zip(specs, reasons, strict=True):
            self.query_one(f"#{spec.id}", TimeSeriesPlot).display = reason is None
        absent = [(spec, r) for spec, r in zip(specs, reasons, strict=True) if r is not None]
        self.update_static("#plots-na", absent_text(absent) if absent else "", display=bool(absent))
        return True

    def left_out_lines(self, width: int) -> int:
        """Lines the line naming the left-out plots takes at ``width`` (0 while none is left out)."""
        state = self._shown.get("plots-na")
        if not isinstance(state, tuple) or not state[1]:
            return 0
        room = max(1, width - 2)  # its padding
        return sum(max(1, -(-cell_len(line) // room)) for line in str(state[0]).split("\n"))

    def shown_plots(self, specs: Sequence[PlotSpec]) -> int:
        """How many of ``specs`` are not left out (all of them before :meth:`leave_out_plots` ran)."""
        key = self._shown.get(_LEFT_OUT)
        return len(specs) if not isinstance(key, tuple) else sum(1 for r in key if r is None)

    def torn_down(self) -> bool:
        """True while the app exits: a refresh queued before finds the widgets gone (not an error)."""
        flags = (getattr(self.app, "_closing", False), getattr(self, "_closing", False),
                 getattr(self, "_pruning", False))
        return any(flags) or not self.is_attached or len(self.children) < 2

    def refresh_data(self, force: bool = False) -> None:
        """Redraw what changed in the store (override; call super for the header)."""
        self.update_header()

    def go_back(self) -> bool:
        """Esc: undo something on this screen first (override); False lets the app pop it."""
        return False

    def commands(self) -> Iterable[SystemCommand]:
        """This screen's actions for the command palette (override)."""
        return ()

    def compose_plots(self, specs: Sequence[PlotSpec]) -> ComposeResult:
        """The screen's plot grid (after the line naming those left out), then the user's custom panels."""
        yield Static("", id="plots-na")
        with Grid(id="plots", classes="plots"):
            for spec in specs:
                yield TimeSeriesPlot(spec.title, spec.fmt, lo=spec.lo, hi=spec.hi, id=spec.id)
        panels = self.ctx.cfg.panels
        if panels:
            with Grid(id="custom", classes="plots"):
                for i, panel in enumerate(panels):
                    yield CustomPanel(panel, id=f"panel-{i}")
