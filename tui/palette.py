"""Every key of a screen as a command-palette entry (issue 31 item 11): what a key does, the palette does.

A screen's bindings, and those of the widget that has focus and its
parents, become ``SystemCommand`` entries named by their description and
keyed by their key (``o  Open Profiler``), when the screen would run them
now (``check_action``). Entries the app lists itself (quit, keys, jump,
window, pause) are left out here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from textual.app import SystemCommand
from textual.binding import Binding
from textual.screen import Screen

APP_OWN = frozenset({"quit", "interrupt", "help", "jump", "go_back", "pause", "resume", "window", "command_palette",
                     "focus_next", "focus_previous", "app.focus_next", "app.focus_previous"})
"""Actions the app's own palette entries cover."""


def _nodes(screen: Screen[Any]) -> list[Any]:
    """The screen, then the focused widget and its parents up to the screen (nearest first)."""
    chain: list[Any] = []
    node: Any = screen.focused
    while node is not None and node is not screen:
        chain.append(node)
        node = node.parent
    return [screen, *chain]


def binding_commands(screen: Screen[Any], listed: Iterable[str] = ()) -> Iterable[SystemCommand]:
    """A palette entry per key of ``screen`` (and of its focused widget) that it would act on now;
    ``listed``: titles the palette has already (the screen's own commands)."""
    seen: set[str] = set(listed)
    for node in _nodes(screen):
        for binding in getattr(node, "BINDINGS", ()):
            if not isinstance(binding, Binding) or not binding.description:
                continue
            action = binding.action
            name = action.split("(", 1)[0]
            if name in APP_OWN or binding.description in seen:
                continue
            check = getattr(node, "check_action", None)
            if callable(check) and check(name, ()) is False:
                continue
            if not hasattr(node, f"action_{name}"):
                continue
            seen.add(binding.description)
            key = binding.key_display or binding.key
            yield SystemCommand(binding.description, f"key {key}",
                                lambda n=node, a=action: n.call_later(n.run_action, a))
