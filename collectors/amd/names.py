"""AMD GPU names from PCI device ids, and the compute partition modes of MI300-class GPUs."""

from __future__ import annotations

from collections.abc import Mapping

AMD_VENDOR = 0x1002
"""PCI vendor id of AMD/ATI (``device/vendor`` reads ``0x1002``)."""
NAMES: Mapping[int, str] = {
    0x738C: "AMD Instinct MI100",
    0x740F: "AMD Instinct MI210",
    0x7408: "AMD Instinct MI250X",
    0x740C: "AMD Instinct MI250X/MI250",
    0x74A0: "AMD Instinct MI300A",
    0x74A1: "AMD Instinct MI300X",
    0x74A5: "AMD Instinct MI325X",
    0x744C: "AMD Radeon RX 7900 XT/XTX",
}
"""The parts gpulens' fixtures and docs name (pci.ids has the rest); others read ``AMD GPU 0x....``."""
PRIMARY_DIE_POWER = frozenset({0x7408, 0x740C})
"""MI250/MI250X: two dies, two GPUs; the driver reports the package's power on the first die only
(aldebaran_ppt.c: "Valid power data is available only from primary die") and 0 on the second."""
PARTITIONS: Mapping[str, int] = {"SPX": 1, "DPX": 2, "TPX": 3, "QPX": 4, "CPX": 8}
"""``current_compute_partition`` -> most partitions that mode makes (CPX: one per XCD, 8 on MI300X)."""


def gpu_name(device_id: int | None) -> str:
    """The product name for a PCI device id: ``AMD Instinct MI300X``, else ``AMD GPU 0x74b5``."""
    if device_id is None:
        return "AMD GPU"
    return NAMES.get(device_id, f"AMD GPU {device_id:#06x}")


def uuid_of(unique_id: str | None, partition: int = 0) -> str:
    """``AMD-<unique_id>`` (the driver's 64-bit serial in hex), ``-p<k>`` for partition k > 0; "" when unknown."""
    if not unique_id:
        return ""
    return f"AMD-{unique_id}" + (f"-p{partition}" if partition else "")
