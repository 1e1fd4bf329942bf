"""TEST DOUBLE parts for tests/fakes/fake_nvml.py: pynvml's errors, constants and structs.

Errors behave as pynvml's: ``NVMLError(code)`` returns the subclass for the
code (``NVMLError(3)`` is an ``NVMLError_NotSupported``), each subclass builds
with no argument, and ``.value`` holds the code. Structs are plain objects with
the attribute names of pynvml's ctypes structs. tests/unit/collectors/test_nvml.py checks the
names and values against the installed pynvml.
"""

from __future__ import annotations

from typing import Any, ClassVar

ERROR_CODES: dict[str, int] = {
    "Uninitialized": 1, "InvalidArgument": 2, "NotSupported": 3, "NoPermission": 4,
    "AlreadyInitialized": 5, "NotFound": 6, "InsufficientSize": 7, "InsufficientPower": 8,
    "DriverNotLoaded": 9, "Timeout": 10, "IrqIssue": 11, "LibraryNotFound": 12,
    "FunctionNotFound": 13, "CorruptedInforom": 14, "GpuIsLost": 15, "ResetRequired": 16,
    "OperatingSystem": 17, "LibRmVersionMismatch": 18, "InUse": 19, "Memory": 20,
    "NoData": 21, "Unknown": 999,
}
"""pynvml's NVMLError_<Name> suffixes and their NVML_ERROR_* codes."""

_STRINGS = {1: "Uninitialized", 2: "Invalid Argument", 3: "Not Supported",
            4: "Insufficient Permissions", 6: "Not Found", 9: "Driver Not Loaded",
            10: "Timeout", 12: "NVML Shared Library Not Found", 13: "Function Not Found",
            15: "GPU is lost", 999: "Unknown Error"}


class NVMLError(Exception):
    """Fake of pynvml.NVMLError: ``NVMLError(code)`` picks the subclass."""

    _valClassMapping: ClassVar[dict[int, type[NVMLError]]] = {}
    value: int

    def __new__(cls, value: int = 999, *args: Any) -> NVMLError:
        if cls is NVMLError:
            cls = NVMLError._valClassMapping.get(value, NVMLError)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __str__(self) -> str:
        return _STRINGS.get(self.value, f"NVML Error with code {self.value}")


class NVMLLibraryMismatchError(Exception):
    """Fake of pynvml's: an unversioned call the installed driver lacks."""


def _subclass(name: str, code: int) -> type[NVMLError]:
    def new(cls: type[NVMLError], *args: Any) -> NVMLError:
        return NVMLError.__new__(cls, code)

    made = type(f"NVMLError_{name}", (NVMLError,), {"__new__": new})
    NVMLError._valClassMapping[code] = made
    return made


_CLASSES = {f"NVMLError_{n}": _subclass(n, c) for n, c in ERROR_CODES.items()}


def error_classes() -> dict[str, Any]:
    """``{"NVMLError_NotSupported": cls, ...}`` to set on a fake module."""
    return dict(_CLASSES)


def _upper(name: str) -> str:
    out = "".join("_" + ch if ch.isupper() and i else ch for i, ch in enumerate(name))
    return "NVML_ERROR_" + out.upper()


_CONSTANTS: dict[str, Any] = {
    "NVML_SUCCESS": 0,
    **{_upper(n): c for n, c in ERROR_CODES.items()},
    "NVML_TEMPERATURE_GPU": 0,
    "NVML_CLOCK_GRAPHICS": 0, "NVML_CLOCK_SM": 1, "NVML_CLOCK_MEM": 2,
    "NVML_PCIE_UTIL_TX_BYTES": 0, "NVML_PCIE_UTIL_RX_BYTES": 1,
    "NVML_MEMORY_ERROR_TYPE_CORRECTED": 0, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED": 1,
    "NVML_VOLATILE_ECC": 0, "NVML_AGGREGATE_ECC": 1,
    "NVML_FI_DEV_NVLINK_LINK_COUNT": 91,
    "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX": 138, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX": 139,
    "nvmlEventTypeXidCriticalError": 0x8, "nvmlEventTypeNone": 0,
    "nvmlClocksEventReasonGpuIdle": 0x1, "nvmlClocksEventReasonApplicationsClocksSetting": 0x2,
    "nvmlClocksEventReasonSwPowerCap": 0x4, "nvmlClocksEventReasonHwSlowdown": 0x8,
    "nvmlClocksEventReasonSyncBoost": 0x10, "nvmlClocksEventReasonSwThermalSlowdown": 0x20,
    "nvmlClocksEventReasonHwThermalSlowdown": 0x40,
    "nvmlClocksEventReasonHwPowerBrakeSlowdown": 0x80,
    "nvmlClocksEventReasonDisplayClockSetting": 0x100,
    "NVML_GPM_METRIC_SM_UTIL": 2, "NVML_GPM_METRIC_SM_OCCUPANCY": 3,
    "NVML_GPM_METRIC_DRAM_BW_UTIL": 10, "NVML_GPM_METRICS_GET_VERSION": 1,
    "NVML_GPM_SUPPORT_VERSION": 1,
    "NVML_DEVICE_MIG_DISABLE": 0, "NVML_DEVICE_MIG_ENABLE": 1,
}


