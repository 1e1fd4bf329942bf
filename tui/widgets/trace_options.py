"""The profiler screen's trace options: duration or iterations, warm-up, shapes / stack / memory.

:meth:`TraceOptions.request` reads them into a :class:`~gpulens.ipc.kineto.requests.TraceRequest`
(a notice, and None, when they do not make one); the Trace button or Enter in a field posts
:class:`TraceOptions.Submitted`.
"""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.content import Content
from textual.message import Message
from textual.widgets import Button, Checkbox, Input, Label

from gpulens.ipc.kineto.requests import TraceRequest
from gpulens.tui.widgets.ordered_input import OrderedInput


class OptionBox(Checkbox):
    """A checkbox whose mark shows its state without colour (``X`` on, blank off): NO_COLOR."""

    @property
    def _button(self) -> Content:
        self.BUTTON_INNER = "X" if self.value else " "
        button: Content = super()._button
        return button


class TraceOptions(Horizontal):
    """The options of the next trace, and the Trace button."""

    class Submitted(Message):
        """The Trace button, or Enter in an option field: take a trace."""

        def __init__(self, options: TraceOptions) -> None:
            super().__init__()
            self.options = options

        @property
        def control(self) -> TraceOptions:
            """The options that sent it."""
            return self.options

    def compose(self) -> ComposeResult:
        """Duration, iterations and warm-up; shapes, stack and memory; the Trace button."""
        with Horizontal(id="pf-amount"):
            yield Label("ms")
            yield OrderedInput("500", placeholder="duration ms", id="pf-duration", type="integer")
            yield Label("or steps")
            yield OrderedInput("", placeholder="iterations", id="pf-iterations", type="integer")
            yield Label("warm-up s")
            yield OrderedInput("0", placeholder="warm-up s", id="pf-warmup", type="number")
        with Horizontal(id="pf-flags"):
            yield OptionBox("shapes", id="pf-shapes")
            yield OptionBox("stack", id="pf-stack")
            yield OptionBox("memory", id="pf-memory")
            yield Button("Trace (t)", id="pf-trace", variant="primary")

    def request(self, pids: tuple[int, ...]) -> TraceRequest | None:
        """A trace of ``pids`` with these options; None, with a notice, when they make none."""
        def number(widget_id: str) -> str:
            return self.query_one(widget_id, Input).value.strip()

        try:
            iterations = int(number("#pf-iterations")) if number("#pf-iterations") else None
            duration = None if iterations is not None else int(number("#pf-duration") or "500")
            warmup = float(number("#pf-warmup") or "0")
        except ValueError:
            self.notify("duration, iterations and warm-up must be numbers", severity="error")
            return None
        req = TraceRequest(
            pids=pids,
            duration_ms=duration,
            iterations=iterations,
            record_shapes=self.query_one("#pf-shapes", Checkbox).value,
            with_stack=self.query_one("#pf-stack", Checkbox).value,
            profile_memory=self.query_one("#pf-memory", Checkbox).value,
            warmup_s=warmup,
        )
        try:
            req.validate()
        except ValueError as err:
            self.notify(str(err), severity="error")
            return None
        return req

    @on(Button.Pressed, "#pf-trace")
    @on(Input.Submitted, "#pf-duration, #pf-iterations, #pf-warmup")
    def _submitted(self, event: Message) -> None:
        event.stop()
        self.post_message(self.Submitted(self))
