"""A host sample's GPUs as columns of its host's ring row, in the host's own GPU order.

The store keeps one ring row per host sample: the host's figures, then each
GPU's, in the order the host's GPUs were first seen (``HostState.gorder``). A
sample whose GPUs come in that order is the common, fast case; another order
(a GPU gone, one new, a reordering) is laid out in the host's order, and a new
GPU widens the ring by one column group (at most :data:`MAX_GPUS_PER_HOST`).
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter

from gpulens.core.model import GpuSample, HostSample
from gpulens.store.gpu_events import _XIDS
from gpulens.store.host import HostState
from gpulens.store.ring import NAN
from gpulens.store.ring_columns import Columns
from gpulens.store.views import GPU_METRICS, HOST_METRICS

MAX_GPUS_PER_HOST = 64
INDEX = attrgetter("index")
GPU_WIDTH = len(GPU_METRICS)
HOST_WIDTH = len(HOST_METRICS)
NAN_GPU = [NAN] * GPU_WIDTH


def gpu_columns(h: HostState, s: HostSample, gpus: Sequence[GpuSample], order: tuple[int, ...],
                block: list[float]) -> tuple[list[float], dict[str, float] | None]:
    """The GPU part of ``s``'s row in ``h``'s column order, and each GPU's utilisation by index (for the jobs)
    when it comes for free (the sample in the host's order); the last XID of each GPU noted on the way."""
    if not gpus:
        return (NAN_GPU * len(h.gorder) if h.gorder else []), None
    util: dict[str, float] | None = None
    if order == h.gorder:
        columns = block
        if s.jobs and gpus is s.gpus:
            util = dict(zip(h.gkeys, block[::GPU_WIDTH], strict=True))
    else:
        columns = regroup(h, order, block)
    if any(map(_XIDS, gpus)):
        for g in gpus:
            if g.xid_events and g.index in h.gpus and s.time >= h.xid_last.get(g.index, (-1.0, 0))[0]:
                h.xid_last[g.index] = (s.time, g.xid_events[-1])
    return columns, util


def regroup(h: HostState, order: tuple[int, ...], block: list[float]) -> list[float]:
    """``block`` (GPUs in ``order``) laid out in the host's column order, new GPUs added."""
    new = [i for i in dict.fromkeys(order) if i not in h.gpus][: MAX_GPUS_PER_HOST - len(h.gpus)]
    if new:
        ring = h.ring.widened(HOST_WIDTH + (len(h.gorder) + len(new)) * GPU_WIDTH)
        for view in h.gpus.values():
            view.ring = ring
        for k, i in enumerate(new, len(h.gorder)):
            h.gpus[i] = Columns(ring, HOST_WIDTH + k * GPU_WIDTH)
        h.ring, h.gorder = ring, h.gorder + tuple(new)
        h.gkeys = tuple(map(str, h.gorder))
        if order == h.gorder:
            return block
    pos = {i: k * GPU_WIDTH for k, i in enumerate(order)}  # a repeated index: the last wins
    out: list[float] = []
    for i in h.gorder:
        at = pos.get(i)
        out += NAN_GPU if at is None else block[at : at + GPU_WIDTH]
    return out
