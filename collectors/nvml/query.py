"""The one NVML query helper: an NVML error becomes ``None`` plus a reason.

Every NVML call the GPU collector makes goes through :class:`Query`, so an
unsupported field is never reported as 0 and never raises. Errors that cannot
change while the process runs (not supported, no permission, a function the
driver lacks) are remembered per GPU and field: the call is not repeated on
later reads, but the reason is still reported with every sample. A lost GPU
aborts that GPU's read with :class:`GpuLost`; the collector reports the GPU
with the reason and goes on with the others.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from types import ModuleType
from typing import Any

from gpulens.core.errors import CollectorError

# NVML return codes (nvml.h); stable ABI values, named as pynvml names them.
NOT_SUPPORTED = 3
NO_PERMISSION = 4
NOT_FOUND = 6
DRIVER_NOT_LOADED = 9
TIMEOUT = 10
LIBRARY_NOT_FOUND = 12
FUNCTION_NOT_FOUND = 13
GPU_IS_LOST = 15

_PERMANENT = frozenset({NOT_SUPPORTED, NO_PERMISSION, FUNCTION_NOT_FOUND})

_WORDS = {
    NOT_SUPPORTED: "not supported by this GPU or driver (NVML_ERROR_NOT_SUPPORTED)",
    NO_PERMISSION: "no permission; needs root or admin rights (NVML_ERROR_NO_PERMISSION)",
    FUNCTION_NOT_FOUND: "driver too old for this query (NVML_ERROR_FUNCTION_NOT_FOUND)",
    GPU_IS_LOST: "GPU is lost: fell off the bus or needs a reset (NVML_ERROR_GPU_IS_LOST)",
    DRIVER_NOT_LOADED: "NVIDIA driver not loaded (NVML_ERROR_DRIVER_NOT_LOADED)",
    LIBRARY_NOT_FOUND: "NVML library libnvidia-ml.so.1 not found: no NVIDIA driver "
    "installed (NVML_ERROR_LIBRARY_NOT_FOUND)",
}

# Clock event ("throttle") reason bits, nvml.h nvmlClocksEventReason*; names
# follow nvidia-smi -q's "Clocks Event Reasons" in snake case.
CLOCK_REASONS: tuple[tuple[int, str], ...] = (
    (0x001, "gpu_idle"),
    (0x002, "applications_clocks_setting"),
    (0x004, "sw_power_cap"),
    (0x008, "hw_slowdown"),
    (0x010, "sync_boost"),
    (0x020, "sw_thermal_slowdown"),
    (0x040, "hw_thermal_slowdown"),
    (0x080, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)


class GpuLost(CollectorError):
    """Raised inside a GPU's read when NVML says the GPU is lost."""

    title = "GPU lost"

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def error_code(err: BaseException) -> int | None:
    """The NVML return code carried by a pynvml ``NVMLError`` (its ``value``)."""
    value = getattr(err, "value", None)
    return value if isinstance(value, int) else None


def describe(err: BaseException) -> str:
    """A reason a user can act on for an NVML error (or a missing binding)."""
    if isinstance(err, AttributeError):
        return f"this pynvml lacks the call ({err}); upgrade nvidia-ml-py"
    code = error_code(err)
    if code in _WORDS:
        return _WORDS[code]
    return f"NVML error {code}: {err}"


BINDING_ERRORS: tuple[type[Exception], ...] = (
    TypeError, AttributeError, ValueError, LookupError, OSError, ctypes.ArgumentError)
"""What a binding older or newer than this code raises (a missing name, another signature,
a structure without a field), besides its NVMLError: one GPU's part fails, not the collector."""


def describe_code(nvml: ModuleType, code: int) -> str:
    """A reason for a bare return code (field values and GPM metrics carry one each)."""
    if code in _WORDS:
        return _WORDS[code]
    error = getattr(nvml, "NVMLError", None)
    if not isinstance(error, type) or not issubclass(error, Exception):
        return f"NVML error {code}"
    try:
        return describe(error(code))
    except (error, *BINDING_ERRORS):  # a binding that cannot build or name the error still yields a reason
        return f"NVML error {code}"


@functools.lru_cache(maxsize=256)
def decode_clock_reasons(mask: int) -> tuple[str, ...]:
    """Names of the set bits of a clocks event reasons mask; unknown bits as hex (remembered per mask)."""
    names = [name for bit, name in CLOCK_REASONS if mask & bit]
    known = 0
    for bit, _ in CLOCK_REASONS:
        known |= bit
    rest = mask & ~known
    if rest:
        names.append(f"other_0x{rest:x}")
    return tuple(names)


