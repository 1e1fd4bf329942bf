"""A host's alerts (the host table's last column): DOWN, XID n, THROTTLE (HW), IDLE-HELD n."""

from __future__ import annotations

from collections.abc import Mapping

from gpulens.core.model import HostSample
from gpulens.store.gpu_events import slowdown
from gpulens.store.ring import Ring
from gpulens.store.ring_columns import Columns
from gpulens.store.views import GPU_METRICS, HOST_METRICS, IDLE_UTIL_PERCENT

_HOST_WIDTH = len(HOST_METRICS)
_GPU_WIDTH = len(GPU_METRICS)


def host_alerts(up: bool, latest: HostSample | None, xid_last: Mapping[int, tuple[float, int]],
                gpus: Mapping[int, Columns], ring: Ring, now: float, window_s: float, now_cb: int,
                k: int) -> tuple[str, ...]:
    """The alert codes of one host over the window (see tui's alert legend for their meaning).

    ``DOWN``: no data from the host; ``XID n``: a GPU reported XID error n in the
    window; ``THROTTLE``: a GPU's clocks are slowed now (power cap, sync boost), ``THROTTLE HW`` by heat
    or a hardware brake;
    ``IDLE-HELD n``: n GPUs hold a process's memory but average under 1 % utilization.
    """
    alerts: list[str] = []
    if not up:
        alerts.append("DOWN")
    xids = sorted({x for t, x in xid_last.values() if now - t <= window_s})
    alerts.extend(f"XID {x}" for x in xids)
    s = latest
    if s is None:
        return tuple(alerts)
    slowed = slowdown(r for g in s.gpus for r in g.throttle_reasons)
    if slowed:  # heat or a hardware brake: "THROTTLE HW", critical as the GPU table marks it
        alerts.append("THROTTLE HW" if slowed == "hw" else "THROTTLE")
    held = {int(i) for j in s.jobs for i in j.gpu_mem_bytes if i.isdigit()}
    held |= {g.index for g in s.gpus if g.processes}
    held &= gpus.keys()
    if held:
        # Utilization of every GPU in one pass (column 0 of each; fleet() asks the same).
        util = ring.window_means(now_cb, k, _HOST_WIDTH, None, _GPU_WIDTH)
        idle = [i for i in held if util[(gpus[i].base - _HOST_WIDTH) // _GPU_WIDTH] < IDLE_UTIL_PERCENT]
        if idle:
            alerts.append(f"IDLE-HELD {len(idle)}")
    return tuple(alerts)
