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
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar

from gpulens.collectors.nvml.gpm import GpmSampler
from gpulens.collectors.nvml.mig import MigDevice, MigLayout
from gpulens.collectors.nvml.nvlink import NvLinkCounter
from gpulens.collectors.nvml.query import (
    GPU_IS_LOST,
    NOT_FOUND,
    TIMEOUT,
    GpuLost,
    Query,
    decode_clock_reasons,
    describe,
    error_code,
)
from gpulens.core.logbook import Failure, call_guarded
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
MAX_PROCESSES = 4096
# Newest call first; the older names serve drivers (or pynvml) that lack it.
_CLOCK_REASONS = ("nvmlDeviceGetCurrentClocksEventReasons",
                  "nvmlDeviceGetCurrentClocksThrottleReasons")
_COMPUTE = ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses_v2")
_GRAPHICS = ("nvmlDeviceGetGraphicsRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses_v2")
_PROC_UTIL = ("processes.sm_util_percent", "processes.mem_util_percent")
_NO_SAMPLES = frozenset({NOT_FOUND, 0})
"""Process utilization errors that mean "no sample since then", not a failure."""


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class GpuDevice:
    """One GPU: its handle, identity and the state kept between reads."""

    def __init__(self, nvml: ModuleType, index: int, clock: Callable[[], float]) -> None:
        self.index = index
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
        self._read_mig()  # the MIG devices are listed now; later reads check the mode, and list on a change

    def _read_mig(self) -> str | None:
        """The MIG layout's note (None: nothing to say); raises only GpuLost."""
        if self._mig is None:
            return None
        got = call_guarded(log, f"reading GPU {self.index}'s MIG layout", _lost_as_value, self._mig.read)
        if isinstance(got, Failure):  # the GPU's other figures are still read
            return f"MIG layout not read: internal error: {got}"
        if isinstance(got, GpuLost):
            raise got
        return got

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

    def read(self) -> GpuSample:
        """Read every field of this GPU; never raises (a lost GPU says so)."""
        if self.lost is not None:
            return GpuSample(self.index, self.name, self.uuid, unavailable={"gpu": self.lost})
        self._q.begin()
        try:
            return self._read()
        except GpuLost as lost:
            self._mark_lost(lost.reason)
            return GpuSample(self.index, self.name, self.uuid, unavailable={"gpu": lost.reason})

    def _read(self) -> GpuSample:
        nvml, q, h = self._nvml, self._q, self.handle
        util = q(("utilization_percent", "memory_utilization_percent"),
                 "nvmlDeviceGetUtilizationRates", h)
        mem = q(("mem_used_bytes", "mem_total_bytes"), "nvmlDeviceGetMemoryInfo", h)
        power_mw = q("power_w", "nvmlDeviceGetPowerUsage", h)
        limit_mw = q("power_limit_w", "nvmlDeviceGetEnforcedPowerLimit", h)
        temp = q("temperature_c", "nvmlDeviceGetTemperature", h, nvml.NVML_TEMPERATURE_GPU)
        sm_mhz = q("sm_clock_mhz", "nvmlDeviceGetClockInfo", h, nvml.NVML_CLOCK_SM)
        mem_mhz = q("mem_clock_mhz", "nvmlDeviceGetClockInfo", h, nvml.NVML_CLOCK_MEM)
        energy_mj = q("energy_joules", "nvmlDeviceGetTotalEnergyConsumption", h)  # since the driver loaded
        # NVML reports PCIe throughput in KB/s over a 20 ms window; KiB as nvidia-smi does.
        rx_kb = q("pcie_rx_bytes_per_s", "nvmlDeviceGetPcieThroughput", h,
                  nvml.NVML_PCIE_UTIL_RX_BYTES)
        tx_kb = q("pcie_tx_bytes_per_s", "nvmlDeviceGetPcieThroughput", h,
                  nvml.NVML_PCIE_UTIL_TX_BYTES)
        ecc_c = q("ecc_corrected", "nvmlDeviceGetTotalEccErrors", h,
                  nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, nvml.NVML_VOLATILE_ECC)
        ecc_u = q("ecc_uncorrected", "nvmlDeviceGetTotalEccErrors", h,
                  nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC)
        mask = q("throttle_reasons", _CLOCK_REASONS, h)
        nvl_rx, nvl_tx = self._nvlink.read() if self._nvlink else (None, None)
        xids = self._drain_xids()
        processes = self._processes()
        gpm = self._gpm.read() if self._gpm else {}
        mig = self._read_mig()
        if mig is not None:
            q.note("mig", mig)
        return GpuSample(
            index=self.index,
            name=self.name,
            uuid=self.uuid,
            utilization_percent=None if util is None else float(util.gpu),
            memory_utilization_percent=None if util is None else float(util.memory),
            mem_used_bytes=None if mem is None else int(mem.used),
            mem_total_bytes=None if mem is None else int(mem.total),
            power_w=None if power_mw is None else power_mw / 1000.0,
            power_limit_w=None if limit_mw is None else limit_mw / 1000.0,
            temperature_c=None if temp is None else float(temp),
            sm_clock_mhz=None if sm_mhz is None else int(sm_mhz),
            mem_clock_mhz=None if mem_mhz is None else int(mem_mhz),
            pcie_rx_bytes_per_s=None if rx_kb is None else rx_kb * 1024.0,
            pcie_tx_bytes_per_s=None if tx_kb is None else tx_kb * 1024.0,
            nvlink_rx_bytes_per_s=nvl_rx,
            nvlink_tx_bytes_per_s=nvl_tx,
            ecc_corrected=None if ecc_c is None else int(ecc_c),
            ecc_uncorrected=None if ecc_u is None else int(ecc_u),
            xid_events=xids,
            throttle_reasons=() if mask is None else decode_clock_reasons(int(mask)),
            sm_activity_percent=gpm.get("sm_activity_percent"),
            sm_occupancy_percent=gpm.get("sm_occupancy_percent"),
            dram_bw_util_percent=gpm.get("dram_bw_util_percent"),
            processes=processes,
            unavailable={**self._identity_reasons, **q.reasons},
            tensor_active_percent=gpm.get("tensor_active_percent"),
            energy_joules=None if energy_mj is None else energy_mj / 1000.0,
        )

    def _drain_xids(self) -> tuple[int, ...]:
        if self._events is None:
            self._q.note("xid_events", self._xid_why)
            return ()
        nvml = self._nvml
        xid_type = getattr(nvml, "nvmlEventTypeXidCriticalError", 0x8)
        found: list[int] = []
        for _ in range(MAX_XIDS_PER_READ):
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

    def _processes(self) -> tuple[GpuProcess, ...]:
        q, h = self._q, self.handle
        used: dict[int, int | None] = {}
        compute = q("processes", _COMPUTE, h) or ()
        graphics = q("processes.graphics", _GRAPHICS, h) or ()
        for proc in (*compute, *graphics)[:MAX_PROCESSES]:
            mem = proc.usedGpuMemory
            if used.get(proc.pid) is None:
                used[int(proc.pid)] = None if mem is None else int(mem)
        ok, samples = q.call(_PROC_UTIL, "nvmlDeviceGetProcessUtilization", h,
                             self._util_since_us, empty_on=_NO_SAMPLES)
        util: dict[int, Any] = {}
        for sample in (samples or ())[:MAX_PROCESSES]:
            seen = util.get(sample.pid)
            if seen is None or sample.timeStamp >= seen.timeStamp:
                util[int(sample.pid)] = sample
            self._util_since_us = max(self._util_since_us, int(sample.timeStamp))
        if None in used.values():
            q.note("processes.used_memory_bytes", "NVML gives no per-process memory here")
        if ok and not used.keys() <= util.keys():
            q.note(_PROC_UTIL, "no utilization sample since the last read for some processes")
        out = []
        for pid in sorted(used):
            sample = util.get(pid)
            out.append(GpuProcess(
                pid=pid,
                used_memory_bytes=used[pid],
                sm_util_percent=None if sample is None else float(sample.smUtil),
                mem_util_percent=None if sample is None else float(sample.memUtil),
            ))
        return tuple(out)

    def _mark_lost(self, reason: str) -> None:
        self.lost = reason
        self.close()

    def _free_events(self, events: object) -> None:
        with contextlib.suppress(Exception):  # freeing on the way out; nobody to tell
            self._nvml.nvmlEventSetFree(events)

    def close(self) -> None:
        """Release the event set and GPM buffers of this GPU (idempotent)."""
        if self._events is not None:
            self._free_events(self._events)
            self._events = None
        if self._gpm is not None:
            self._gpm.close()
            self._gpm = None