class Query:
    """Calls NVML for one GPU and records why a field is missing.

    ``reasons`` collects field -> reason for the read in progress; call
    :meth:`begin` at the start of each read. Permanent failures are kept in
    ``_sticky`` across reads so the failing call is not repeated. The name that
    answered for (fields, fn) is remembered, so later reads call it without
    looking for alternatives again (about 170 calls a read with 8 GPUs); an
    error on that path is handled as on the first call.
    """

    __slots__ = ("_mismatch", "_missing", "_ready", "_sticky", "nvml", "reasons")

    def __init__(self, nvml: ModuleType) -> None:
        self.nvml = nvml
        self.reasons: dict[str, str] = {}
        self._sticky: dict[str, str] = {}
        self._missing: dict[str, str] = {}
        """NVML calls this pynvml or driver lacks -> why; never tried again."""
        self._ready: dict[tuple[str | tuple[str, ...], str | tuple[str, ...]], str] = {}
        """(fields, fn) -> the name of the call that last answered for them (and no sticky reason since)."""
        mismatch = getattr(nvml, "NVMLLibraryMismatchError", None)
        self._mismatch: type[Exception] | tuple[()] = (
            mismatch if isinstance(mismatch, type) and issubclass(mismatch, Exception) else ())

    def begin(self) -> None:
        """Start a new read: forget the last read's reasons (sticky ones stay)."""
        self.reasons = {}

    def is_sticky(self, field: str) -> bool:
        """Whether ``field`` failed for good (its call is never made again)."""
        return field in self._sticky

    def note(self, fields: str | tuple[str, ...], reason: str, sticky: bool = False) -> None:
        """Record ``reason`` for each field (a dotted field name of GpuSample)."""
        for name in (fields,) if isinstance(fields, str) else fields:
            self.reasons[name] = reason
            if sticky:
                self._sticky[name] = reason
        if sticky and self._ready:  # a sticky field is never asked again: off the straight path
            self._ready = {k: v for k, v in self._ready.items()
                           if (k[0] if isinstance(k[0], str) else k[0][0]) not in self._sticky}

    def __call__(self, fields: str | tuple[str, ...], fn: str | tuple[str, ...],
                 *args: object) -> Any:  # noqa: ANN401  pynvml is untyped: its structures are read by field
        """``nvml.<fn>(*args)``, or None with the reason noted under ``fields``.

        Raises:
            GpuLost: NVML reports the GPU as lost.
        """
        name = self._ready.get((fields, fn))
        if name is None or name in self._missing or (target := getattr(self.nvml, name, None)) is None:
            return self.call(fields, fn, *args)[1]
        try:
            return target(*args)
        except self.nvml.NVMLError as err:
            if error_code(err) != FUNCTION_NOT_FOUND:
                self._failed(fields, err)
                return None
            self._missing[name] = describe(err)
        except self._mismatch as err:  # pynvml newer than the driver
            self._missing[name] = f"driver older than pynvml: {err}"
        return self.call(fields, fn, *args)[1]  # the next alternative, if there is one

    def _failed(self, fields: str | tuple[str, ...], err: Exception) -> None:
        """Note an NVML error (not FUNCTION_NOT_FOUND) under ``fields``; sticky if permanent.

        Raises:
            GpuLost: the error says the GPU is lost.
        """
        code = error_code(err)
        if code == GPU_IS_LOST:
            raise GpuLost(describe(err)) from err
        self.note(fields, describe(err), sticky=code in _PERMANENT)

    def call(
        self,
        fields: str | tuple[str, ...],
        fn: str | tuple[str, ...],
        *args: object,
        empty_on: frozenset[int] = frozenset(),
    ) -> tuple[bool, Any]:
        """``(True, nvml.<fn>(*args))``, or ``(False, None)`` with the reason noted.

        ``fn`` may name alternatives, newest first (``nvmlX`` then ``nvmlX_v2``):
        one this pynvml or driver lacks is dropped for good and the next is
        tried. An error whose code is in ``empty_on`` (e.g. NOT_FOUND: "no
        samples") is a success with value None. ``fields[0]`` keys the sticky
        memory.

        Raises:
            GpuLost: NVML reports the GPU as lost.
        """
        key = fields if isinstance(fields, str) else fields[0]
        if key in self._sticky:
            self.note(fields, self._sticky[key])
            return False, None
        missing = ""
        for name in (fn,) if isinstance(fn, str) else fn:
            if name in self._missing:
                missing = self._missing[name]
                continue
            target: Callable[..., Any] | None = getattr(self.nvml, name, None)
            if target is None:
                missing = self._missing[name] = describe(AttributeError(name))
                continue
            try:
                value = target(*args)
            except self.nvml.NVMLError as err:
                code = error_code(err)
                if code in empty_on:
                    return True, None
                if code != FUNCTION_NOT_FOUND:
                    self._failed(fields, err)
                    return False, None
                missing = self._missing[name] = describe(err)
            except self._mismatch as err:  # pynvml newer than the driver
                missing = self._missing[name] = f"driver older than pynvml: {err}"
            else:
                if not empty_on:  # __call__'s straight path knows no empty_on
                    self._ready[(fields, fn)] = name
                return True, value
        self.note(fields, missing or "no usable NVML call", sticky=True)
        return False, None
