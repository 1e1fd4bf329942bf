"""The top line: breadcrumbs, source, SIMULATED, window, PAUSED, source status, clock."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.reactive import reactive
from textual.screen import ModalScreen, Screen
from textual.strip import Strip
from textual.widget import Widget

from gpulens.core.units import duration

if TYPE_CHECKING:
    from gpulens.tui.context import ScreenContext

CRUMBS = {"FlameScreen": "flame graph", "ProfilerScreen": "Profiler", "TimelineScreen": "Timeline",
          "AnalyzeScreen": "Analyze", "SandwichScreen": "sandwich", "FunctionTableScreen": "functions"}
"""Crumbs of screens that set no ``crumb`` of their own."""


def crumb_of(screen: Screen[Any]) -> str:
    """A screen's breadcrumb: its ``crumb``, else a name from its class (``TimelineScreen`` -> Timeline)."""
    crumb = getattr(screen, "crumb", None)
    if isinstance(crumb, str) and crumb:
        return crumb
    name = type(screen).__name__
    return CRUMBS.get(name, name.removesuffix("Screen") or name)


def crumbs_of(stack: Sequence[Screen[Any]], upto: Screen[Any] | None = None) -> tuple[str, ...]:
    """``("gpulens", "Overview", "gpu-node03", ...)`` from a screen stack (modals and the default screen left out)."""
    out = ["gpulens"]
    for screen in stack:
        if isinstance(screen, ModalScreen) or screen.id == "_default":
            continue
        out.append(crumb_of(screen))
        if screen is upto:
            break
    return tuple(out)


