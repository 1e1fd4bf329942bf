"""One GPU read through NVML: plain queries plus the state that rates need.

:class:`GpuDevice` holds what must survive between reads of one GPU: the
NVLink byte counters (rates are deltas), the XID event set, the timestamp of
the last per-process utilization sample, and the GPM sampler. Each field's
NVML call goes through :class:`~.nvml_query.Query`, so a missing field is
None with a reason in ``GpuSample.unavailable``, never 0.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any, TypeVar

from gpulens.collectors.nvml.fastread import BatchedRead
from gpulens.collectors.nvml.gpm import GpmSampler
from gpulens.collectors.nvml.mig import MigDevice, MigLayout
from gpulens.collectors.nvml.nvlink import NvLinkCounter
from gpulens.collectors.nvml.query import (
    GPU_IS_LOST,
    TIMEOUT,
    GpuLost,
    Query,
    decode_clock_reasons,
    describe,
    error_code,
)
from gpulens.collectors.nvml.scalars import (
    COMPUTE,
    GRAPHICS,
    MAX_PROCESSES,
    NO_SAMPLES,
    PROC_UTIL,
    SCALARS,
    pairs,
    util_samples,
)
from gpulens.core.logbook import Failure, call_guarded
from gpulens.core.makers import fast_builder
from gpulens.core.model import GpuProcess, GpuSample

log = logging.getLogger("gpulens.collectors.nvml")
_T = TypeVar("_T")


def _lost_as_value(fn: Callable[..., _T], *args: object) -> _T | GpuLost:
    """``fn(*args)``, or the GpuLost it raised (which the guard around it must not swallow)."""
    try:
        return fn(*args)
    except GpuLost as lost:
        return lost

MAX_XIDS_PER_READ = 64
"""Events drained per read; more stay queued in NVML for the next read."""


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


NOT_AVAILABLE = (1 << 64) - 1
"""NVML_VALUE_NOT_AVAILABLE_ulonglong: a process's memory NVML cannot give (pynvml makes it None)."""
_gpu_sample = fast_builder(GpuSample, (
    "index", "name", "uuid", "utilization_percent", "memory_utilization_percent", "mem_used_bytes", "mem_total_bytes",
    "power_w", "power_limit_w", "temperature_c", "sm_clock_mhz", "mem_clock_mhz", "pcie_rx_bytes_per_s",
    "pcie_tx_bytes_per_s", "nvlink_rx_bytes_per_s", "nvlink_tx_bytes_per_s", "ecc_corrected", "ecc_uncorrected",
    "xid_events", "throttle_reasons", "sm_activity_percent", "sm_occupancy_percent", "dram_bw_util_percent",
    "processes", "unavailable", "tensor_active_percent", "nvlink_total_bytes_per_s", "energy_joules", "vendor",
    "allocated"))
"""``GpuSample(*values)``, every field given in order, without its ``__init__``'s ``object.__setattr__`` per
field (most of the cost of making a GPU's sample on a steady tick; core.makers)."""
_gpu_process = fast_builder(GpuProcess, ("pid", "used_memory_bytes", "sm_util_percent", "mem_util_percent"))
"""``GpuProcess(pid, used, sm, mem)``, made as :data:`_gpu_sample` makes a GpuSample."""


