"""Registry of the processes that poll the Kineto endpoint (the traceable set).

A process polls every ``ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS`` (5 s by
default); one silent for ``expiry_intervals`` of its own observed interval
is gone or no longer traceable and drops out.

Everything is bounded, because one endpoint thread serves every user's
programs and any local user can send datagrams: at most ``max_per_uid``
entries per uid and ``max_total`` in all (a new pid over a cap is not
recorded; expired entries are swept first), ``MAX_ANCESTORS`` ancestors kept
per entry, and ``ctxt`` registrations grouped per (uid, job, GPU) with caps
on groups per uid, groups in all and members per group, forgotten after
``CTXT_TTL_S``. Who may record what is the endpoint's decision (kernel
credentials); the registry only keeps the books.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

log = logging.getLogger(__name__)

DEFAULT_POLL_INTERVAL_S = 5.0
MAX_PER_UID = 256
MAX_TOTAL = 4096
# libkineto sends the whole chain up to init; the nearest few identify a job's launcher.
MAX_ANCESTORS = 64
CTXT_GROUPS_PER_UID = 64
CTXT_GROUPS_TOTAL = 512
CTXT_MEMBERS_PER_GROUP = 128
# A ctxt registration is sent once, at GPU init: keep it long enough for a job's ranks to
# start, not forever.
CTXT_TTL_S = 3600.0
SWEEP_EVERY_S = 1.0
CONFIG_ACTIVITIES = 2
"""The ``config_type`` bit a poll sets when its activity profiler can take a trace config."""


@dataclass(frozen=True, slots=True)
class PollingProcess:
    """One process seen polling: its pid, ancestors, SLURM job id and poll timing.

    Times are ``time.monotonic()`` seconds; ``interval_s`` is the last gap
    between two polls (None after the first poll); ``uid`` comes from the
    kernel (SO_PASSCRED), None when the datagram carried no credentials.
    ``ancestors`` holds at most MAX_ANCESTORS pids, nearest first.
    ``busy``: the last poll said the target's activity profiler is active
    (libkineto clears the ACTIVITIES bit of ``config_type`` while a trace
    runs or is written), so a trace config handed now would be dropped.
    """

    pid: int
    ancestors: tuple[int, ...]
    job_id: int
    uid: int | None
    first_poll_s: float
    last_poll_s: float
    polls: int = 1
    interval_s: float | None = None
    busy: bool = False

    def expires_at(self, expiry_intervals: float, default_interval_s: float) -> float:
        """Monotonic time after which this process counts as gone."""
        interval = self.interval_s if self.interval_s else default_interval_s
        # Never expire sooner than ~11 s: libkineto retries a failed send for ~10 s.
        return self.last_poll_s + max(expiry_intervals * interval, 11.0)


class Registry:
    """Thread-safe, bounded map pid -> PollingProcess with expiry."""

    def __init__(
        self,
        *,
        expiry_intervals: float = 3.0,
        default_interval_s: float = DEFAULT_POLL_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        max_per_uid: int = MAX_PER_UID,
        max_total: int = MAX_TOTAL,
    ) -> None:
        self._lock = threading.Lock()
        self._procs: dict[int, PollingProcess] = {}
        self._per_uid: dict[int | None, int] = {}
        # (uid, job_id, gpu) -> {pid: monotonic time registered}
        self._ctxt: dict[tuple[int | None, int, int], dict[int, float]] = {}
        self._ctxt_per_uid: dict[int | None, int] = {}
        self.expiry_intervals = expiry_intervals
        self.default_interval_s = default_interval_s
        self.max_per_uid = max_per_uid
        self.max_total = max_total
        self.refused = 0
        self._clock = clock
        self._swept_s = float("-inf")
        self._ctxt_swept_s = float("-inf")

    def __len__(self) -> int:
        with self._lock:
            return len(self._procs)

    def record_poll(
        self, pids: tuple[int, ...], job_id: int, uid: int | None, config_type: int = CONFIG_ACTIVITIES | 1
    ) -> PollingProcess | None:
        """Note a ``req`` from ``pids[0]`` (ancestors follow); returns the updated entry.

        ``config_type`` is the poll's bit mask; without the ACTIVITIES bit the
        target's profiler is busy. None when a cap refused a pid not seen
        before (logged once per uid).
        """
        busy = not config_type & CONFIG_ACTIVITIES
        now = self._clock()
        pid = pids[0]
        ancestors = tuple(pids[1 : 1 + MAX_ANCESTORS])
        with self._lock:
            old = self._procs.get(pid)
            if old is not None and (
                now > old.expires_at(self.expiry_intervals, self.default_interval_s) or uid != old.uid
            ):
                self._drop(pid)  # gone, or the pid now belongs to another user's process
                old = None
            if old is None:
                if not self._room_for(uid, now):
                    return None
                entry = PollingProcess(pid, ancestors, job_id, uid, now, now, busy=busy)
                self._per_uid[uid] = self._per_uid.get(uid, 0) + 1
            else:
                entry = replace(
                    old,
                    ancestors=ancestors,
                    job_id=job_id,
                    last_poll_s=now,
                    polls=old.polls + 1,
                    interval_s=now - old.last_poll_s,
                    busy=busy,
                )
            self._procs[pid] = entry
            return entry

    def _room_for(self, uid: int | None, now: float) -> bool:
        full = self._per_uid.get(uid, 0) >= self.max_per_uid or len(self._procs) >= self.max_total
        if full and now - self._swept_s >= SWEEP_EVERY_S:
            self._sweep(now)  # at most once a second: a flood must not buy an O(n) scan per datagram
            full = self._per_uid.get(uid, 0) >= self.max_per_uid or len(self._procs) >= self.max_total
        if full:
            self.refused += 1
            if self.refused & (self.refused - 1) == 0:  # the 1st, 2nd, 4th, 8th...: a flood logs a few lines
                log.warning(
                    "Kineto registry full (%d processes of uid %s, %d in all; caps %d and %d): a new "
                    "poller is not recorded (%d refused so far)",
                    self._per_uid.get(uid, 0), uid, len(self._procs), self.max_per_uid, self.max_total,
                    self.refused,
                )
        return not full

    def _drop(self, pid: int) -> None:
        gone = self._procs.pop(pid)
        left = self._per_uid.get(gone.uid, 1) - 1
        if left > 0:
            self._per_uid[gone.uid] = left
        else:
            self._per_uid.pop(gone.uid, None)

    def _sweep(self, now: float) -> None:
        self._swept_s = now
        for pid in [
            pid
            for pid, p in self._procs.items()
            if now > p.expires_at(self.expiry_intervals, self.default_interval_s)
        ]:
            self._drop(pid)

    def record_context(self, job_id: int, gpu: int, pid: int, uid: int | None = None) -> int:
        """Note a ``ctxt`` registration; returns how many processes of ``uid`` share job and GPU.

        Groups are per uid, so another user cannot inflate a job's count. Over a
        cap the registration is not kept (the count returned is what is kept).
        """
        now = self._clock()
        key = (uid, job_id, gpu)
        with self._lock:
            if now - self._ctxt_swept_s >= SWEEP_EVERY_S:
                self._sweep_ctxt(now)
            members = self._ctxt.get(key)
            if members is None:
                if (
                    self._ctxt_per_uid.get(uid, 0) >= CTXT_GROUPS_PER_UID
                    or len(self._ctxt) >= CTXT_GROUPS_TOTAL
                ):
                    return 0
                members = self._ctxt[key] = {}
                self._ctxt_per_uid[uid] = self._ctxt_per_uid.get(uid, 0) + 1
            if pid in members or len(members) < CTXT_MEMBERS_PER_GROUP:
                members[pid] = now
            return len(members)

    def _sweep_ctxt(self, now: float) -> None:
        self._ctxt_swept_s = now
        for key, members in list(self._ctxt.items()):
            for pid in [p for p, t in members.items() if now - t > CTXT_TTL_S]:
                del members[pid]
            if not members:
                del self._ctxt[key]
                left = self._ctxt_per_uid.get(key[0], 1) - 1
                if left > 0:
                    self._ctxt_per_uid[key[0]] = left
                else:
                    self._ctxt_per_uid.pop(key[0], None)

    def live(self) -> list[PollingProcess]:
        """Processes that polled recently, oldest pid first; expired ones are dropped."""
        now = self._clock()
        with self._lock:
            self._sweep(now)
            return sorted(self._procs.values(), key=lambda p: p.pid)

    def get(self, pid: int) -> PollingProcess | None:
        """The live entry for ``pid``, or None."""
        now = self._clock()
        with self._lock:
            p = self._procs.get(pid)
            if p is None or now > p.expires_at(self.expiry_intervals, self.default_interval_s):
                return None
            return p
