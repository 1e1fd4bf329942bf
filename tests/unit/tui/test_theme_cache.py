"""The app's theme lookup is kept per theme name, and follows a theme change or re-registration."""

from __future__ import annotations

from textual.app import App
from textual.theme import Theme

from gpulens.tui._theme_cache import ThemeCache


class Themed(ThemeCache, App[None]):
    pass


def test_current_theme_follows_the_theme_and_its_registration() -> None:
    app = Themed()
    plain: App[None] = App()
    assert app.current_theme is app.current_theme  # kept
    assert app.current_theme.name == plain.current_theme.name
    app.theme = "textual-light"
    assert app.current_theme.name == "textual-light" and not app.current_theme.dark
    assert app.ansi_theme is app.ansi_theme_light
    app.theme = "textual-dark"
    assert app.current_theme.dark and app.ansi_theme is app.ansi_theme_dark
    mine = Theme(name="mine", primary="#004578", dark=True)
    app.register_theme(mine)
    app.theme = "mine"
    assert app.current_theme is mine
    again = Theme(name="mine", primary="#004578", dark=False)  # the same name, registered again
    app.register_theme(again)
    assert app.current_theme is again and app.ansi_theme is app.ansi_theme_light
