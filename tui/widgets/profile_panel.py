"""The Profile panel slot (host and job screens): how to take a profile, its progress, and the last one."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static


class ProfilePanel(Static):
    """Says how to take a profile (``f``), counts down while py-spy samples, and keeps the last result.

    Two parts: the state (resting text, a countdown or an error: :meth:`set_state`)
    and a line that stays (duration, the last graph and its dropped idle
    samples: :meth:`set_note`).
    """

    DEFAULT_CSS = """
    ProfilePanel { height: auto; border: round $panel; padding: 0 1; color: $text-muted; }
    """

    def __init__(self, pids: int = 0, *, name: str | None = None, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(Text(self.idle_text(pids)), name=name, id=id, classes=classes)
        self.border_title = "Profile"
        self.state = self.idle_text(pids)
        """The first line: resting text, countdown or error."""
        self.note = "F: sampling seconds · L: reopen the last flame graph"
        """The line that stays: duration, last graph, idle samples dropped."""
        self._draw()

    @staticmethod
    def idle_text(pids: int, refusal: str = "") -> str:
        """The panel's resting text (``refusal``: why nothing can be sampled here, e.g. ``--readonly``)."""
        if refusal:
            return refusal
        if pids == 0:
            return "f: no job processes to sample here (py-spy needs real processes of this job)"
        return f"f: sample the stacks of {pids} job process(es) with py-spy and open a flame graph"

    def set_state(self, text: str) -> None:
        """Show progress or an error."""
        self.state = text
        self._draw()

    def set_note(self, text: str) -> None:
        """Set the line that stays under the state."""
        self.note = text
        self._draw()

    def _draw(self) -> None:
        self.update(Text(self.state + (f"\n{self.note}" if self.note else "")))
