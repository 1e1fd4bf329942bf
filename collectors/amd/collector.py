"""Every AMD GPU of this machine through the amdgpu driver's sysfs and DRM fdinfo (no ROCm needed).

:class:`AmdCollector` finds the cards once (``$GPULENS_SYSFS_ROOT``/sys/class/drm,
default ``/``) and, on each :meth:`~AmdCollector.read`, returns an
:class:`AmdReading`: one :class:`~gpulens.core.model.GpuSample` per card,
``vendor="amd"``, numbered from ``first_index`` (the sampler passes the
number of NVIDIA GPUs, so a mixed node's indices stay unique). It never
raises: no amdgpu card gives an empty list and the reason under
``unavailable["gpus"]``; a field one card cannot report is None with the
reason in that GPU's ``unavailable``. ROCm's ``amdsmi``, when importable,
fills ECC, XGMI and throttle status where the sysfs files have none.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from gpulens.collectors.amd.amdsmi_backend import AmdSmi, SmiFigures
from gpulens.collectors.amd.cards import Card, find_cards
from gpulens.collectors.amd.fdinfo import CardProcesses, DrmClients
from gpulens.collectors.amd.reader import CardReader
from gpulens.collectors.amd.sysfs import root_from_env
from gpulens.core.model import GpuSample

_READ_ERRORS = (OSError, ValueError, LookupError, ArithmeticError, TypeError, AttributeError)
"""What reading and parsing one card's sysfs or a process's fdinfo can still raise past the readers'
own handling (a file that changed shape under us; amdsmi answering another shape than its docs say): a reason for that card or list, not a lost sample."""

FULL_RESCAN_S = 30.0
"""Seconds between listings of every process's descriptors (graphics clients that never open /dev/kfd)."""


@dataclass(frozen=True, slots=True)
class AmdReading:
    """The AMD GPUs read, and why there are none if there are none (``{"gpus": reason}``)."""

    gpus: tuple[GpuSample, ...]
    unavailable: Mapping[str, str] = field(default_factory=dict)


class AmdCollector:
    """Reads every amdgpu card under ``root`` (None: ``$GPULENS_SYSFS_ROOT`` or ``/``).

    Args:
        amdsmi: the amdsmi module (a test double in tests); None imports it when
            ``use_amdsmi``, False never uses it.
        pcie_background: read ``pcie_bw`` on reader threads (it blocks a second per read);
            False reads it in :meth:`read` (tests: a fixture file does not block).
        rescan_s: how often the KFD's compute processes' descriptors are listed to find new GPU
            clients (every process's: at most every :data:`FULL_RESCAN_S`, or ``rescan_s`` if longer).
    """

    def __init__(self, root: Path | str | None = None, *, amdsmi: ModuleType | None = None,
                 use_amdsmi: bool = True, pcie_background: bool = True, rescan_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.root = Path(root) if root is not None else root_from_env()
        self._readers: list[CardReader] = []
        self._clients: DrmClients | None = None
        self._smi: AmdSmi | None = None
        cards, self._why = find_cards(self.root)
        if not cards:
            return
        self._readers = [CardReader(c, pcie_background=pcie_background, clock=clock) for c in cards]
        nodes = {node: c.name for c in cards for node in c.nodes}
        self._clients = DrmClients(self.root / "proc", nodes, rescan_s=rescan_s, clock=clock,
                                   full_rescan_s=max(rescan_s, FULL_RESCAN_S),
                                   kfd=self.root / "sys" / "class" / "kfd" / "kfd" / "proc")
        if use_amdsmi:
            self._smi = AmdSmi(amdsmi)

    @property
    def cards(self) -> tuple[Card, ...]:
        """The cards found when the collector opened (partitions after their GPU)."""
        return tuple(r.card for r in self._readers)

    def read(self, first_index: int = 0) -> AmdReading:
        """Read every card now; GPU indices start at ``first_index``. Never raises."""
        if self._why is not None:
            return AmdReading((), {"gpus": self._why})
        procs: dict[str, CardProcesses] = {}
        extra: dict[str, str] = {}
        if self._clients is not None:
            try:
                procs = self._clients.read()
            except _READ_ERRORS as err:  # a failed fdinfo scan must not hide the GPUs
                extra["processes"] = f"internal error reading DRM fdinfo: {type(err).__name__}: {err}"
        unlisted = self._clients.unlisted() if self._clients is not None else None
        indices = {r.card.name: first_index + i for i, r in enumerate(self._readers)}
        out = []
        for i, reader in enumerate(self._readers):
            card = reader.card
            smi: SmiFigures | None = None
            notes = dict(extra)
            if self._smi is not None and card.partition == 0:
                smi = self._smi.read(card.pci_slot)
                notes.update({f"amdsmi.{k}": v for k, v in smi.unavailable.items() if k != "amdsmi"})
            found = procs.get(card.name)
            if unlisted is not None and not found:
                notes["processes"] = str(unlisted)  # the sample's unavailable map: words
            try:
                g = reader.read(first_index + i, found, smi, indices.get(card.parent), notes)
            except _READ_ERRORS as err:  # one card's failure must not take the other GPUs down
                g = GpuSample(first_index + i, card.label, "", vendor="amd",
                              unavailable={"gpu": f"internal error reading GPU: {type(err).__name__}: {err}"})
            out.append(g)
        why = self._smi.why if self._smi is not None else "amdsmi not used"
        return AmdReading(tuple(out), {"amdsmi": why} if why else {})

    def close(self) -> None:
        """Stop reader threads and shut amdsmi down; safe to call twice."""
        for reader in self._readers:
            with contextlib.suppress(Exception):
                reader.close()
        self._readers = []
        if self._clients is not None:
            self._clients.close()
            self._clients = None
        if self._smi is not None:
            self._smi.close()
            self._smi = None
        if self._why is None:
            self._why = "AMD collector closed"

    def __enter__(self) -> AmdCollector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

