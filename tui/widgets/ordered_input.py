"""A text input whose editing keys act in the order they were typed."""

from __future__ import annotations

from textual import events
from textual.widgets import Input

__all__ = ["OrderedInput"]


class OrderedInput(Input):
    """Textual's ``Input``, its own editing keys (Backspace, Delete, arrows, Ctrl+W; not Enter) run as
    each key arrives, as a typed character is inserted.

    Textual runs a widget's bindings only once the key has bubbled up to the
    app, after the keys queued behind it: ``abc``, Backspace, ``d`` sent in one
    burst (a fast typist, a paste, tmux ``send-keys``) inserted the ``d`` first
    and then deleted it, leaving ``abc``. The app's priority bindings (Ctrl+C,
    Ctrl+P) are checked before a key reaches the input, so they still win.
    """

    def _letter_for_screen(self, character: str | None) -> bool:
        """A letter typed in a number field (not ``e``, a number's exponent): it types nothing there."""
        return (self.type in ("integer", "number") and character is not None and character.isalpha()
                and not (self.type == "number" and character in "eE"))

    def check_consume_key(self, key: str, character: str | None) -> bool:
        """A number field takes no letter, so the screen's letter keys still work while it has focus:
        ``t`` traces from the profiler's duration field (issue 31 item 14)."""
        if self._letter_for_screen(character):
            return False
        return super().check_consume_key(key, character)

    async def _on_key(self, event: events.Key) -> None:
        if self._letter_for_screen(event.character):
            event.prevent_default()  # not Input's handler (it takes every printable key): a letter in a number
            return  # field bubbles up to the screen's bindings
        # Enter keeps Textual's way: what submitting does (a prompt closing, a screen opening) must be
        # done before the keys behind it reach the screen it leaves.
        bindings = self._bindings.key_to_bindings.get(event.key) if event.key != "enter" else None
        # An action that skips (an arrow with nothing to scroll) leaves the key to the screen, as before.
        if bindings:
            self._restart_blink()  # as Input._on_key does for every key: the cursor shows where it moved
        if bindings and await self.app.run_action(bindings[0].action, self):
            event.stop()
            event.prevent_default()
            return
        await super()._on_key(event)
