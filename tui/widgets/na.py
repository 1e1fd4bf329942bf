"""How an unavailable metric looks: ``n/a`` and the reason, never a made-up 0."""

from __future__ import annotations

from rich.text import Text


def na_text(reason: str | None, width: int | None = None) -> Text:
    """``n/a — reason`` (the reason cut to ``width``)."""
    why = reason or "no data yet"
    text = Text.assemble(("n/a", "bold"), " — ", why)
    if width is not None:
        text.truncate(width, overflow="ellipsis")
    return text

