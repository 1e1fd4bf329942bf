"""How an unavailable metric looks: ``n/a`` and the reason, never a made-up 0."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static


def na_text(reason: str | None, width: int | None = None) -> Text:
    """``n/a — reason`` (the reason cut to ``width``)."""
    why = reason or "no data yet"
    text = Text.assemble(("n/a", "bold"), " — ", why)
    if width is not None:
        text.truncate(width, overflow="ellipsis")
    return text


class Unavailable(Static):
    """A line saying a metric is n/a and why."""

    DEFAULT_CSS = """
    Unavailable { color: $text-muted; height: auto; }
    """

    def set_reason(self, reason: str | None) -> None:
        """Show ``reason``."""
        self.update(na_text(reason))
