"""Per-GPU event history: throttling that started or ended, and XID errors (bounded)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from operator import attrgetter

from gpulens.core.model import GpuSample

MAX_EVENTS_PER_GPU = 64
_REASONS = attrgetter("throttle_reasons")
_XIDS = attrgetter("xid_events")
BENIGN_THROTTLE = frozenset({"gpu_idle", "idle", "none", "applications_clocks_setting", "display_clock_setting"})
"""Clock-event reasons that are not a slowdown (an idle GPU, clocks the admin set)."""
HW_SLOWDOWN = ("thermal", "hw_slowdown", "power_brake")
"""Parts of the reasons that slow a GPU for its own safety (heat, a hardware or power brake): critical."""


def slowdown(reasons: Iterable[str]) -> str:
    """How a GPU's clocks are slowed by ``reasons``: ``"hw"`` (heat or a hardware brake), ``"soft"``
    (a power cap, sync boost) or ``""`` (not at all: idle, clocks the admin set)."""
    bad = [r for r in reasons if r not in BENIGN_THROTTLE]
    return "hw" if any(k in r for r in bad for k in HW_SLOWDOWN) else "soft" if bad else ""


@dataclass(frozen=True, slots=True)
class GpuEvent:
    """Something that happened to one GPU, at the sample time it was seen."""

    time: float
    kind: str
    """``throttle`` (started or changed), ``throttle-end`` or ``xid``."""
    detail: str
    """The throttle reasons (NVML names, comma-separated) or the XID number."""


class GpuEventLog:
    """The last :data:`MAX_EVENTS_PER_GPU` events of each GPU of one host, oldest first."""

    __slots__ = ("_events", "_throttle")

    def __init__(self) -> None:
        self._events: dict[int, deque[GpuEvent]] = {}
        self._throttle: dict[int, tuple[str, ...]] = {}

    def add(self, t: float, gpus: Sequence[GpuSample]) -> None:
        """Record what the GPUs of a sample taken at ``t`` (the newest so far) show."""
        if not self._throttle and not any(map(_REASONS, gpus)) and not any(map(_XIDS, gpus)):
            return  # nothing to record (the common case, checked without a loop here)
        for g in gpus:
            reasons = g.throttle_reasons
            if reasons or g.index in self._throttle:
                bad = tuple(r for r in reasons if r not in BENIGN_THROTTLE)
                old = self._throttle.get(g.index, ())
                if bad != old:
                    if bad:
                        self._throttle[g.index] = bad
                        self._log(g.index, GpuEvent(t, "throttle", ",".join(bad)))
                    else:
                        del self._throttle[g.index]
                        self._log(g.index, GpuEvent(t, "throttle-end", ",".join(old)))
            for x in g.xid_events:
                self._log(g.index, GpuEvent(t, "xid", str(x)))

    def _log(self, gpu: int, event: GpuEvent) -> None:
        q = self._events.get(gpu)
        if q is None:
            q = self._events[gpu] = deque(maxlen=MAX_EVENTS_PER_GPU)
        q.append(event)

    def events(self, gpu: int) -> tuple[GpuEvent, ...]:
        """GPU ``gpu``'s events, oldest first."""
        return tuple(self._events.get(gpu, ()))