class AppHeader(Widget):
    """``gpulens › Overview › gpu-node03`` on the left, state on the right."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"header--crumbs", "header--simulated", "header--paused", "header--status-bad"}
    DEFAULT_CSS = """
    AppHeader { dock: top; height: 1; background: $panel; color: $text; }
    AppHeader > .header--crumbs { text-style: bold; }
    AppHeader > .header--simulated { background: $warning; color: $text; text-style: bold reverse; }
    AppHeader > .header--paused { background: $accent; color: $text; text-style: bold; }
    AppHeader > .header--status-bad { color: $error; text-style: bold; }
    """

    crumbs: reactive[tuple[str, ...]] = reactive(("gpulens",))
    """Screen names, oldest first."""
    source: reactive[str] = reactive("")
    """Source name (local, demo, replay FILE...)."""
    simulated: reactive[bool] = reactive(False)
    """Demo data: shows SIMULATED."""
    window: reactive[str] = reactive("5m")
    """Statistics window name, and how much data it holds while that is less (:func:`window_text`)."""
    paused: reactive[bool] = reactive(False)
    """Updates paused (``p``)."""
    status: reactive[tuple[str, bool]] = reactive(("", True))
    """Source status message and whether it is good."""
    clock: reactive[str] = reactive("")
    """Time of the newest data, HH:MM:SS."""

    def follow(self, ctx: ScreenContext) -> None:
        """Take the context's :func:`header_state` (its REC size, window, clock...): the header of a
        screen that sets none itself (flame, profiler, timeline), as each tick lands."""
        for name, value in zip(STATE_FIELDS, header_state(ctx), strict=True):
            setattr(self, name, value)

    def on_mount(self) -> None:
        """On a screen that does not fill it in (flame, profiler, timeline): crumbs from the stack."""
        if self.crumbs == ("gpulens",):
            self.crumbs = crumbs_of(self.app.screen_stack, self.screen)

    _styles: dict[str, Style] | None = None

    def _style(self, name: str) -> Style:
        """``get_component_rich_style``, cached until the styles change (it walks the CSS each call)."""
        if self._styles is None:
            self._styles = {}
        st = self._styles.get(name)
        if st is None:
            st = self._styles[name] = self.get_component_rich_style(name)
        return st

    def notify_style_update(self) -> None:
        """Styles (or the theme) changed: drop the cached styles."""
        self._styles = None
        self._base = None
        super().notify_style_update()

    _base: Style | None = None

    def _parts(self) -> list[tuple[str, Style | None]]:
        """The line as (text, style) pieces; the status is cut first when narrow."""
        right: list[tuple[str, Style | None]] = []
        if self.simulated:
            right += [(" SIMULATED ", self._style("header--simulated")), (" ", None)]
        if self.paused:
            right += [(" PAUSED ", self._style("header--paused")), (" ", None)]
        width = self.size.width
        window = self.window if width >= 100 else self.window.replace("(first sample ", "(").replace(" ago)", ")")
        right.append((f"{self.source} · window {window} · {self.clock} ", None))
        right_len = sum(cell_len(t) for t, _ in right)
        msg, ok = self.status
        # Narrow: the oldest crumbs give way first, so PAUSED, the window and the clock stay.
        crumbs = list(self.crumbs)
        while (len(" › ".join(crumbs)) + right_len + 3 > width and len(crumbs) > 2
               and not (len(crumbs) == 3 and crumbs[1] == "…")):
            if crumbs[1] == "…":
                del crumbs[2]
            else:
                crumbs[1] = "…"
        text = " › ".join(crumbs)
        room_left = max(8, width - right_len - 3)
        if len(text) > room_left:
            text = crumbs[-1]  # where the user is matters most
        if len(text) > room_left:
            text = "…" + text[len(text) - room_left + 1:]
        left_len = cell_len(text)
        room = width - left_len - right_len - 3
        mid = ""
        mid_style: Style | None = None
        if msg and room > 8:
            mid_style = None if ok else self._style("header--status-bad")
            mid = msg if len(msg) <= room else msg[: room - 1] + "…"
        pad = max(1, width - left_len - cell_len(mid) - right_len - 2)
        return [(" ", None), (text, self._style("header--crumbs")), ("  ", None),
                (mid, mid_style), (" " * pad, None), *right]

    def render(self) -> Text:
        """One line; the status is cut first when narrow."""
        return Text.assemble(*((t, st or "") for t, st in self._parts()), no_wrap=True, overflow="crop")

    def render_line(self, y: int) -> Strip:
        """The line from :meth:`_parts`, segmented directly (Rich's generic path costs ~0.5 ms a repaint).

        It repaints once a second, for the clock; every other field is a reactive
        that repaints only when its value changes.
        """
        width = self.size.width
        base = self._base
        if base is None:
            base = self._base = self.rich_style
        if y:
            return Strip.blank(width, base)
        segs = [Segment(t, base if st is None else base + st) for t, st in self._parts() if t]
        return Strip(segs).crop_extend(0, width, base)


STATE_FIELDS = ("source", "simulated", "window", "paused", "status", "clock")
"""The header's fields besides its crumbs, in :func:`header_state`'s order."""


def header_state(ctx: ScreenContext) -> tuple[object, ...]:
    """What the header shows of ``ctx``, as :data:`STATE_FIELDS` name it: the source's name, SIMULATED,
    the window (:func:`window_text`), PAUSED, the source's status and the clock; py-spy samplings
    running (``py-spy job 4242 12s``, :mod:`gpulens.tui.profile_jobs`) beside the source, like REC."""
    status = ctx.store.source_status
    name = ctx.source.name
    jobs = getattr(ctx, "_gpulens_profile_jobs", None)  # the app's py-spy work (gpulens.tui.profile_jobs)
    running = jobs.note() if jobs is not None and hasattr(jobs, "note") else ""
    return (f"{name} · {running}" if running else name, ctx.source.simulated, window_text(ctx), ctx.paused,
            (status.message, status.ok) if status else ("", True), ctx.clock_text())


def window_text(ctx: ScreenContext) -> str:
    """``5m``; ``1h (first sample 7m43s ago)`` while the data held covers less of the window (every figure and
    table mean on the screen is over at most that much, whatever the window's name says). A span, not a count:
    a plot's ``over 7m40s of data`` counts the samples it has (a host's missed ticks left out), so the two
    say different things and are worded apart (issue 31 item 9)."""
    store = ctx.store
    held = min(store.now - store.first, store.history_s) + store.resolution_s  # a sample hours late: not 1h held
    return ctx.window if not store.first or held >= ctx.window_s else f"{ctx.window} (first sample {duration(held)} ago)"
