"""The Profile panel slot (host and job screens): filled by the flame-graph screen."""

from __future__ import annotations

from textual.widgets import Static


class ProfilePanel(Static):
    """Says how to take a profile (``f``) and what the last attempt did."""

    DEFAULT_CSS = """
    ProfilePanel { height: auto; border: round $panel; padding: 0 1; color: $text-muted; }
    """

    def __init__(self, pids: int = 0, *, name: str | None = None, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(self.idle_text(pids), name=name, id=id, classes=classes)
        self.border_title = "Profile"

    @staticmethod
    def idle_text(pids: int) -> str:
        """The panel's resting text."""
        if pids == 0:
            return "f: no job processes to sample here (py-spy needs real processes of this job)"
        return (f"f: sample the stacks of {pids} job process(es) with py-spy for 5 s "
                "and open a flame graph")

    def set_state(self, text: str) -> None:
        """Show progress or an error."""
        self.update(text)
