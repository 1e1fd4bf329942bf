"""Textual's ``current_theme``, kept per theme name.

Textual looks the theme up in a fresh copy of every registered theme each
time it is asked (~5 us), and it asks for every line it draws and every
widget it composes (``ansi_theme``): ~50 times a frame on the overview.
"""

from __future__ import annotations

from textual.theme import Theme


class ThemeCache:
    """Mix in before ``App``: ``current_theme`` computed once per theme name (and per registration)."""

    _theme_memo: tuple[str, Theme] | None = None

    @property
    def current_theme(self) -> Theme:
        """The active theme (Textual's rule), looked up again only when the theme's name changes."""
        name: str = self.theme  # type: ignore[attr-defined]
        memo = self._theme_memo
        if memo is None or memo[0] != name:
            theme: Theme = super().current_theme  # type: ignore[misc]
            memo = self._theme_memo = (name, theme)
        return memo[1]

    def register_theme(self, theme: Theme) -> None:
        """Textual's; a theme registered again under the active name is looked up again."""
        self._theme_memo = None
        super().register_theme(theme)  # type: ignore[misc]
