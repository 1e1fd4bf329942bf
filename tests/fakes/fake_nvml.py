"""TEST DOUBLE of ``pynvml`` (nvidia-ml-py): a fake NVML with fake GPUs.

Not NVML. It mimics the names the gpulens GPU collector uses: the functions
(``nvmlInit``, ``nvmlDeviceGet*``, event sets, field values, GPM), the
constants with pynvml's values, struct results as plain objects with pynvml's
attribute names, and the error classes (``NVMLError`` and its subclasses,
``NVMLError(15)`` builds an ``NVMLError_GpuIsLost`` as in pynvml).

Knobs (on the object :func:`make_fake_nvml` returns)::

    fake.fail("nvmlDeviceGetPowerUsage", fake.NVMLError_NoPermission, gpu=3)
    fake.lose_gpu(2)                    # every call on GPU 2 raises GpuIsLost
    fake.set_gpm(False)                 # GPM unsupported on all GPUs
    fake.inject_xid(0, 79)              # an XID event queued on GPU 0
    fake.add_process(0, 4242, 2 << 30, sm_util=55, mem_util=20)
    fake.remove("nvmlDeviceGetCurrentClocksEventReasons")  # an older pynvml
    fake.set_mig(1, 3)                  # GPU 1 in MIG mode with 3 MIG devices (1g.10gb)
    fake.gpus[2].mig_mode = (0, 1)      # MIG off, on after the next reset; None: no MIG (NotSupported)
    fake.advance(1.0)                   # time passes: counters grow
    NvmlCollector(fake, clock=fake.clock)

Kept cheap per call: a benchmark reads 8 fake GPUs every tick.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tests.fakes.fake_nvml_types import (
    ERROR_CODES,
    EventData,
    FieldValue,
    GpmMetricsGet,
    GpmSample,
    GpmSupport,
    Memory,
    NVMLError,
    NVMLLibraryMismatchError,
    ProcessInfo,
    ProcessUtilizationSample,
    Utilization,
    constants,
    error_classes,
)

GIB = 1 << 30


@dataclass
class FakeProcess:
    """A process on a fake GPU; ``sm_util`` None = no utilization samples."""

    pid: int
    used_memory: int | None
    sm_util: int | None = None
    mem_util: int | None = None
    graphics: bool = False
    util_time_us: int = 1


@dataclass
class FakeMig:
    """A MIG device of a fake GPU: what ``nvmlDeviceGetMigDeviceHandleByIndex`` returns.

    ``error`` (a class or code): every call on this MIG device raises it."""

    parent: FakeGpu
    uuid: str
    gpu_instance: int
    compute_instance: int = 0
    mem_total: int = 10 * GIB - 256 * (1 << 20)
    mem_used: int = 0
    error: Any = None


@dataclass
class FakeGpu:
    """One fake GPU; every attribute is what the matching NVML call returns."""

    index: int
    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = ""
    util_gpu: int = 87
    util_mem: int = 45
    mem_total: int = 80 * GIB
    mem_used: int = 60 * GIB
    power_mw: int = 512_345
    power_limit_mw: int = 700_000
    temperature_c: int = 61
    sm_clock_mhz: int = 1980
    mem_clock_mhz: int = 2619
    energy_mj: int = 123_456_789_000
    """Millijoules since the driver loaded (nvmlDeviceGetTotalEnergyConsumption)."""
    pcie_rx_kbs: int = 1200
    pcie_tx_kbs: int = 800
    nvlink_links: int = 18
    nvlink_rx_kib_per_s: int = 1000
    nvlink_tx_kib_per_s: int = 2000
    nvlink_rx_kib: list[int] = field(default_factory=list)
    nvlink_tx_kib: list[int] = field(default_factory=list)
    ecc_corrected: int = 3
    ecc_uncorrected: int = 0
    clock_reasons: int = 0x4  # sw_power_cap
    gpm_supported: bool = True
    gpm: dict[int, float] = field(default_factory=lambda: {2: 71.5, 3: 33.0, 10: 41.25, 5: 22.5})
    gpm_errors: dict[int, int] = field(default_factory=dict)
    field_errors: dict[int, int] = field(default_factory=dict)
    processes: list[FakeProcess] = field(default_factory=list)
    xids: list[int] = field(default_factory=list)
    lost: bool = False
    mig_mode: tuple[int, int] | None = (0, 0)
    """(current, pending) MIG mode, 1 on, 0 off (nvmlDeviceGetMigMode); None: no MIG (NotSupported)."""
    mig_slots: list[FakeMig | None] = field(default_factory=list)
    """MIG device slots (nvmlDeviceGetMigDeviceHandleByIndex); None: an empty slot (NotFound)."""
    mig_max: int = 7

    def __post_init__(self) -> None:
        if not self.uuid:
            self.uuid = f"GPU-fa4e0000-0000-0000-0000-{self.index:012d}"
        if not self.nvlink_rx_kib:
            self.nvlink_rx_kib = [0] * self.nvlink_links
            self.nvlink_tx_kib = [0] * self.nvlink_links


class EventSet:
    """What ``nvmlEventSetCreate`` returns: the GPUs registered on it."""

    __slots__ = ("freed", "gpus")

    def __init__(self) -> None:
        self.gpus: list[FakeGpu] = []
        self.freed = False


class FakeNvml:
    """A module-like fake of pynvml; see the module docstring for the knobs."""

    # Set in __init__ from error_classes() and constants(); declared here for the type checker.
    NVMLError_Uninitialized: type[NVMLError]
    NVMLError_InvalidArgument: type[NVMLError]
    NVMLError_NotSupported: type[NVMLError]
    NVMLError_NoPermission: type[NVMLError]
    NVMLError_AlreadyInitialized: type[NVMLError]
    NVMLError_NotFound: type[NVMLError]
    NVMLError_InsufficientSize: type[NVMLError]
    NVMLError_InsufficientPower: type[NVMLError]
    NVMLError_DriverNotLoaded: type[NVMLError]
    NVMLError_Timeout: type[NVMLError]
    NVMLError_IrqIssue: type[NVMLError]
    NVMLError_LibraryNotFound: type[NVMLError]
    NVMLError_FunctionNotFound: type[NVMLError]
    NVMLError_CorruptedInforom: type[NVMLError]
    NVMLError_GpuIsLost: type[NVMLError]
    NVMLError_ResetRequired: type[NVMLError]
    NVMLError_OperatingSystem: type[NVMLError]
    NVMLError_LibRmVersionMismatch: type[NVMLError]
    NVMLError_InUse: type[NVMLError]
    NVMLError_Memory: type[NVMLError]
    NVMLError_NoData: type[NVMLError]
    NVMLError_Unknown: type[NVMLError]
    NVML_ERROR_INVALID_ARGUMENT: int
    NVML_ERROR_NOT_SUPPORTED: int
    NVML_TEMPERATURE_GPU: int
    NVML_CLOCK_GRAPHICS: int
    NVML_CLOCK_SM: int
    NVML_CLOCK_MEM: int
    NVML_PCIE_UTIL_TX_BYTES: int
    NVML_PCIE_UTIL_RX_BYTES: int
    NVML_MEMORY_ERROR_TYPE_CORRECTED: int
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED: int
    NVML_FI_DEV_NVLINK_LINK_COUNT: int
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: int
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: int
    nvmlEventTypeXidCriticalError: int

    def __init__(self, gpus: list[FakeGpu], init_error: Any = None) -> None:
        self.__dict__.update(constants())
        self.__dict__.update(error_classes())
        self.NVMLError = NVMLError
        self.NVMLLibraryMismatchError = NVMLLibraryMismatchError
        self.c_nvmlGpmMetricsGet_t = GpmMetricsGet
        self.gpus = gpus
        self.init_error = init_error
        self.init_count = 0
        self.shutdown_count = 0
        self.now_us = 1_000_000
        self.failures: dict[tuple[str, int | None], Any] = {}
        self.event_sets: list[EventSet] = []
        self.gpm_samples_live = 0

    # knobs -------------------------------------------------------------
    def fail(self, fn: str, error: Any, gpu: int | None = None) -> None:
        """Make ``fn`` raise ``error`` (class or code) for one GPU or all (None)."""
        self.failures[(fn, gpu)] = error

    def clear_failures(self) -> None:
        self.failures.clear()

    def lose_gpu(self, index: int) -> None:
        self.gpus[index].lost = True

    def set_gpm(self, on: bool, gpu: int | None = None) -> None:
        for g in self.gpus if gpu is None else [self.gpus[gpu]]:
            g.gpm_supported = on

    def inject_xid(self, gpu: int, xid: int) -> None:
        self.gpus[gpu].xids.append(xid)

    def add_process(self, gpu: int, pid: int, used_memory: int | None,
                    sm_util: int | None = None, mem_util: int | None = None,
                    graphics: bool = False) -> FakeProcess:
        proc = FakeProcess(pid, used_memory, sm_util, mem_util, graphics, self.now_us)
        self.gpus[gpu].processes.append(proc)
        return proc

    def set_mig(self, gpu: int, devices: int, pending: int = 1) -> list[FakeMig]:
        """Turn MIG mode on for ``gpu`` with ``devices`` MIG devices in the first slots."""
        g = self.gpus[gpu]
        g.mig_mode = (1, pending)
        migs = [FakeMig(g, f"MIG-fa4e{gpu:04d}-0000-4000-8000-{slot:012d}", gpu_instance=slot + 7)
                for slot in range(devices)]
        g.mig_slots = list(migs)
        return migs

    def remove(self, fn: str) -> None:
        """Make ``fn`` absent, as in an older pynvml."""
        setattr(self, fn, None)

    def clock(self) -> float:
        """Fake monotonic seconds; pass as ``NvmlCollector(clock=...)``."""
        return self.now_us / 1e6

    def advance(self, seconds: float) -> None:
        """Time passes: NVLink counters grow, busy processes get a new sample."""
        self.now_us += int(seconds * 1e6)
        for g in self.gpus:
            rx, tx = int(g.nvlink_rx_kib_per_s * seconds), int(g.nvlink_tx_kib_per_s * seconds)
            g.nvlink_rx_kib = [v + rx for v in g.nvlink_rx_kib]
            g.nvlink_tx_kib = [v + tx for v in g.nvlink_tx_kib]
            for p in g.processes:
                if p.sm_util is not None:
                    p.util_time_us = self.now_us

    # plumbing ----------------------------------------------------------
    def _raise(self, error: Any) -> None:
        raise error() if isinstance(error, type) else NVMLError(error)

    def _check(self, fn: str, gpu: FakeGpu | None = None) -> None:
        if self.init_count <= 0:
            raise self.NVMLError_Uninitialized()
        if gpu is not None and gpu.lost:
            raise self.NVMLError_GpuIsLost()
        if self.failures:
            err = self.failures.get((fn, None))
            if err is None and gpu is not None:
                err = self.failures.get((fn, gpu.index))
            if err is not None:
                self._raise(err)

    def _check_mig(self, fn: str, m: FakeMig) -> None:
        self._check(fn, m.parent)
        if m.error is not None:
            self._raise(m.error)

    # library -----------------------------------------------------------
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            self._raise(self.init_error)
        self.init_count += 1

    def nvmlShutdown(self) -> None:
        self._check("nvmlShutdown")
        self.init_count -= 1
        self.shutdown_count += 1

    def nvmlErrorString(self, code: int) -> str:
        return str(NVMLError(code))

    def nvmlDeviceGetCount(self) -> int:
        self._check("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        if not 0 <= index < len(self.gpus):
            self._check("nvmlDeviceGetHandleByIndex")
            raise self.NVMLError_InvalidArgument()
        gpu = self.gpus[index]
        self._check("nvmlDeviceGetHandleByIndex", gpu)
        return gpu

    # plain device queries ----------------------------------------------
    def nvmlDeviceGetName(self, h: FakeGpu) -> str:
        self._check("nvmlDeviceGetName", h)
        return h.name

    def nvmlDeviceGetUUID(self, h: FakeGpu | FakeMig) -> str:
        if isinstance(h, FakeMig):
            self._check_mig("nvmlDeviceGetUUID", h)
        else:
            self._check("nvmlDeviceGetUUID", h)
        return h.uuid

    def nvmlDeviceGetIndex(self, h: FakeGpu) -> int:
        self._check("nvmlDeviceGetIndex", h)
        return h.index

    def nvmlDeviceGetUtilizationRates(self, h: FakeGpu) -> Utilization:
        self._check("nvmlDeviceGetUtilizationRates", h)
        return Utilization(h.util_gpu, h.util_mem)

    def nvmlDeviceGetMemoryInfo(self, h: FakeGpu | FakeMig, version: Any = None) -> Memory:
        if isinstance(h, FakeMig):
            self._check_mig("nvmlDeviceGetMemoryInfo", h)
        else:
            self._check("nvmlDeviceGetMemoryInfo", h)
        return Memory(h.mem_total, h.mem_total - h.mem_used, h.mem_used)

    def nvmlDeviceGetPowerUsage(self, h: FakeGpu) -> int:
        self._check("nvmlDeviceGetPowerUsage", h)
        return h.power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, h: FakeGpu) -> int:
        self._check("nvmlDeviceGetTotalEnergyConsumption", h)
        return h.energy_mj

    def nvmlDeviceGetEnforcedPowerLimit(self, h: FakeGpu) -> int:
        self._check("nvmlDeviceGetEnforcedPowerLimit", h)
        return h.power_limit_mw

    def nvmlDeviceGetTemperature(self, h: FakeGpu, sensor: int) -> int:
        self._check("nvmlDeviceGetTemperature", h)
        if sensor != self.NVML_TEMPERATURE_GPU:
            raise self.NVMLError_InvalidArgument()
        return h.temperature_c

    def nvmlDeviceGetClockInfo(self, h: FakeGpu, clock_type: int) -> int:
        self._check("nvmlDeviceGetClockInfo", h)
        if clock_type == self.NVML_CLOCK_MEM:
            return h.mem_clock_mhz
        if clock_type in (self.NVML_CLOCK_SM, self.NVML_CLOCK_GRAPHICS):
            return h.sm_clock_mhz
        raise self.NVMLError_InvalidArgument()

    def nvmlDeviceGetPcieThroughput(self, h: FakeGpu, counter: int) -> int:
        self._check("nvmlDeviceGetPcieThroughput", h)
        return h.pcie_rx_kbs if counter == self.NVML_PCIE_UTIL_RX_BYTES else h.pcie_tx_kbs

    def nvmlDeviceGetTotalEccErrors(self, h: FakeGpu, error_type: int, counter: int) -> int:
        self._check("nvmlDeviceGetTotalEccErrors", h)
        if error_type == self.NVML_MEMORY_ERROR_TYPE_CORRECTED:
            return h.ecc_corrected
        return h.ecc_uncorrected

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: FakeGpu) -> int:
        self._check("nvmlDeviceGetCurrentClocksEventReasons", h)
        return h.clock_reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: FakeGpu) -> int:
        self._check("nvmlDeviceGetCurrentClocksThrottleReasons", h)
        return h.clock_reasons

    # MIG ----------------------------------------------------------------
    def nvmlDeviceGetMigMode(self, h: FakeGpu) -> list[int]:
        self._check("nvmlDeviceGetMigMode", h)
        if h.mig_mode is None:
            raise self.NVMLError_NotSupported()
        return list(h.mig_mode)

    def nvmlDeviceGetMaxMigDeviceCount(self, h: FakeGpu) -> int:
        self._check("nvmlDeviceGetMaxMigDeviceCount", h)
        if h.mig_mode is None:
            raise self.NVMLError_NotSupported()
        return h.mig_max

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: FakeGpu, index: int) -> FakeMig:
        self._check("nvmlDeviceGetMigDeviceHandleByIndex", h)
        if h.mig_mode is None or h.mig_mode[0] != 1:
            raise self.NVMLError_NotSupported()
        if not 0 <= index < h.mig_max:
            raise self.NVMLError_InvalidArgument()
        mig = h.mig_slots[index] if index < len(h.mig_slots) else None
        if mig is None:
            raise self.NVMLError_NotFound()
        return mig

    def nvmlDeviceGetGpuInstanceId(self, h: FakeGpu | FakeMig) -> int:
        if not isinstance(h, FakeMig):
            raise self.NVMLError_InvalidArgument()
        self._check_mig("nvmlDeviceGetGpuInstanceId", h)
        return h.gpu_instance

    def nvmlDeviceGetComputeInstanceId(self, h: FakeGpu | FakeMig) -> int:
        if not isinstance(h, FakeMig):
            raise self.NVMLError_InvalidArgument()
        self._check_mig("nvmlDeviceGetComputeInstanceId", h)
        return h.compute_instance

    # fields, processes, events, GPM -----------------------------------
    def nvmlDeviceGetFieldValues(self, h: FakeGpu, field_ids: list[Any]) -> list[FieldValue]:
        self._check("nvmlDeviceGetFieldValues", h)
        out = []
        now, links, errors = self.now_us, h.nvlink_links, h.field_errors
        rx_id, tx_id = self.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, self.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
        for fid in field_ids:
            fid, scope = fid if isinstance(fid, tuple) else (fid, 0)
            fv = FieldValue(fid, scope, now)
            if errors and fid in errors:
                fv.nvmlReturn = errors[fid]
            elif fid in (rx_id, tx_id):
                if scope >= links:
                    fv.nvmlReturn = self.NVML_ERROR_INVALID_ARGUMENT
                else:
                    fv.ullVal = (h.nvlink_rx_kib if fid == rx_id else h.nvlink_tx_kib)[scope]
            elif fid == self.NVML_FI_DEV_NVLINK_LINK_COUNT:
                fv.uiVal = links
            else:
                fv.nvmlReturn = self.NVML_ERROR_NOT_SUPPORTED
            out.append(fv)
        return out

    def _procs(self, fn: str, h: FakeGpu, graphics: bool) -> list[ProcessInfo]:
        self._check(fn, h)
        return [ProcessInfo(p.pid, p.used_memory) for p in h.processes if p.graphics == graphics]

    def nvmlDeviceGetComputeRunningProcesses(self, h: FakeGpu) -> list[ProcessInfo]:
        return self._procs("nvmlDeviceGetComputeRunningProcesses", h, False)

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: FakeGpu) -> list[ProcessInfo]:
        return self._procs("nvmlDeviceGetGraphicsRunningProcesses", h, True)

    def nvmlDeviceGetComputeRunningProcesses_v2(self, h: FakeGpu) -> list[ProcessInfo]:
        return self._procs("nvmlDeviceGetComputeRunningProcesses_v2", h, False)

    def nvmlDeviceGetGraphicsRunningProcesses_v2(self, h: FakeGpu) -> list[ProcessInfo]:
        return self._procs("nvmlDeviceGetGraphicsRunningProcesses_v2", h, True)

    def nvmlDeviceGetProcessUtilization(
        self, h: FakeGpu, since_us: int
    ) -> list[ProcessUtilizationSample]:
        self._check("nvmlDeviceGetProcessUtilization", h)
        out = [ProcessUtilizationSample(p.pid, p.util_time_us, p.sm_util, p.mem_util or 0)
               for p in h.processes if p.sm_util is not None and p.util_time_us > since_us]
        if not out:
            raise self.NVMLError_NotFound()
        return out

    def nvmlEventSetCreate(self) -> EventSet:
        self._check("nvmlEventSetCreate")
        es = EventSet()
        self.event_sets.append(es)
        return es

    def nvmlDeviceRegisterEvents(self, h: FakeGpu, types: int, es: EventSet) -> None:
        self._check("nvmlDeviceRegisterEvents", h)
        es.gpus.append(h)

    def nvmlEventSetWait(self, es: EventSet, timeout_ms: int) -> EventData:
        self._check("nvmlEventSetWait")
        for g in es.gpus:
            if g.lost:
                raise self.NVMLError_GpuIsLost()
            if g.xids:
                return EventData(g, self.nvmlEventTypeXidCriticalError, g.xids.pop(0))
        raise self.NVMLError_Timeout()

    def nvmlEventSetFree(self, es: EventSet) -> None:
        self._check("nvmlEventSetFree")
        es.freed = True

    def nvmlGpmQueryDeviceSupport(self, h: FakeGpu) -> GpmSupport:
        self._check("nvmlGpmQueryDeviceSupport", h)
        return GpmSupport(int(h.gpm_supported))

    def nvmlGpmSampleAlloc(self) -> GpmSample:
        self._check("nvmlGpmSampleAlloc")
        self.gpm_samples_live += 1
        return GpmSample()

    def nvmlGpmSampleFree(self, sample: GpmSample) -> None:
        self._check("nvmlGpmSampleFree")
        self.gpm_samples_live -= 1

    def nvmlGpmSampleGet(self, h: FakeGpu, sample: GpmSample) -> GpmSample:
        self._check("nvmlGpmSampleGet", h)
        if not h.gpm_supported:
            raise self.NVMLError_NotSupported()
        sample.gpu, sample.time_us = h, self.now_us
        return sample

    def nvmlGpmMetricsGet(self, request: GpmMetricsGet) -> GpmMetricsGet:
        gpu = request.sample1.gpu if request.sample1 is not None else None
        self._check("nvmlGpmMetricsGet", gpu)
        if gpu is None or request.sample2 is None or request.sample2.gpu is not gpu:
            raise self.NVMLError_InvalidArgument()
        for metric in request.metrics[: request.numMetrics]:
            code = gpu.gpm_errors.get(metric.metricId, 0)
            metric.nvmlReturn = code
            metric.value = 0.0 if code else gpu.gpm.get(metric.metricId, 0.0)
        return request


def make_fake_nvml(gpus: int = 8, gpm: bool = True, init_error: Any = None,
                   name: str = "NVIDIA H100 80GB HBM3") -> FakeNvml:
    """A fake pynvml with ``gpus`` identical GPUs (TEST DOUBLE, not NVML).

    ``init_error``: an error class or code ``nvmlInit`` raises, e.g.
    ``NVMLError_LibraryNotFound`` or ``ERROR_CODES["DriverNotLoaded"]``.
    """
    return FakeNvml([FakeGpu(i, name=name, gpm_supported=gpm) for i in range(gpus)], init_error)


__all__ = ["ERROR_CODES", "FakeGpu", "FakeMig", "FakeNvml", "FakeProcess", "make_fake_nvml"]
