"""The store's ingestion side: the host table, source events into rings, and what is kept.

:class:`StoreIngest` owns every host's state (:class:`~gpulens.store.host.HostState`), takes
source events (:meth:`StoreIngest.apply`), bounds what it keeps (``MAX_HOSTS``, the rings' slots,
jobs evicted after ``history_s``) and counts versions; :class:`~gpulens.store.reads.StoreReads`
and :class:`~gpulens.store.store.Store` read what it holds.
"""

from __future__ import annotations

import math

from gpulens.core.events import HostStatusEvent, SampleEvent, SourceEvent, SourceStatusEvent
from gpulens.core.model import HostSample, JobInfo
from gpulens.store.aligned import slots as _slots
from gpulens.store.host import HostState
from gpulens.store.host_columns import INDEX, MAX_GPUS_PER_HOST, gpu_columns
from gpulens.store.jobs import add_jobs, evict_jobs
from gpulens.store.processes import ProcessHistory
from gpulens.store.ring import NAN, Ring
from gpulens.store.views import (
    HOST_METRICS,
    JOB_METRICS,
    fill_energy_rates,
    gpu_block_values,
    host_values_flat,
)

MAX_HOSTS = 4096


class StoreIngest:
    """Bounded per-host/GPU/job history fed by source events: the writing half of the store."""

    def __init__(self, resolution_s: float = 1.0, fine_history_s: float = 300,
                 history_s: float = 3600) -> None:
        self.resolution_s = max(0.05, float(resolution_s))
        self.fine_slots, self.coarse_slots = _slots(self.resolution_s, fine_history_s, history_s)
        self.history_s = history_s
        self.now = self.first = 0.0
        """The newest sample's time; the oldest one's (how much data any window can hold)."""
        self.version = 0
        self.dropped = 0
        self.source_status: SourceStatusEvent | None = None
        self._hosts: dict[str, HostState] = {}
        self.processes = ProcessHistory(self.fine_slots, self.coarse_slots)
        """History of the processes a screen tracks (:meth:`track_process`)."""

    def apply(self, event: SourceEvent) -> bool:
        """Take one source event; True if anything visible changed."""
        if isinstance(event, SampleEvent):
            return self._add_sample(event.sample)
        if isinstance(event, HostStatusEvent):
            h = self._host(event.host)
            if h is None or (h.up == event.up and h.reason == event.reason):
                return False
            h.up, h.reason = event.up, event.reason
            self._bump(h)
            return True
        if isinstance(event, SourceStatusEvent):
            self.source_status = event
            self.version += 1
            return True
        return False

    def apply_many(self, events: list[SourceEvent]) -> bool:
        """Take a burst of events; True if any changed something."""
        changed = False
        for e in events:
            changed = self.apply(e) or changed
        return changed

    def _host(self, name: str) -> HostState | None:
        h = self._hosts.get(name)
        if h is None:
            if len(self._hosts) >= MAX_HOSTS:
                self.dropped += 1
                return None
            h = self._hosts[name] = HostState(ring=self._ring(len(HOST_METRICS)))
        return h

    def _ring(self, n: int) -> Ring:
        return Ring(n, self.fine_slots, self.coarse_slots)

    def _bump(self, h: HostState) -> None:
        h.version += 1
        self.version += 1

    def _add_sample(self, s: HostSample) -> bool:
        h = self._host(s.host)
        if h is None or not math.isfinite(s.time):
            return False
        fb = math.floor(s.time / self.resolution_s)
        if h.ring.seen(fb):
            return False
        gpus = s.gpus if len(s.gpus) <= MAX_GPUS_PER_HOST else s.gpus[:MAX_GPUS_PER_HOST]
        block = gpu_block_values(gpus)
        order = tuple(map(INDEX, gpus))
        if gpus:
            h.energy = fill_energy_rates(h.energy, s.time, order, gpus, block)
        values = host_values_flat(s, block)
        h.late += fb < h.ring.fnewest
        columns, util = gpu_columns(h, s, gpus, order, block)
        values += columns
        h.ring.put(fb, values)
        groups: dict[str, list[JobInfo]] = {}
        totals: dict[str, tuple[set[str], int]] = {}
        if s.jobs:
            if util is None:
                util = {str(g.index): NAN if (u := g.utilization_percent) is None else float(u) for g in s.gpus}
            groups, totals = add_jobs(h, s, fb, util, self._job_ring, self.history_s)
        elif h.job_seen:
            evict_jobs(h, s.time, self.history_s, force=False)
        if self.processes.watching(s.host):
            self.processes.add(s, fb)
        if h.latest is None or s.time >= h.latest.time:
            h.events.add(s.time, gpus)
            h.latest = s
            h.latest_jobs, h.latest_sorted, h.latest_totals = groups, False, totals
            h.up, h.reason = True, ""
        self.now, self.first = max(self.now, s.time), min(self.first or s.time, s.time)
        self._bump(h)
        return True

    def _job_ring(self) -> Ring:
        return self._ring(len(JOB_METRICS))

    def track_process(self, host: str, pid: int) -> None:
        """Record ``pid``'s history from now on (``proc.*`` metrics, ``pid=``)."""
        self.processes.track(host, pid, self.now)
        h = self._hosts.get(host)
        if h is not None and (s := h.latest) is not None:
            self.processes.add(s, math.floor(s.time / self.resolution_s))