class GpuDevice:
    """One GPU: its handle, identity and the state kept between reads."""

    def __init__(self, nvml: ModuleType, index: int, clock: Callable[[], float]) -> None:
        self.index = index
        self.reading = f"reading GPU {index}"
        """What a failed read is logged as (made once: the collector guards every read with it)."""
        self._batched_reading = f"GPU {index}'s batched NVML read (pynvml's path from now on)"
        self.name = ""
        self.uuid = ""
        self.lost: str | None = None
        """Why this GPU can no longer be read (None while it can)."""
        self._nvml = nvml
        self._q = Query(nvml)
        self._events: Any = None
        self._xid_why = "XID event set not opened"
        self._util_since_us = 0
        self._gpm: GpmSampler | None = None
        self._nvlink: NvLinkCounter | None = None
        self._mig: MigLayout | None = None
        self._identity_reasons: dict[str, str] = {}
        self._scalar_calls = tuple((scalar.fields, scalar.fn, scalar.constants(nvml), scalar.parts)
                                   for scalar in SCALARS)
        """Each scalar's (fields, fn, constant arguments, structure parts), as this binding names them."""
        self._fast: BatchedRead | None = None
        """The read as one batch of C calls (collectors.nvml.fastread); None: through pynvml alone."""
        try:
            self.handle: Any = nvml.nvmlDeviceGetHandleByIndex(index)
        except nvml.NVMLError as err:
            self.lost = f"cannot open GPU {index}: {describe(err)}"
            return
        opened = call_guarded(log, f"opening GPU {index}", _lost_as_value, self._open, clock)
        if isinstance(opened, Failure):  # one GPU never stops the collector from opening
            self._mark_lost(f"internal error opening GPU: {opened}")
        elif opened is not None:
            self._mark_lost(opened.reason)
        self._identity_reasons = {k: v for k, v in self._q.reasons.items() if k in ("name", "uuid")}

    def _open(self, clock: Callable[[], float]) -> None:
        q, h = self._q, self.handle
        self.name = _text(q("name", "nvmlDeviceGetName", h) or "")
        self.uuid = _text(q("uuid", "nvmlDeviceGetUUID", h) or "")
        self._open_events()
        self._nvlink = NvLinkCounter(q, h, clock)
        self._gpm = GpmSampler(q, h)
        self._mig = MigLayout(self._nvml, h, clock)
        self.read_mig()  # the MIG devices are listed now; later reads check the mode, and list on a change
        self._fast = self._lay_out()

    def _lay_out(self, cap: int | None = None) -> BatchedRead | None:
        """This GPU's batched read (room for ``cap`` processes a list); None: pynvml's path reads it, as
        without the library (a fault laying it out is logged)."""
        fast = call_guarded(log, f"laying out GPU {self.index}'s NVML call batch", BatchedRead.make, self, cap)
        return None if isinstance(fast, Failure) else fast

    def read_mig(self, mode: tuple[int, int] | None = None) -> str | None:
        """The MIG layout's note (None: nothing to say); ``mode``: (current, pending) already read.

        Raises:
            GpuLost: NVML reports the GPU as lost.
        """
        if self._mig is None:
            return None
        got = call_guarded(log, f"reading GPU {self.index}'s MIG layout", _lost_as_value, self._mig.read, mode)
        if isinstance(got, Failure):  # the GPU's other figures are still read
            return f"MIG layout not read: internal error: {got}"
        if isinstance(got, GpuLost):
            raise got
        return got

    @property
    def batched(self) -> bool:
        """Whether this GPU is read through the NVML call batch (collectors.nvml.fastread)."""
        return self._fast is not None

    @property
    def fast(self) -> BatchedRead | None:
        """This GPU's batched read while it is read so (None: through pynvml's path, lost or closed)."""
        return self._fast if self.lost is None else None

    @property
    def mig_devices(self) -> tuple[MigDevice, ...]:
        """This GPU's MIG devices as last listed (empty: MIG mode off, no MIG, or not read)."""
        return () if self._mig is None else self._mig.devices

    def _open_events(self) -> None:
        q = self._q
        events = q("xid_events", "nvmlEventSetCreate")
        if events is None:
            self._xid_why = q.reasons.get("xid_events", "nvmlEventSetCreate failed")
            return
        xid = getattr(self._nvml, "nvmlEventTypeXidCriticalError", 0x8)
        ok, _ = q.call("xid_events", "nvmlDeviceRegisterEvents", self.handle, xid, events)
        if ok:
            self._events = events
            return
        self._free_events(events)
        self._xid_why = q.reasons.get("xid_events", "event registration failed")

    def read(self, ran: BatchedRead | None = None) -> GpuSample:
        """Read every field of this GPU; never raises (a lost GPU says so).

        ``ran``: the GPU's batch (:attr:`fast`), prepared and run since with the other GPUs' by the
        collector (one crossing for all); it is read only if it is still this GPU's."""
        if self.lost is not None:
            return GpuSample(self.index, self.name, self.uuid, unavailable={"gpu": self.lost})
        self._q.begin()
        try:
            return self._read(ran is not None and ran is self._fast)
        except GpuLost as lost:
            return self.lose(lost.reason)

    def lose(self, reason: str) -> GpuSample:
        """This GPU is lost (NVML said so): it is closed and never read again; its sample, saying why."""
        self._mark_lost(reason)
        return GpuSample(self.index, self.name, self.uuid, unavailable={"gpu": reason})

    def drop_batch(self) -> None:
        """A fault of the batched read itself (logged by its guard): pynvml's path reads this GPU from now on."""
        self._fast = None

    def _read(self, ran: bool = False) -> GpuSample:
        fast = self._fast
        if fast is not None:
            sample = call_guarded(log, self._batched_reading, _lost_as_value, fast.read, ran)
            if isinstance(sample, GpuLost):
                raise sample
            if isinstance(sample, Failure):  # a fault of the batched read itself: pynvml's path from now on
                self._fast = None
                self._q.begin()
                return self._read()
            if fast.regrow:  # more processes than the batch holds: laid out again, larger
                self._fast = self._lay_out(fast.regrow * 2 + 5)
            return sample
        q, h = self._q, self.handle
        values: list[Any] = []
        for fields, fn, args, parts in self._scalar_calls:
            value = q(fields, fn, h, *args)
            if not parts:
                values.append(value)
            elif value is None:
                values += (None,) * len(parts)
            else:
                values += [getattr(value, part) for part in parts]
        nvl_rx, nvl_tx = self._nvlink.read() if self._nvlink else (None, None)
        xids = self.drain_xids()
        compute = pairs(q("processes", COMPUTE, h))
        graphics = pairs(q("processes.graphics", GRAPHICS, h))
        ok, samples = q.call(PROC_UTIL, "nvmlDeviceGetProcessUtilization", h,
                             self._util_since_us, empty_on=NO_SAMPLES)
        processes = self.merge_processes(compute, graphics, ok, util_samples(samples))
        gpm = self._gpm.read() if self._gpm else {}
        mig = self.read_mig()
        return self.sample(values, (nvl_rx, nvl_tx), xids, processes, gpm, mig)

    def sample(self, values: Sequence[Any], nvlink: tuple[float | None, float | None], xids: tuple[int, ...],
               processes: tuple[GpuProcess, ...], gpm: Mapping[str, float | None], mig: str | None) -> GpuSample:
        """The GpuSample of one read: ``values`` are :data:`SCALARS`' answers, flat (None: not read)."""
        (util_gpu, util_mem, mem_total, _mem_free, mem_used, power_mw, limit_mw, temp, sm_mhz, mem_mhz,
         energy_mj, rx_kb, tx_kb, ecc_c, ecc_u, mask) = values
        q = self._q
        if mig is not None:
            q.note("mig", mig)
        # NVML reports PCIe throughput in KB/s over a 20 ms window; KiB as nvidia-smi does.
        return _gpu_sample(
            self.index,
            self.name,
            self.uuid,
            None if util_gpu is None else float(util_gpu),  # utilization_percent
            None if util_mem is None else float(util_mem),  # memory_utilization_percent
            None if mem_used is None else int(mem_used),  # mem_used_bytes
            None if mem_total is None else int(mem_total),  # mem_total_bytes
            None if power_mw is None else power_mw / 1000.0,  # power_w
            None if limit_mw is None else limit_mw / 1000.0,  # power_limit_w
            None if temp is None else float(temp),  # temperature_c
            None if sm_mhz is None else int(sm_mhz),  # sm_clock_mhz
            None if mem_mhz is None else int(mem_mhz),  # mem_clock_mhz
            None if rx_kb is None else rx_kb * 1024.0,  # pcie_rx_bytes_per_s
            None if tx_kb is None else tx_kb * 1024.0,  # pcie_tx_bytes_per_s
            nvlink[0],  # nvlink_rx_bytes_per_s
            nvlink[1],  # nvlink_tx_bytes_per_s
            None if ecc_c is None else int(ecc_c),  # ecc_corrected
            None if ecc_u is None else int(ecc_u),  # ecc_uncorrected
            xids,  # xid_events
            () if mask is None else decode_clock_reasons(int(mask)),  # throttle_reasons
            gpm.get("sm_activity_percent"),
            gpm.get("sm_occupancy_percent"),
            gpm.get("dram_bw_util_percent"),
            processes,
            {**self._identity_reasons, **q.reasons},  # unavailable
            gpm.get("tensor_active_percent"),
            None,  # nvlink_total_bytes_per_s: NVML gives each direction
            None if energy_mj is None else energy_mj / 1000.0,  # energy_joules
            "nvidia",  # vendor
            None,  # allocated: set by the sampler from the kubelet or Slurm
        )

    def drain_xids(self, found: list[int] | None = None, taken: int = 0) -> tuple[int, ...]:
        """The XIDs queued since the last read, after ``found`` (from ``taken`` events already taken off the
        queue this read: at most MAX_XIDS_PER_READ events are taken in all)."""
        found = [] if found is None else found
        if self._events is None:
            self._q.note("xid_events", self._xid_why)
            return ()
        nvml = self._nvml
        xid_type = getattr(nvml, "nvmlEventTypeXidCriticalError", 0x8)
        for _ in range(MAX_XIDS_PER_READ - taken):
            try:
                data = nvml.nvmlEventSetWait(self._events, 0)
            except nvml.NVMLError as err:
                code = error_code(err)
                if code == GPU_IS_LOST:
                    raise GpuLost(describe(err)) from err
                if code != TIMEOUT:  # TIMEOUT: nothing queued, the normal case
                    self._q.note("xid_events", describe(err))
                break
            if int(data.eventType) & xid_type:
                found.append(int(data.eventData))
        return tuple(found)

    def merge_processes(self, compute: Sequence[tuple[int, int | None]], graphics: Sequence[tuple[int, int | None]],
                        ok: bool, samples: Sequence[tuple[int, int, int, int]]) -> tuple[GpuProcess, ...]:
        """The GPU's processes from its compute and graphics lists, (pid, bytes used or None) each, and the
        utilization samples, (pid, timestamp in us, SM %, memory %) each; ``ok``: the samples were read."""
        if len(compute) == 1 and not graphics and len(samples) <= 1:  # one process: a GPU of one job, the usual
            return (self._one_process(compute[0], ok, samples[0] if samples else None),)
        return self._merge_many(compute, graphics, ok, samples)

    def _merge_many(self, compute: Sequence[tuple[int, int | None]], graphics: Sequence[tuple[int, int | None]],
                    ok: bool, samples: Sequence[tuple[int, int, int, int]]) -> tuple[GpuProcess, ...]:
        """:meth:`merge_processes` in general: a process listed twice, samples of several processes."""
        q = self._q
        used: dict[int, int | None] = {}
        listed = [*compute, *graphics] if graphics else compute
        for pid, mem in listed[:MAX_PROCESSES] if len(listed) > MAX_PROCESSES else listed:
            if used.get(pid) is None:  # NOT_AVAILABLE: the raw answer where pynvml gives None
                used[pid] = None if mem is None or mem == NOT_AVAILABLE else int(mem)
        util: dict[int, tuple[int, int, int]] = {}
        since = self._util_since_us
        for pid, stamp, sm, mem_util in samples[:MAX_PROCESSES] if len(samples) > MAX_PROCESSES else samples:
            seen = util.get(pid)
            if seen is None or stamp >= seen[0]:
                util[pid] = (stamp, sm, mem_util)
            if stamp > since:
                since = stamp
        self._util_since_us = since
        if None in used.values():
            q.note("processes.used_memory_bytes", "NVML gives no per-process memory here")
        if ok and not used.keys() <= util.keys():
            q.note(PROC_UTIL, "no utilization sample since the last read for some processes")
        out = []
        for pid in sorted(used) if len(used) > 1 else used:
            sample = util.get(pid)
            out.append(_gpu_process(pid, used[pid], None if sample is None else float(sample[1]),
                                    None if sample is None else float(sample[2])))
        return tuple(out)

    def _one_process(self, listed: tuple[int, int | None], ok: bool,
                     sample: tuple[int, int, int, int] | None) -> GpuProcess:
        """:meth:`merge_processes` of one listed process and at most one utilization sample."""
        pid, mem = listed
        used = None if mem is None or mem == NOT_AVAILABLE else int(mem)
        if used is None:
            self._q.note("processes.used_memory_bytes", "NVML gives no per-process memory here")
        sm = mem_util = None
        if sample is not None:
            if sample[1] > self._util_since_us:
                self._util_since_us = sample[1]
            if sample[0] == pid:
                sm, mem_util = float(sample[2]), float(sample[3])
        if ok and sm is None:
            self._q.note(PROC_UTIL, "no utilization sample since the last read for some processes")
        return _gpu_process(pid, used, sm, mem_util)

    def _mark_lost(self, reason: str) -> None:
        self.lost = reason
        self.close()

    def _free_events(self, events: object) -> None:
        with contextlib.suppress(Exception):  # freeing on the way out; nobody to tell
            self._nvml.nvmlEventSetFree(events)

    def close(self) -> None:
        """Release the event set and GPM buffers of this GPU (idempotent)."""
        self._fast = None  # first: the batch holds their addresses
        if self._events is not None:
            self._free_events(self._events)
            self._events = None
        if self._gpm is not None:
            self._gpm.close()
            self._gpm = None
