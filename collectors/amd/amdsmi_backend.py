"""Optional figures through ROCm's ``amdsmi`` Python package: ECC totals, XGMI bytes, throttle status.

Used only where the driver's sysfs gives nothing for a field. Without ROCm's
``libamd_smi.so`` the package's import raises KeyError (it looks up
``ROCM_PATH`` and friends), not ImportError, so the import is guarded by
:data:`_IMPORT_ERRORS` and every call by amdsmi's own ``AmdSmiException``
plus :data:`_API_ERRORS` (another ROCm release's API): a broken or absent
amdsmi is a reason, never a crash.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any


@dataclass(frozen=True, slots=True)
class SmiFigures:
    """What amdsmi gave for one GPU (None: not given, reason in ``unavailable``)."""

    ecc: tuple[int, int] | None = None
    """(uncorrected, corrected) since the driver loaded."""
    xgmi_read_kb: int | None = None
    xgmi_write_kb: int | None = None
    indep_throttle: int | None = None
    unavailable: Mapping[str, str] = field(default_factory=dict)


_IMPORT_ERRORS = (ImportError, KeyError, OSError)
"""``import amdsmi``: no package, no ROCm paths (KeyError), or a ``libamd_smi.so`` that does not load."""
_API_ERRORS = (AttributeError, TypeError, ValueError, LookupError, OSError)
"""What a call into another ROCm release's amdsmi raises besides its own errors: a renamed or
re-signed function, a field it no longer returns, a library call that fails in ctypes."""


class _NoSmiError(Exception):
    """Stands for ``amdsmi.AmdSmiException`` in a module without it (never raised)."""


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 64 else None


def _links(value: object) -> int | None:
    if not isinstance(value, (list, tuple)):
        return None
    given = [v for v in map(_int, value) if v is not None and v != (1 << 64) - 1]
    return sum(given) if given else None


class AmdSmi:
    """The amdsmi library, opened once; :attr:`why` says why it is not used (None when it is)."""

    def __init__(self, module: ModuleType | None = None) -> None:
        self.why: str | None = None
        self._smi: Any = None
        self._handles: dict[str, Any] = {}
        try:
            smi: Any = module if module is not None else importlib.import_module("amdsmi")
        except _IMPORT_ERRORS as err:  # KeyError without ROCm, ImportError without the package
            self.why = f"amdsmi not usable: import failed ({type(err).__name__}: {err})"
            return
        own = getattr(smi, "AmdSmiException", _NoSmiError)
        self._errors: tuple[type[Exception], ...] = (
            (own, *_API_ERRORS) if isinstance(own, type) and issubclass(own, Exception) else _API_ERRORS)
        """What a call into this amdsmi may raise: its own errors, and another release's API."""
        try:
            smi.amdsmi_init()
        except self._errors as err:
            self.why = f"amdsmi not usable: amdsmi_init failed ({type(err).__name__}: {err})"
            return
        self._smi = smi
        try:
            for handle in smi.amdsmi_get_processor_handles():
                self._handles[str(smi.amdsmi_get_gpu_device_bdf(handle)).lower()] = handle
        except self._errors as err:
            self.why = f"amdsmi could not list GPUs ({type(err).__name__}: {err})"

    def read(self, bdf: str) -> SmiFigures:
        """Figures for the GPU at PCI address ``bdf`` (``0000:03:00.0``)."""
        if self.why is not None:
            return SmiFigures(unavailable={"amdsmi": self.why})
        handle = self._handles.get(bdf.lower())
        if handle is None:
            return SmiFigures(unavailable={"amdsmi": f"amdsmi does not list {bdf}"})
        why: dict[str, str] = {}
        ecc = None
        try:
            counts = self._smi.amdsmi_get_gpu_total_ecc_count(handle)
            ue, ce = _int(counts.get("uncorrectable_count")), _int(counts.get("correctable_count"))
            ecc = None if ue is None or ce is None else (ue, ce)
        except self._errors as err:
            why["ecc"] = f"amdsmi_get_gpu_total_ecc_count: {type(err).__name__}: {err}"
        metrics: Mapping[str, object] = {}
        try:
            metrics = self._smi.amdsmi_get_gpu_metrics_info(handle)
        except self._errors as err:
            why["metrics"] = f"amdsmi_get_gpu_metrics_info: {type(err).__name__}: {err}"
        throttle = _int(metrics.get("indep_throttle_status"))
        return SmiFigures(ecc=ecc, xgmi_read_kb=_links(metrics.get("xgmi_read_data_acc")),
                          xgmi_write_kb=_links(metrics.get("xgmi_write_data_acc")),
                          indep_throttle=None if throttle == (1 << 64) - 1 else throttle, unavailable=why)

    def close(self) -> None:
        """Shut the library down (safe to call twice)."""
        if self._smi is not None:
            with contextlib.suppress(Exception):  # shutting down: nobody left to tell
                self._smi.amdsmi_shut_down()
            self._smi = None
            self.why = "amdsmi closed"
