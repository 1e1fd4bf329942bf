"""Registry of the processes that poll the Kineto endpoint (the traceable set).

A process polls every ``ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS`` (5 s by
default); one silent for ``expiry_intervals`` of its own observed interval
is gone or no longer traceable and drops out.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

DEFAULT_POLL_INTERVAL_S = 5.0


@dataclass(frozen=True, slots=True)
class PollingProcess:
    """One process seen polling: its pid, ancestors, SLURM job id and poll timing.

    Times are ``time.monotonic()`` seconds; ``interval_s`` is the last gap
    between two polls (None after the first poll); ``uid`` comes from the
    kernel (SO_PASSCRED), None when the datagram carried no credentials.
    """

    pid: int
    ancestors: tuple[int, ...]
    job_id: int
    uid: int | None
    first_poll_s: float
    last_poll_s: float
    polls: int = 1
    interval_s: float | None = None

    def expires_at(self, expiry_intervals: float, default_interval_s: float) -> float:
        """Monotonic time after which this process counts as gone."""
        interval = self.interval_s if self.interval_s else default_interval_s
        # Never expire sooner than ~11 s: libkineto retries a failed send for ~10 s.
        return self.last_poll_s + max(expiry_intervals * interval, 11.0)


class Registry:
    """Thread-safe map pid -> PollingProcess with expiry."""

    def __init__(
        self,
        *,
        expiry_intervals: float = 3.0,
        default_interval_s: float = DEFAULT_POLL_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lock = threading.Lock()
        self._procs: dict[int, PollingProcess] = {}
        self._ctxt: dict[tuple[int, int], set[int]] = {}
        self.expiry_intervals = expiry_intervals
        self.default_interval_s = default_interval_s
        self._clock = clock

    def record_poll(self, pids: tuple[int, ...], job_id: int, uid: int | None) -> PollingProcess:
        """Note a ``req`` from ``pids[0]`` (ancestors follow); returns the updated entry."""
        now = self._clock()
        pid = pids[0]
        with self._lock:
            old = self._procs.get(pid)
            if old is None or now > old.expires_at(self.expiry_intervals, self.default_interval_s):
                entry = PollingProcess(pid, tuple(pids[1:]), job_id, uid, now, now)
            else:
                entry = replace(
                    old,
                    ancestors=tuple(pids[1:]),
                    job_id=job_id,
                    uid=uid if uid is not None else old.uid,
                    last_poll_s=now,
                    polls=old.polls + 1,
                    interval_s=now - old.last_poll_s,
                )
            self._procs[pid] = entry
            return entry

    def record_context(self, job_id: int, gpu: int, pid: int) -> int:
        """Note a ``ctxt`` registration; returns how many processes share job and GPU."""
        with self._lock:
            members = self._ctxt.setdefault((job_id, gpu), set())
            if len(members) < 4096:  # bound memory against a flood of fake pids
                members.add(pid)
            return len(members)

    def live(self) -> list[PollingProcess]:
        """Processes that polled recently, oldest pid first; expired ones are dropped."""
        now = self._clock()
        with self._lock:
            gone = [
                pid
                for pid, p in self._procs.items()
                if now > p.expires_at(self.expiry_intervals, self.default_interval_s)
            ]
            for pid in gone:
                del self._procs[pid]
            return sorted(self._procs.values(), key=lambda p: p.pid)

    def get(self, pid: int) -> PollingProcess | None:
        """The live entry for ``pid``, or None."""
        for p in self.live():
            if p.pid == pid:
                return p
        return None
