"""What ``gpulens trace`` and its ``--job`` mode share: exit statuses, progress lines, the endpoint hand-back."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

from gpulens.core.sanitize import clean_text

if TYPE_CHECKING:
    from gpulens.agent.agent import Agent

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
JOB_WAIT_S = 8.0
"""``--job`` without ``--wait``: how long to wait for the job's processes to poll (each twice, so that its poll
interval, hence the common start, is known)."""
CHILDREN_WAIT_S = 30.0
"""``--children`` without ``--wait``: how long to wait for a launcher's ranks (they import torch and start
polling seconds apart)."""
MAX_WAIT_S = 3600.0
HAND_BACK_WAIT_S = 600.0


def say(msg: str) -> None:
    """One progress line on stderr: an agent's or a process's text loses its line breaks and escapes."""
    print(f"gpulens trace: {clean_text(msg)}", file=sys.stderr, flush=True)


def hand_back(owner: Agent) -> None:
    """Stop owning the endpoint, once the requests other gpulens sent through us are done."""
    deadline = time.monotonic() + HAND_BACK_WAIT_S
    if owner.requests.running():
        say("waiting for the traces other gpulens processes requested through this one")
    while owner.requests.running() and time.monotonic() < deadline:
        time.sleep(0.1)
    owner.stop()


class Progress:
    """Prints a trace's progress lines, each once: a repeat is dropped, and a failure is left to the
    final report (it used to be printed twice: once as progress, once as the result)."""

    def __init__(self, prefix: str = "") -> None:
        self._prefix = prefix
        self._last: tuple[str, str] | None = None

    def __call__(self, state: str, detail: str) -> None:
        if state == "failed" or (state, detail) == self._last:
            return
        self._last = (state, detail)
        say(f"{self._prefix}{state}: {detail}")
