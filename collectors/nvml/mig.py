"""One GPU's MIG (Multi-Instance GPU) layout: its MIG mode and the UUIDs of its MIG devices.

The kubelet hands out MIG devices by their UUIDs (``MIG-…``): NVIDIA's device
plugin names them under ``nvidia.com/mig-<profile>`` (its "mixed" strategy)
or ``nvidia.com/gpu`` (its "single" strategy). Which GPU a MIG device is part
of is known only here, so ``collectors.kubelet.attach`` gets the map from
:class:`MigLayout` through ``GpuReading.mig_parents``.

Cost: the mode is one NVML call per read of the GPU; the MIG devices (at most
:data:`MAX_MIG_DEVICES` slots, 7 on an A100 or H100) are listed when the GPU
opens, when its mode changes, after a listing that failed, and otherwise at
most every :data:`RELIST_S` seconds, since instances are created and destroyed
while the mode stays on (``nvidia-smi mig -cgi/-dgi``, NVIDIA's mig-manager).

Errors: a GPU without MIG (NOT_SUPPORTED) or a driver or pynvml without the
calls is no MIG GPU, said nowhere and not asked again; NOT_FOUND (or
INVALID_ARGUMENT) for a slot is an empty slot, skipped; any other error keeps
the sample: it is said in the note (``GpuSample.unavailable["mig"]``). A lost
GPU raises :class:`~.query.GpuLost`, as every other call does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from gpulens.collectors.nvml.query import (
    FUNCTION_NOT_FOUND,
    GPU_IS_LOST,
    NO_PERMISSION,
    NOT_FOUND,
    NOT_SUPPORTED,
    GpuLost,
    describe,
    error_code,
)

MAX_MIG_DEVICES = 16
"""Slots looked at on one GPU (NVML's MIG device count is 7 on an A100 or H100)."""
RELIST_S = 60.0
"""A GPU in MIG mode has its MIG devices listed again at most this often when nothing else says to."""
MAX_UUID = 96
"""Characters of a MIG device UUID kept (``MIG-`` and a 36-character UUID; older drivers' ``MIG-GPU-<uuid>/<gi>/<ci>``)."""
MIG_ENABLE = 1
"""``NVML_DEVICE_MIG_ENABLE``."""
INVALID_ARGUMENT = 2
_NO_MIG = frozenset({NOT_SUPPORTED, FUNCTION_NOT_FOUND})
_EMPTY_SLOT = frozenset({NOT_FOUND, INVALID_ARGUMENT})
GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class MigDevice:
    """One MIG device of a GPU (None: NVML did not say)."""

    uuid: str
    slot: int
    gpu_instance: int | None = None
    compute_instance: int | None = None
    mem_total_bytes: int | None = None

    def text(self) -> str:
        """``MIG-… (GPU instance 1, compute instance 0, 9.8 GiB)``."""
        parts = [f"GPU instance {self.gpu_instance}" if self.gpu_instance is not None else "",
                 f"compute instance {self.compute_instance}" if self.compute_instance is not None else "",
                 f"{self.mem_total_bytes / GIB:.1f} GiB" if self.mem_total_bytes is not None else ""]
        shown = ", ".join(p for p in parts if p)
        return f"{self.uuid} ({shown})" if shown else self.uuid


class _Failed(Exception):
    """An NVML call failed with ``code``; ``reason`` says why in words."""

    def __init__(self, code: int | None, reason: str) -> None:
        super().__init__(reason)
        self.code, self.reason = code, reason


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class MigLayout:
    """The MIG mode and MIG devices of one GPU, kept between reads; never raises but :class:`GpuLost`."""

    def __init__(self, nvml: ModuleType, handle: object, clock: Callable[[], float]) -> None:
        self._nvml, self._handle, self._clock = nvml, handle, clock
        self.devices: tuple[MigDevice, ...] = ()
        """The MIG devices as last listed (empty when the mode is off or unknown)."""
        self.mode: int | None = None
        """Current MIG mode (1 on, 0 off); None: not read, or no MIG on this GPU."""
        self.pending: int | None = None
        """The mode after the next GPU reset."""
        self._capable = True
        self._sticky: str | None = None
        """A failure that will not change while the process runs (no permission), said on every read."""
        self._listed_at: float | None = None
        self._list_why: str | None = None
        mismatch = getattr(nvml, "NVMLLibraryMismatchError", None)
        self._mismatch: type[Exception] | tuple[()] = (
            mismatch if isinstance(mismatch, type) and issubclass(mismatch, Exception) else ())

    def _call(self, fn: str, *args: object) -> Any:  # noqa: ANN401  pynvml is untyped: its structures are read by field
        """``nvml.<fn>(*args)``; raises :class:`_Failed` (a missing call: FUNCTION_NOT_FOUND) or GpuLost."""
        target = getattr(self._nvml, fn, None)
        if target is None:
            raise _Failed(FUNCTION_NOT_FOUND, describe(AttributeError(fn)))
        try:
            return target(*args)
        except self._nvml.NVMLError as err:
            code = error_code(err)
            if code == GPU_IS_LOST:
                raise GpuLost(describe(err)) from err
            raise _Failed(code, describe(err)) from err
        except self._mismatch as err:  # pynvml newer than the driver
            raise _Failed(FUNCTION_NOT_FOUND, f"driver older than pynvml: {err}") from err

    def batchable(self) -> bool:
        """Whether the mode is read each time (a batched read may then read it and hand it to :meth:`read`)."""
        return self._capable and self._sticky is None

    def read(self, mode: tuple[int, int] | None = None) -> str | None:
        """Read the mode, list the MIG devices when due; the note for ``unavailable["mig"]`` (None: none).

        ``mode``: (current, pending) as nvmlDeviceGetMigMode just answered them (not asked again).

        Raises:
            GpuLost: NVML reports the GPU as lost.
        """
        if not self._capable:
            return None
        if self._sticky is not None:
            return self._sticky
        try:
            current, pending = (int(v) for v in (mode or self._call("nvmlDeviceGetMigMode", self._handle)))
        except _Failed as failed:
            if failed.code in _NO_MIG:
                self._capable = False  # a GPU without MIG, or a driver too old for it: normal, never said
                self.devices = ()
                return None
            why = f"MIG mode not read: {failed.reason}"
            if failed.code == NO_PERMISSION:
                self._sticky = why
            return why
        except (TypeError, ValueError) as err:  # not a (current, pending) pair
            return f"MIG mode not read: unexpected answer ({type(err).__name__})"
        if current != MIG_ENABLE:
            self.devices, self._listed_at, self._list_why = (), None, None
        elif (current != self.mode or self._list_why is not None or self._listed_at is None
              or self._clock() - self._listed_at >= RELIST_S):
            self.devices, self._list_why = self._list()
            self._listed_at = self._clock()
        self.mode, self.pending = current, pending
        return self._note()

    def _note(self) -> str | None:
        after = ""
        if self.pending is not None and self.pending != self.mode:
            after = f"; {'on' if self.pending == MIG_ENABLE else 'off'} after the next GPU reset (pending)"
        if self.mode != MIG_ENABLE:
            return f"MIG mode off{after}" if after else None
        n = len(self.devices)
        listed = (f"{n} MIG device{'s' if n != 1 else ''}: {', '.join(d.text() for d in self.devices)}"
                  if n else "no MIG devices")
        failed = f"; {self._list_why}" if self._list_why else ""
        return f"MIG mode on: {listed}{after}{failed}"

    def _list(self) -> tuple[tuple[MigDevice, ...], str | None]:
        """The MIG devices now, and why some could not be read (None: all were)."""
        try:
            slots = int(self._call("nvmlDeviceGetMaxMigDeviceCount", self._handle))
        except _Failed as failed:
            return (), f"MIG devices not listed: {failed.reason}"
        found: list[MigDevice] = []
        errors: list[str] = []
        for slot in range(max(0, min(slots, MAX_MIG_DEVICES))):
            try:
                mig = self._call("nvmlDeviceGetMigDeviceHandleByIndex", self._handle, slot)
            except _Failed as failed:
                if failed.code not in _EMPTY_SLOT:  # an empty slot is no error
                    errors.append(f"slot {slot}: {failed.reason}")
                continue
            try:
                uuid = _text(self._call("nvmlDeviceGetUUID", mig))[:MAX_UUID]
            except _Failed as failed:
                errors.append(f"slot {slot} UUID: {failed.reason}")
                continue
            if uuid:
                found.append(MigDevice(uuid, slot, self._number("nvmlDeviceGetGpuInstanceId", mig),
                                       self._number("nvmlDeviceGetComputeInstanceId", mig), self._memory(mig)))
        why = None
        if errors:
            why = f"{len(errors)} MIG device{'s' if len(errors) != 1 else ''} not read ({'; '.join(errors[:2])})"
        return tuple(found), why

    def _number(self, fn: str, mig: object) -> int | None:
        """An optional figure of a MIG device: None when NVML does not give it (it is shown only)."""
        try:
            return int(self._call(fn, mig))
        except (_Failed, TypeError, ValueError):
            return None

    def _memory(self, mig: object) -> int | None:
        try:
            return int(self._call("nvmlDeviceGetMemoryInfo", mig).total)
        except (_Failed, AttributeError, TypeError, ValueError):
            return None
