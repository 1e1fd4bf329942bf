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
import ctypes
import struct
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
_POINTER = struct.Struct("@P")
NO_GPM = "GPM not supported on this GPU (needs Hopper or newer, not in MIG mode)"


class GpmSampler:
    """Two-sample GPM reader for one GPU; ``reasons`` go through the GPU's Query."""

    __slots__ = ("_addresses", "_cur", "_handle", "_ids", "_prev", "_primed", "_q", "_raw", "_records", "_request",
                 "_sample_at", "_why")

    def __init__(self, q: Query, handle: object) -> None:
        self._q = q
        self._handle = handle
        self._prev: Any = None
        self._cur: Any = None
        self._request: Any = None
        """The nvmlGpmMetricsGet request, made on the first read and reused (pynvml's is a 19 KB struct)."""
        self._primed = False
        self._records: tuple[memoryview[int], memoryview[float]] | None = None
        """Views of the metric records' nvmlReturn (uint32) and value (double) in the request, for a
        batched read (read in place after each call)."""
        self._raw: memoryview | None = None
        self._sample_at = (0, 0)
        """Where the request holds its sample1 and sample2 pointers."""
        self._addresses = (0, 0)
        """The (previous, new) samples' addresses, swapped as the samples are."""
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
        request = self._made_request()
        request.sample1 = self._prev
        request.sample2 = self._cur
        self._swap()  # the new sample becomes the base of the next interval whatever happens next
        if q(GPM_FIELDS, "nvmlGpmMetricsGet", request) is None:
            return out
        for i, name in enumerate(GPM_FIELDS):
            metric = request.metrics[i]
            self._put(out, name, int(metric.nvmlReturn), metric.value)
        return out

    def _swap(self) -> None:
        """The new sample becomes the previous one (and their addresses with them)."""
        self._prev, self._cur = self._cur, self._prev
        self._addresses = self._addresses[1], self._addresses[0]

    def _put(self, out: dict[str, float | None], name: str, code: int, value: float) -> None:
        if code != 0:
            self._q.note(name, describe_code(self._q.nvml, code))
        else:
            out[name] = float(value)

    def _made_request(self) -> Any:  # noqa: ANN401  pynvml's c_nvmlGpmMetricsGet_t
        """The nvmlGpmMetricsGet request, made on first use and reused (its metric ids set once)."""
        request = self._request
        if request is None:
            nvml = self._q.nvml
            request = self._request = nvml.c_nvmlGpmMetricsGet_t()
            request.version = getattr(nvml, "NVML_GPM_METRICS_GET_VERSION", 1)
            request.numMetrics = len(self._ids)
            for i, metric_id in enumerate(self._ids):
                request.metrics[i].metricId = metric_id
        return request

    # A batched read (collectors.nvml.fastread) takes the sample and the metrics in its one crossing:
    def request_address(self) -> int | None:
        """The request's address for a batch, with its metric records' layout ready; None: no GPM
        here, or a request this code cannot read back as raw records."""
        if self._why is not None:
            return None
        request = self._made_request()
        metric_type = getattr(type(request.metrics), "_type_", None)
        metric = getattr(getattr(type(request), "metrics", None), "offset", None)
        record = getattr(getattr(metric_type, "nvmlReturn", None), "offset", None)
        value = getattr(getattr(metric_type, "value", None), "offset", None)
        if not (isinstance(metric, int) and isinstance(record, int) and isinstance(value, int)
                and value >= record + 4 and metric_type is not None):
            return None
        size = ctypes.sizeof(metric_type)
        n = len(GPM_FIELDS)
        if (metric + record) % 4 or (metric + value) % 8 or size % 8 or ctypes.sizeof(request) % 8:
            return None
        sample_at = tuple(getattr(getattr(type(request), name, None), "offset", None) for name in ("sample1", "sample2"))
        if not all(isinstance(at, int) for at in sample_at):
            return None
        self._sample_at = (int(sample_at[0] or 0), int(sample_at[1] or 0))
        raw = memoryview(request).cast("B")
        codes = raw.cast("I")[(metric + record) // 4::size // 4][:n]
        values = raw.cast("d")[(metric + value) // 8::size // 8][:n]
        self._records = (codes, values)
        self._raw = raw
        self._addresses = (ctypes.cast(self._prev, ctypes.c_void_p).value or 0,
                           ctypes.cast(self._cur, ctypes.c_void_p).value or 0)
        return ctypes.addressof(request)

    @property
    def request(self) -> object:
        """The nvmlGpmMetricsGet request (None until made), for a batch to keep alive with its address."""
        return self._request

    def batchable(self) -> bool:
        """Whether the next read can be batched (GPM here, a base sample taken, the request laid out)."""
        return (self._why is None and self._primed and self._records is not None
                and not self._q.is_sticky(GPM_FIELDS[0]))  # failed for good: pynvml's path says why

    def begin_batched(self) -> int:
        """Point the request at (previous, new) samples; the new sample's address, for nvmlGpmSampleGet."""
        prev, cur = self._addresses
        _POINTER.pack_into(self._raw, self._sample_at[0], prev)  # type: ignore[arg-type]  # set by request_address
        _POINTER.pack_into(self._raw, self._sample_at[1], cur)  # type: ignore[arg-type]
        return cur

    def end_batched(self, sample_code: int, metrics_code: int) -> dict[str, float | None] | None:
        """The figures after the batch made both calls; None: one did not answer 0 (read() asks again)."""
        if sample_code != 0 or metrics_code != 0 or self._records is None or self._raw is None:
            return None
        self._swap()
        codes, values = self._records
        if not any(codes):  # every metric answered: the usual case
            return dict(zip(GPM_FIELDS, values.tolist(), strict=True))
        out: dict[str, float | None] = dict.fromkeys(GPM_FIELDS)
        for name, code, value in zip(GPM_FIELDS, codes.tolist(), values.tolist(), strict=True):
            self._put(out, name, code, value)
        return out

    def close(self) -> None:
        """Free the two GPM sample buffers; errors on the way out are ignored."""
        for sample in (self._prev, self._cur):
            if sample is None:
                continue
            with contextlib.suppress(Exception):  # shutting down: nobody to tell
                self._q.nvml.nvmlGpmSampleFree(sample)
        self._prev = self._cur = self._request = self._records = self._raw = None
        self._addresses = (0, 0)
        self._why = "GPM sampler closed"