def constants() -> dict[str, Any]:
    """pynvml's constants the collector uses, with pynvml's names and values."""
    return dict(_CONSTANTS)


class Utilization:
    __slots__ = ("gpu", "memory")

    def __init__(self, gpu: int, memory: int) -> None:
        self.gpu, self.memory = gpu, memory


class Memory:
    __slots__ = ("free", "total", "used")

    def __init__(self, total: int, free: int, used: int) -> None:
        self.total, self.free, self.used = total, free, used


class ProcessInfo:
    __slots__ = ("computeInstanceId", "gpuInstanceId", "pid", "usedGpuMemory")

    def __init__(self, pid: int, used: int | None) -> None:
        self.pid, self.usedGpuMemory = pid, used
        self.gpuInstanceId = self.computeInstanceId = 0xFFFFFFFF


class ProcessUtilizationSample:
    __slots__ = ("decUtil", "encUtil", "memUtil", "pid", "smUtil", "timeStamp")

    def __init__(self, pid: int, ts: int, sm: int, mem: int) -> None:
        self.pid, self.timeStamp, self.smUtil, self.memUtil = pid, ts, sm, mem
        self.encUtil = self.decUtil = 0


class EventData:
    __slots__ = ("computeInstanceId", "device", "eventData", "eventType", "gpuInstanceId")

    def __init__(self, device: Any, event_type: int, data: int) -> None:
        self.device, self.eventType, self.eventData = device, event_type, data
        self.gpuInstanceId = self.computeInstanceId = 0xFFFFFFFF


class FieldValue:
    """Fake of c_nvmlFieldValue_t. ``value`` (the c_nvmlValue_t union) is the
    object itself, which carries the union's members: one object per field
    keeps the 8-GPU benchmark cheap."""

    __slots__ = ("dVal", "fieldId", "latencyUsec", "nvmlReturn", "scopeId", "siVal", "sllVal",
                 "timestamp", "uiVal", "ulVal", "ullVal", "usVal", "valueType")

    def __init__(self, field_id: int, scope: int, ts: int) -> None:
        self.fieldId, self.scopeId, self.timestamp = field_id, scope, ts
        self.latencyUsec = self.valueType = self.nvmlReturn = 0
        self.uiVal = self.ullVal = 0

    @property
    def value(self) -> FieldValue:
        return self


class GpmSupport:
    __slots__ = ("isSupportedDevice", "version")

    def __init__(self, supported: int) -> None:
        self.version, self.isSupportedDevice = 1, supported


class GpmSample:
    """Opaque in pynvml; the fake remembers which GPU and when."""

    __slots__ = ("gpu", "time_us")

    def __init__(self) -> None:
        self.gpu: Any = None
        self.time_us = 0


class GpmMetric:
    __slots__ = ("metricId", "metricInfo", "nvmlReturn", "value")

    def __init__(self) -> None:
        self.metricId = self.nvmlReturn = 0
        self.value = 0.0
        self.metricInfo = None


class GpmMetricsGet:
    """Fake of c_nvmlGpmMetricsGet_t (pynvml's has 477 metric slots; 16 suffice here)."""

    __slots__ = ("metrics", "numMetrics", "sample1", "sample2", "version")

    def __init__(self) -> None:
        self.version = self.numMetrics = 0
        self.sample1: Any = None
        self.sample2: Any = None
        self.metrics = [GpmMetric() for _ in range(16)]
