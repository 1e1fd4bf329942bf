"""What the store keeps per host: its ring, its GPUs' and jobs' series, events and newest sample."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpulens.core.model import HostSample, JobInfo
from gpulens.store.gpu_events import GpuEventLog
from gpulens.store.ring import Ring
from gpulens.store.ring_columns import Columns
from gpulens.store.views import EnergyPoint


@dataclass(slots=True)
class HostState:
    """One host's history (mutable, private to the store)."""

    # The host's series, then its GPUs' (``gorder``: their indices in column
    # order, by first appearance): a sample is one ring write, not one per GPU.
    # ``gpus`` reads each GPU's columns like a ring of its own.
    ring: Ring
    gorder: tuple[int, ...] = ()
    gkeys: tuple[str, ...] = ()
    """``str`` of each index of ``gorder`` (the keys of ``JobInfo.gpu_mem_bytes``)."""
    gpus: dict[int, Columns] = field(default_factory=dict)
    jobs: dict[str, Ring] = field(default_factory=dict)
    job_seen: dict[str, float] = field(default_factory=dict)
    xid_last: dict[int, tuple[float, int]] = field(default_factory=dict)
    energy: EnergyPoint | None = None
    """The newest sample's energy counters (the rate's previous point)."""
    events: GpuEventLog = field(default_factory=GpuEventLog)
    latest: HostSample | None = None
    latest_jobs: dict[str, list[JobInfo]] | None = None
    """``latest``'s processes grouped by job key (at ingest), each group sorted by pid when first read."""
    latest_sorted: bool = False
    latest_totals: dict[str, tuple[set[str], int]] = field(default_factory=dict)
    """Per job key of ``latest``: the GPU indices its processes hold memory on, the bytes they hold."""
    up: bool = True
    reason: str = ""
    version: int = 0
    late: int = 0
    """Samples accepted older than the host's newest bucket (aligned columns: ``series_stamp``)."""
