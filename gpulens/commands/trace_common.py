"""What ``gpulens trace`` and its ``--job`` mode share: exit statuses, progress lines, the endpoint hand-back."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

from gpulens.core.sanitize import clean_text

if TYPE_CHECKING:
    from gpulens.agent.agent import Agent

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
CHILDREN_WAIT_S = 8.0
"""How long a fresh endpoint waits for the processes asked about to poll (descendants, a job's ranks)."""
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
