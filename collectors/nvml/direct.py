"""NVML's one-answer getters called straight into the library pynvml loaded.

For a getter such as ``nvmlDeviceGetPowerUsage(device, &milliwatts)``,
pynvml's wrapper (nvidia-ml-py) makes a new ctypes out-value, looks the
function up, calls it, checks the code and reads the value back: about half
of a GPU's read on a cold tick, measured over the C stand-in of
libnvidia-ml.so.1 in ``tests/fakes``. A :class:`DirectCall` is made once per
GPU and field, after pynvml's wrapper has answered for it once: the function
pynvml loaded, the arguments converted as the wrapper converts them, and one
out-value, so a read is the C call and the value.

Only the getters in :data:`GETTERS` (each checked against the installed
pynvml by a test: same C function, same argument and out types) and only
with the real binding (a module with ``nvmlLib``, the library it loaded). A
call that does not answer 0 returns None: :class:`~.query.Query` then asks
again through pynvml's wrapper, which turns the code into its error and the
reason.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any


class Utilization(ctypes.Structure):
    """nvml.h nvmlUtilization_t; read as pynvml's ``c_nvmlUtilization_t`` is (``.gpu``, ``.memory``)."""

    _fields_ = (("gpu", ctypes.c_uint), ("memory", ctypes.c_uint))


class Memory(ctypes.Structure):
    """nvml.h nvmlMemory_t (v1, what pynvml's ``nvmlDeviceGetMemoryInfo(handle)`` asks for)."""

    _fields_ = (("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong))


GETTERS: dict[str, tuple[type[ctypes.Structure] | type[ctypes.c_uint] | type[ctypes.c_ulonglong], int]] = {
    "nvmlDeviceGetUtilizationRates": (Utilization, 0),
    "nvmlDeviceGetMemoryInfo": (Memory, 0),
    "nvmlDeviceGetPowerUsage": (ctypes.c_uint, 0),
    "nvmlDeviceGetEnforcedPowerLimit": (ctypes.c_uint, 0),
    "nvmlDeviceGetTemperature": (ctypes.c_uint, 1),
    "nvmlDeviceGetClockInfo": (ctypes.c_uint, 1),
    "nvmlDeviceGetTotalEnergyConsumption": (ctypes.c_ulonglong, 0),
    "nvmlDeviceGetPcieThroughput": (ctypes.c_uint, 1),
    "nvmlDeviceGetTotalEccErrors": (ctypes.c_ulonglong, 2),
    "nvmlDeviceGetCurrentClocksEventReasons": (ctypes.c_ulonglong, 0),
    "nvmlDeviceGetCurrentClocksThrottleReasons": (ctypes.c_ulonglong, 0),
}
"""C function -> (its out type, how many enum arguments come between the device and the out pointer)."""


class DirectCall:
    """One getter of one GPU with fixed arguments, its out-value made once."""

    __slots__ = ("_c_args", "_fn", "_out", "args")

    def __init__(self, fn: Callable[..., int], args: tuple[object, ...], enums: tuple[int, ...],
                 out: ctypes.Structure | ctypes.c_uint | ctypes.c_ulonglong) -> None:
        self._fn = fn
        self.args = args
        """The arguments as the caller passes them to pynvml's wrapper (compared on every call)."""
        self._out = out
        # As pynvml's wrappers pass them: the device handle, each enum as a c_uint, the out-value by reference.
        self._c_args = (args[0], *map(ctypes.c_uint, enums), ctypes.byref(out))

    def __call__(self) -> Any:  # noqa: ANN401  a structure read by field, as pynvml's
        """The answer as pynvml's wrapper gives it (an int, or the structure), or None if the code was not 0.

        The structure is the one out-value, overwritten by the next call: read it before calling again.
        """
        if self._fn(*self._c_args) != 0:
            return None
        out = self._out
        return out if isinstance(out, ctypes.Structure) else out.value

    @staticmethod
    def make(nvml: object, name: str, args: tuple[object, ...]) -> DirectCall | None:
        """The direct call for getter ``name`` with ``args`` (device first), or None where there is none:
        not one of :data:`GETTERS`, not the real binding, an argument that is not an int."""
        spec = GETTERS.get(name)
        lib = getattr(nvml, "nvmlLib", None)
        if spec is None or lib is None or not args:
            return None
        out_type, count = spec
        enums = tuple(a for a in args[1:] if isinstance(a, int))
        if len(args) != 1 + count or len(enums) != count:
            return None
        fn = getattr(lib, name, None)
        if fn is None:
            return None
        return DirectCall(fn, args, enums, out_type())
