"""``:`` prompt, as in k9s: ``host NAME`` or ``job PID``; returns the text typed."""

from __future__ import annotations

from typing import ClassVar

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

    def compose(self) -> ComposeResult:
        """The prompt."""
        yield Input(placeholder=":host NAME   :job PID", id="jump")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Hand the text back."""
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        """Close without jumping."""
        self.dismiss(None)
