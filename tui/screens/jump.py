"""``:`` prompt, as in k9s: ``host NAME`` or ``job PID``; returns the text typed."""

from __future__ import annotations

from typing import ClassVar

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import ModalScreen
from textual.widgets import Input


def parse_jump(text: str) -> tuple[str, str] | None:
    """``host NAME`` / ``job PID`` (also ``h``/``j``) -> (kind, arg); None if neither."""
    parts = text.strip().lstrip(":").split(None, 1)
    if len(parts) != 2:
        return None
    kind = {"host": "host", "h": "host", "job": "job", "j": "job"}.get(parts[0].lower())
    return (kind, parts[1].strip()) if kind else None


class JumpScreen(ModalScreen[str | None]):
    """A one-line prompt at the bottom."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]
    DEFAULT_CSS = """
    JumpScreen { align: left bottom; background: transparent; }
    JumpScreen > Input { dock: bottom; width: 100%; border: tall $accent; }
    """

    def __init__(self) -> None:
        super().__init__()
        self._done = False

    def compose(self) -> ComposeResult:
        """The prompt."""
        yield Input(placeholder=":host NAME   :job PID", id="jump")

    def on_key(self, event: events.Key) -> None:
        """Keys that arrive before the prompt has focus (typed right after ':') go into it."""
        box = self.query_one(Input)
        if self.focused is box:
            return
        self.set_focus(box)
        if event.key == "enter":
            event.stop()
            self._finish(box.value)
        elif event.is_printable and event.character:
            event.stop()
            box.insert_text_at_cursor(event.character)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Hand the text back."""
        self._finish(event.value)

    def action_cancel(self) -> None:
        """Close without jumping."""
        self._finish(None)

    def _finish(self, value: str | None) -> None:
        # Once: an Esc queued right behind Enter must not pop the screen below.
        if not self._done:
            self._done = True
            self.dismiss(value)
