"""Keys shared by the widgets with a row cursor (tables, the heatmap)."""

from __future__ import annotations

from textual.binding import Binding, BindingType


def cursor_bindings(enter_action: str, enter_label: str) -> list[BindingType]:
    """↑/k ↓/j pgup pgdn home end move the cursor; enter runs ``enter_action``."""
    return [
        Binding("up,k", "cursor(-1)", "Up", show=False),
        Binding("down,j", "cursor(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "cursor(-1000000)", "First", show=False),
        Binding("end", "cursor(1000000)", "Last", show=False),
        Binding("enter", enter_action, enter_label, show=False),
    ]
