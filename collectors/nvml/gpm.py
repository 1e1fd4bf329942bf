"""NVML GPM (GPU Performance Monitoring, Hopper and newer): SM activity, SM
occupancy, DRAM bandwidth utilization and tensor activity (any tensor pipe), as
DCGM's profiling fields report them.

GPM metrics are computed from two samples: :class:`GpmSampler` keeps the
previous sample of one GPU and, on each read, takes a new one and asks
``nvmlGpmMetricsGet`` for the figures over the interval between them. The
first sample is taken when the sampler is made, so the first read already
covers a real interval.
"""

from __future__ import annotations

import contextlib
from typing import Any

from gpulens.collectors.nvml.query import Query, describe_code

# (GpuSample field, pynvml metric constant, its nvml.h value)
GPM_METRICS: tuple[tuple[str, str, int], ...] = (
    ("sm_activity_percent", "NVML_GPM_METRIC_SM_UTIL", 2),
    ("sm_occupancy_percent", "NVML_GPM_METRIC_SM_OCCUPANCY", 3),
    ("dram_bw_util_percent", "NVML_GPM_METRIC_DRAM_BW_UTIL", 10),
    ("tensor_active_percent", "NVML_GPM_METRIC_ANY_TENSOR_UTIL", 5),
)
GPM_FIELDS = tuple(name for name, _, _ in GPM_METRICS)
NO_GPM = "GPM not supported on this GPU (needs Hopper or newer, not in MIG mode)"


class GpmSampler:
    """Two-sample GPM reader for one GPU; ``reasons`` go through the GPU's Query."""

    __slots__ = ("_cur", "_handle", "_ids", "_prev", "_primed", "_q", "_request", "_why")

    def __init__(self, q: Query, handle: object) -> None:
        self._q = q
        self._handle = handle
        self._prev: Any = None
        self._cur: Any = None
        self._request: Any = None
        """The nvmlGpmMetricsGet request, made on the first read and reused (pynvml's is a 19 KB struct)."""
        self._primed = False
        nvml = q.nvml
        self._ids = tuple(getattr(nvml, const, value) for _, const, value in GPM_METRICS)
        self._why: str | None = None
        """Why this GPU has no GPM figures at all (None: it has them)."""
        support = q(GPM_FIELDS, "nvmlGpmQueryDeviceSupport", handle)
        if support is None:
            self._why = q.reasons.get(GPM_FIELDS[0], NO_GPM)
            return
        if not getattr(support, "isSupportedDevice", 0):
            self._why = NO_GPM
            return
        self._prev = q(GPM_FIELDS, "nvmlGpmSampleAlloc")
        self._cur = q(GPM_FIELDS, "nvmlGpmSampleAlloc")
        if self._prev is None or self._cur is None:
            self._why = q.reasons.get(GPM_FIELDS[0], "nvmlGpmSampleAlloc failed")
            return
        self._primed = q(GPM_FIELDS, "nvmlGpmSampleGet", handle, self._prev) is not None

    def read(self) -> dict[str, float | None]:
        """GPM figures (percent, 0-100) since the last read; None with a reason if not.

        Raises:
            GpuLost: NVML reports the GPU as lost.
        """
        out: dict[str, float | None] = dict.fromkeys(GPM_FIELDS)
        q = self._q
        if self._why is not None:
            q.note(GPM_FIELDS, self._why)
            return out
        if not self._primed:
            # No base sample yet (the first one failed): take it now, report next time.
            self._primed = q(GPM_FIELDS, "nvmlGpmSampleGet", self._handle, self._prev) is not None
            if self._primed:
                q.note(GPM_FIELDS, "first GPM sample just taken; figures from the next read")
            return out
        if q(GPM_FIELDS, "nvmlGpmSampleGet", self._handle, self._cur) is None:
            return out
        nvml = q.nvml
        request = self._request
        if request is None:
            request = self._request = nvml.c_nvmlGpmMetricsGet_t()
            request.version = getattr(nvml, "NVML_GPM_METRICS_GET_VERSION", 1)
            request.numMetrics = len(self._ids)
            for i, metric_id in enumerate(self._ids):
                request.metrics[i].metricId = metric_id
        request.sample1 = self._prev
        request.sample2 = self._cur
        # The new sample becomes the base of the next interval whatever happens next.
        self._prev, self._cur = self._cur, self._prev
        if q(GPM_FIELDS, "nvmlGpmMetricsGet", request) is None:
            return out
        for i, name in enumerate(GPM_FIELDS):
            metric = request.metrics[i]
            code = int(metric.nvmlReturn)
            if code != 0:
                q.note(name, describe_code(nvml, code))
            else:
                out[name] = float(metric.value)
        return out

    def close(self) -> None:
        """Free the two GPM sample buffers; errors on the way out are ignored."""
        for sample in (self._prev, self._cur):
            if sample is None:
                continue
            with contextlib.suppress(Exception):  # shutting down: nobody to tell
                self._q.nvml.nvmlGpmSampleFree(sample)
        self._prev = self._cur = self._request = None
        self._why = "GPM sampler closed"
