"""``:log``: the warnings and errors gpulens showed (notifications, source failures), newest last.

Read from :mod:`gpulens.core.logbook`'s in-memory ring (the same records the
``--log-file`` gets), so a notice that flashed by can be read again.
"""

from __future__ import annotations

import time

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Footer, Static

from gpulens.core import logbook
from gpulens.tui.context import ScreenContext
from gpulens.tui.screens.base import DataScreen
from gpulens.tui.widgets.header import AppHeader

LEVEL_STYLE = {"ERROR": "bold red", "CRITICAL": "bold red", "WARNING": "yellow"}


def log_text(entries: tuple[logbook.LogEntry, ...], file: str | None) -> Text:
    """One line per record: time, level, where from, message (already sanitized by the logbook)."""
    text = Text()
    if not entries:
        text.append("nothing logged yet: warnings and errors gpulens shows are kept here", style="dim")
    for e in entries:
        text.append(time.strftime("%H:%M:%S ", time.localtime(e.time)), style="dim")
        text.append(f"{e.level:<8}", style=LEVEL_STYLE.get(e.level, ""))
        text.append(f"{e.logger.removeprefix('gpulens.')}: ", style="dim")
        text.append(e.message + "\n")
    text.append(f"\nalso written to {file}" if file else "\nnot written to a file (gpulens --log-file FILE, or --debug)",
                style="dim")
    return text


class LogScreen(DataScreen):
    """The log, redrawn only when a record was added."""

    crumb = "log"
    DEFAULT_CSS = """
    LogScreen #log-box { height: 1fr; padding: 0 1; }
    """

    def __init__(self, *, context: ScreenContext | None = None) -> None:
        super().__init__(context=context)
        self._logged = -1

    def compose(self) -> ComposeResult:
        """Header, the records, footer."""
        yield AppHeader()
        with VerticalScroll(id="log-box"):
            yield Static(id="log")
        yield Footer()

    def on_mount(self) -> None:
        """First draw."""
        self.refresh_data(force=True)

    def refresh_data(self, force: bool = False) -> None:
        """Redraw when the logbook has something new."""
        super().refresh_data(force)
        version = logbook.version()
        if version == self._logged and not force:
            return
        self._logged = version
        path = logbook.log_file()
        self.query_one("#log", Static).update(log_text(logbook.entries(), str(path) if path else None))
        self.query_one("#log-box", VerticalScroll).scroll_end(animate=False)
