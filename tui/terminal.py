"""Running a Textual app so that a signal ends it the way ``q`` does (issue 31 item 8).

Without this, SIGTERM (what Slurm, systemd and ``tmux kill-session`` send)
and SIGHUP killed the process mid-screen: tmux stayed on the alternate
screen with mouse tracking on and the cursor hidden.
"""

from __future__ import annotations

import signal
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from textual.app import App

EXIT_CODES = {signal.SIGTERM: 143, signal.SIGHUP: 129, signal.SIGINT: 130}
"""The exit code of each signal, as a shell reports a process killed by it (128 + its number)."""


def run_restoring_terminal(app: App[Any]) -> None:
    """``app.run()``; SIGTERM (Slurm, systemd, ``tmux kill-session``), SIGHUP and SIGINT (``kill -INT``;
    the Ctrl-C key is the app's own binding, also 130) end it as ``q`` does, so Textual gives the
    terminal back (alternate screen, mouse tracking, cursor), with exit code 143, 129 or 130. Only from the main thread (signal handlers can be set there only)."""
    if threading.current_thread() is not threading.main_thread():
        app.run()
        return
    old = {sig: signal.getsignal(sig) for sig in EXIT_CODES}

    def end(signum: int, _frame: object) -> None:
        app.exit(return_code=EXIT_CODES[signal.Signals(signum)])

    for sig in EXIT_CODES:
        signal.signal(sig, end)
    try:
        app.run()
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


