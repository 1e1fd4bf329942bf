"""Which DRM cards are AMD GPUs, and which are compute partitions of one (MI300-class CPX/DPX/QPX).

A card is ``/sys/class/drm/cardN``; its ``device`` is the PCI device
(``vendor`` 0x1002, ``uevent`` with ``DRIVER=amdgpu`` and ``PCI_SLOT_NAME``)
or, for partitions 1..n-1 of a partitioned GPU, a platform device the driver
registers right after the GPU (amdxcp's ``amdgpu_xcp_N``: ``uevent`` says
``MODALIAS=platform:amdgpu_xcp...``). Those cards have no sysfs counters of
their own; gpulens gives each to the PCI card before it, and keeps as many as
the GPU's ``current_compute_partition`` mode makes (the driver registers
render nodes for every possible partition; the ones beyond the mode are unused).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from gpulens.collectors.amd.names import AMD_VENDOR, PARTITIONS, gpu_name
from gpulens.collectors.amd.sysfs import key_values, listdir, natural, read_int, read_text

_CARD = re.compile(r"^card[0-9]+$")
MAX_CARDS = 256


@dataclass(frozen=True, slots=True)
class Card:
    """One AMD GPU, or one compute partition of one, as the driver exposes it."""

    name: str
    """``card1``."""
    device: Path
    """``.../class/drm/card1/device``: where its sysfs files are."""
    nodes: tuple[str, ...]
    """Its device nodes (``card1``, ``renderD128``): how a process's descriptor names it."""
    pci_slot: str
    """``0000:03:00.0`` (a partition's is its GPU's)."""
    device_id: int | None
    gpu_name: str
    unique_id: str | None
    partition: int = 0
    """0: the PCI device itself (the whole GPU, or its first partition); k: the k-th partition card."""
    partitions: int = 1
    """How many partitions the GPU's mode makes (1: not partitioned)."""
    mode: str = ""
    """``current_compute_partition`` (``SPX``, ``CPX``, ...) where the driver has it."""
    parent: str = ""
    """The PCI card a partition card belongs to ("" for the PCI card)."""

    @property
    def label(self) -> str:
        """The name shown: ``AMD Instinct MI300X`` or ``AMD Instinct MI300X [CPX 3/8]``."""
        if self.partitions <= 1:
            return self.gpu_name
        return f"{self.gpu_name} [{self.mode} {self.partition}/{self.partitions}]"


def _nodes(card: str, device: Path) -> tuple[str, ...]:
    found = [n for n in listdir(device / "drm") if n.startswith(("card", "renderD"))]
    return tuple(found) if card in found else (card, *found)


def _pci_card(name: str, device: Path, uevent: dict[str, str]) -> Card | None:
    vendor, _ = read_int(device / "vendor", base=16, hi=0xFFFF)
    driver = uevent.get("DRIVER")
    if (driver is not None and driver != "amdgpu") or (driver is None and vendor != AMD_VENDOR):
        return None
    if vendor is not None and vendor != AMD_VENDOR:
        return None
    device_id, _ = read_int(device / "device", base=16, hi=0xFFFF)
    unique, _ = read_text(device / "unique_id")
    if unique is not None and (not unique or len(unique) > 32 or not all(c in "0123456789abcdefABCDEF" for c in unique)):
        unique = None
    mode, _ = read_text(device / "current_compute_partition")
    mode = (mode or "").upper()
    return Card(name=name, device=device, nodes=_nodes(name, device),
                pci_slot=uevent.get("PCI_SLOT_NAME", ""), device_id=device_id, gpu_name=gpu_name(device_id),
                unique_id=unique.lower() if unique else None, mode=mode if mode in PARTITIONS else "")


def find_cards(root: Path) -> tuple[list[Card], str | None]:
    """The AMD cards under ``root``/sys/class/drm (partitions after their GPU), or [] and why."""
    drm = root / "sys" / "class" / "drm"
    names = sorted((n for n in listdir(drm) if _CARD.match(n)), key=natural)[:MAX_CARDS]
    if not names:
        return [], f"no DRM cards under {drm}"
    cards: list[Card] = []
    gpu: Card | None = None
    taken = 0
    for name in names:
        device = drm / name / "device"
        text, _ = read_text(device / "uevent")
        uevent = key_values(text or "")
        if uevent.get("MODALIAS", "").startswith("platform:amdgpu_xcp"):
            if gpu is None or taken + 1 >= PARTITIONS.get(gpu.mode, 1):
                continue  # a partition node the GPU's mode leaves unused
            taken += 1
            cards.append(Card(name=name, device=device, nodes=_nodes(name, device), pci_slot=gpu.pci_slot,
                              device_id=gpu.device_id, gpu_name=gpu.gpu_name, unique_id=gpu.unique_id,
                              partition=taken, mode=gpu.mode, parent=gpu.name))
            continue
        card = _pci_card(name, device, uevent)
        gpu = card
        taken = 0
        if card is not None:
            cards.append(card)
    if not cards:
        return [], f"no amdgpu card among {len(names)} DRM cards under {drm}"
    counts: dict[str, int] = {}
    for c in cards:
        key = c.parent or c.name
        counts[key] = counts.get(key, 0) + 1
    return [_with_count(c, counts[c.parent or c.name]) for c in cards], None


def _with_count(card: Card, n: int) -> Card:
    return card if n <= 1 else replace(card, partitions=n)


def hwmon_dir(device: Path) -> Path | None:
    """``device/hwmon/hwmonN`` (the first), or None."""
    found = [n for n in listdir(device / "hwmon") if n.startswith("hwmon")]
    return device / "hwmon" / sorted(found, key=natural)[0] if found else None

