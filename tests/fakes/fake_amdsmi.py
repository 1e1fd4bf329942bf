"""A test double of ROCm's ``amdsmi`` Python module: the few calls gpulens makes, with settable answers.

Real amdsmi needs ROCm's libamd_smi.so; without it ``import amdsmi`` raises
KeyError (it looks ROCm's paths up in a dict). :data:`BROKEN_INIT` is a package
body that fails the same way, for a test that puts it on ``sys.path``.
"""

from __future__ import annotations

import types
from typing import Any


class AmdSmiException(Exception):
    """amdsmi's error type."""


def make_fake_amdsmi(gpus: dict[str, dict[str, Any]] | None = None, init_error: Exception | None = None) -> Any:
    """A module-like double: ``gpus`` maps a PCI address to ``{"ecc": {...}, "metrics": {...}}``."""
    mod: Any = types.ModuleType("amdsmi")
    state: dict[str, Any] = {"inited": False, "shut": 0, "gpus": dict(gpus or {})}
    mod.state = state
    mod.AmdSmiException = AmdSmiException

    def amdsmi_init(*_args: object) -> None:
        if init_error is not None:
            raise init_error
        state["inited"] = True

    def amdsmi_shut_down() -> None:
        state["shut"] += 1

    def amdsmi_get_processor_handles() -> list[str]:
        return list(state["gpus"])

    def amdsmi_get_gpu_device_bdf(handle: str) -> str:
        return handle

    def amdsmi_get_gpu_total_ecc_count(handle: str) -> dict[str, Any]:
        ecc = state["gpus"][handle].get("ecc")
        if ecc is None:
            raise AmdSmiException("AMDSMI_STATUS_NOT_SUPPORTED")
        return dict(ecc)

    def amdsmi_get_gpu_metrics_info(handle: str) -> dict[str, Any]:
        return dict(state["gpus"][handle].get("metrics", {}))

    for fn in (amdsmi_init, amdsmi_shut_down, amdsmi_get_processor_handles, amdsmi_get_gpu_device_bdf,
               amdsmi_get_gpu_total_ecc_count, amdsmi_get_gpu_metrics_info):
        setattr(mod, fn.__name__, fn)
    return mod


BROKEN_INIT = 'raise KeyError("ROCM_PATH")  # what amdsmi/__init__ does, in effect, without ROCm\n'
"""The body of an ``amdsmi/__init__.py`` whose import fails as the real one does without ROCm."""
