"""The NVML queries of a GPU's read that both read paths share: the one-answer ones as a table.

Each :class:`Scalar` is one NVML call: the GpuSample fields it fills (for
:class:`~.query.Query`'s reasons), the pynvml function(s), its constant
arguments, and its answer's layout in nvml.h as a :mod:`struct` format. The
pynvml path (``GpuDevice._read``) calls each through Query; the batched path
(``collectors.nvml.fastread``) makes them all in one crossing and reads the
answers back with the formats. Both give :meth:`Scalar.flat` values, in
:data:`SCALARS`' order, to ``GpuDevice.sample``.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

from gpulens.collectors.nvml.query import NOT_FOUND

# Newest call first; the older names serve drivers (or pynvml) that lack it.
CLOCK_REASONS_FNS = ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")
COMPUTE = ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses_v2")
GRAPHICS = ("nvmlDeviceGetGraphicsRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses_v2")
PROC_UTIL = ("processes.sm_util_percent", "processes.mem_util_percent")
NO_SAMPLES = frozenset({NOT_FOUND, 0})
"""Process utilization errors that mean "no sample since then", not a failure."""
MAX_PROCESSES = 4096


@dataclass(frozen=True, slots=True)
class Scalar:
    """One NVML call with a fixed-size answer."""

    fields: str | tuple[str, ...]
    fn: str | tuple[str, ...]
    args: tuple[tuple[str, int], ...] = ()
    """Constant arguments after the device handle: (pynvml's name, nvml.h's value)."""
    layout: str = "I"
    """The answer in nvml.h, as a struct format (standard sizes)."""
    parts: tuple[str, ...] = ()
    """For a structure answer: the binding's field names, in ``layout``'s order."""

    @property
    def width(self) -> int:
        return max(len(self.parts), 1)

    def constants(self, nvml: ModuleType) -> tuple[int, ...]:
        """The constant arguments as this binding names them (nvml.h's value where it does not)."""
        return tuple(int(getattr(nvml, name, value)) for name, value in self.args)

    def flat(self, value: Any) -> tuple[Any, ...]:  # noqa: ANN401  pynvml is untyped: its structures are read by field
        """A pynvml answer as flat values (a structure by :attr:`parts`); None: width Nones."""
        if value is None:
            return (None,) * self.width
        if self.parts:
            return tuple(getattr(value, part) for part in self.parts)
        return (value,)


def pairs(procs: Any) -> list[tuple[int, int | None]]:  # noqa: ANN401  pynvml's process objects
    """(pid, bytes used or None) of each process pynvml listed (None: the list was not read)."""
    return [(int(p.pid), p.usedGpuMemory) for p in procs or ()]


def util_samples(samples: Any) -> list[tuple[int, int, int, int]]:  # noqa: ANN401  pynvml's samples
    """(pid, timestamp in us, SM %, memory %) of each per-process utilization sample pynvml read."""
    return [(int(s.pid), int(s.timeStamp), s.smUtil, s.memUtil) for s in samples or ()]


SCALARS: tuple[Scalar, ...] = (
    Scalar(("utilization_percent", "memory_utilization_percent"), "nvmlDeviceGetUtilizationRates",
           layout="II", parts=("gpu", "memory")),
    Scalar(("mem_used_bytes", "mem_total_bytes"), "nvmlDeviceGetMemoryInfo",
           layout="QQQ", parts=("total", "free", "used")),
    Scalar("power_w", "nvmlDeviceGetPowerUsage"),
    Scalar("power_limit_w", "nvmlDeviceGetEnforcedPowerLimit"),
    Scalar("temperature_c", "nvmlDeviceGetTemperature", (("NVML_TEMPERATURE_GPU", 0),)),
    Scalar("sm_clock_mhz", "nvmlDeviceGetClockInfo", (("NVML_CLOCK_SM", 1),)),
    Scalar("mem_clock_mhz", "nvmlDeviceGetClockInfo", (("NVML_CLOCK_MEM", 2),)),
    Scalar("energy_joules", "nvmlDeviceGetTotalEnergyConsumption", layout="Q"),  # mJ since the driver loaded
    Scalar("pcie_rx_bytes_per_s", "nvmlDeviceGetPcieThroughput", (("NVML_PCIE_UTIL_RX_BYTES", 1),)),
    Scalar("pcie_tx_bytes_per_s", "nvmlDeviceGetPcieThroughput", (("NVML_PCIE_UTIL_TX_BYTES", 0),)),
    Scalar("ecc_corrected", "nvmlDeviceGetTotalEccErrors",
           (("NVML_MEMORY_ERROR_TYPE_CORRECTED", 0), ("NVML_VOLATILE_ECC", 0)), layout="Q"),
    Scalar("ecc_uncorrected", "nvmlDeviceGetTotalEccErrors",
           (("NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1), ("NVML_VOLATILE_ECC", 0)), layout="Q"),
    Scalar("throttle_reasons", CLOCK_REASONS_FNS, layout="Q"),
)
"""In the order ``GpuDevice.sample`` unpacks their flat values."""
