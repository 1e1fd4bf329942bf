"""A process the samples do not carry (no job pattern matches it), kept up to date from its host's process table.

The process screen opened from ``:ps`` or ``:proc PID`` asks the host
(``sources.processes``) for that one pid every :data:`LIST_POLL_S` seconds,
one question at a time, and records each answer in the store's history of
the process, so its plots fill as a job process's do.
"""

from __future__ import annotations

import math
import time
from concurrent.futures import CancelledError

from gpulens.core.errors import GpulensError
from gpulens.core.model import JobInfo
from gpulens.sources.processes import decode_rows, process_table
from gpulens.store.views import gpu_unreadable
from gpulens.tui.screens.base import DataScreen
from gpulens.tui.workers import call_in_app, wait

LIST_POLL_S = 2.0
"""How often the host is asked for the process."""


class ListedProcess:
    """One pid of one host as its process table lists it (:attr:`row`), or why it does not (:attr:`why`)."""

    def __init__(self, host: str, pid: int, row: JobInfo | None = None) -> None:
        self.host, self.pid = host, pid
        self.row = row
        self.why: str | None = None
        self.version = 0
        """Bumped at each answer (the screen redraws for it)."""
        self._asked = -math.inf
        self._asking = False

    def poll(self, screen: DataScreen) -> None:
        """Ask again when the last answer is older than :data:`LIST_POLL_S` (``screen``: a data screen)."""
        now = time.monotonic()
        if self._asking or now - self._asked < LIST_POLL_S or not self.host:
            return
        self._asking, self._asked = True, now
        source = screen.ctx.source
        screen.background.start(lambda: self._fetch(screen, source), name=f"process {self.host}:{self.pid}",
                                group="listed-process")

    def _fetch(self, screen: DataScreen, source: object) -> None:
        """In a worker: the host's row for the pid."""
        try:
            answer = wait(process_table(source, self.host, limit=1, pids=(self.pid,)), 15.0)
            if answer is None:
                return
            rows = decode_rows(getattr(answer, "result", answer))[0]
            got: tuple[JobInfo | None, str | None] = (next((r for r in rows if r.pid == self.pid), None), None)
        except (GpulensError, OSError, ValueError, RuntimeError, CancelledError) as err:  # no agent, an older agent,
            # a recording, a malformed answer, the lister's own failure, a cancelled ask
            got = (None, f"{self.host}:{self.pid}: not a job's process, and its host cannot list it: "
                         f"{str(err)[:300] or type(err).__name__}")
        call_in_app(self._answered, screen, *got)

    def _answered(self, screen: DataScreen, row: JobInfo | None, why: str | None) -> None:
        self._asking = False
        self.row = row
        self.why = None if row is not None else why or (
            f"{self.host}:{self.pid} is not running (its host lists no such process)")
        if row is not None:
            store = screen.ctx.store
            store.processes.add_row(self.host, row, math.floor(store.now / store.resolution_s),
                                    gpus_read=gpu_unreadable(store.latest(self.host)) is None)
        self.version += 1
        screen.refresh_data(force=True)
