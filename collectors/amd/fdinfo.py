"""Processes on AMD GPUs from DRM fdinfo (Documentation/gpu/drm-usage-stats.rst), as nvtop reads them.

A process that opened a GPU's render (or primary) node holds a file
descriptor whose ``/proc/PID/fdinfo/FD`` has ``drm-driver: amdgpu``, a
``drm-client-id``, the memory it holds per region (``drm-memory-vram: N KiB``,
or ``drm-resident-vram`` on kernels that print the common memory keys) and the
nanoseconds each engine class was busy for it (``drm-engine-gfx``,
``drm-engine-compute``; ``drm-engine-capacity-<engine>`` when one key covers
several engines). Several descriptors can share one client (dup, fork): each
``drm-client-id`` is counted once per process and device.

Finding the descriptors means reading processes' ``fd`` links. Every process
is listed when the collector opens and every ``full_rescan_s`` (30 s); every
``rescan_s`` (5 s) only the compute processes the KFD driver lists under
``/sys/class/kfd/kfd/proc`` (every ROCm/HIP process opens /dev/kfd) and the
ones already known are. In between only the descriptors already found are re-read (their fdinfo
files kept open, re-read from offset 0). Utilization is
the busy time (gfx + compute, each divided by its capacity) over the wall
time since the previous read, capped at 100 %.
"""

from __future__ import annotations

import enum
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from gpulens.collectors.amd.sysfs import OpenFiles, listdir
from gpulens.core.model import GpuProcess
from gpulens.core.reasons import Reason, ReasonText

ENGINES = ("gfx", "compute")
"""Engine classes whose busy time counts as a process's GPU utilization."""
MAX_FDINFO = 8192
_UNITS = {"": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3}
_VRAM_KEYS = ("\ndrm-memory-vram:", "\ndrm-resident-vram:", "\ndrm-total-vram:")
_ENGINE_KEYS = tuple((f"\ndrm-engine-{e}:", f"\ndrm-engine-capacity-{e}:") for e in ENGINES)
FIRST_SEEN = "first read of this process's GPU clients: its busy time needs a second read"


@dataclass(frozen=True, slots=True)
class Client:
    """One DRM client (one open of a device) as its fdinfo describes it."""

    client_id: str
    vram_bytes: int | None
    busy_ns: float | None
    """gfx + compute busy nanoseconds since the client opened, each engine over its capacity."""


def _size(text: str) -> int | None:
    number, _, unit = text.strip().partition(" ")
    scale = _UNITS.get(unit.strip())
    if scale is None or not (number.isascii() and number.isdigit()) or len(number) > 19:
        return None
    return int(number) * scale


def _value(text: str, key: str) -> str | None:
    """The value of the last ``key:`` line of ``text`` (which starts with a newline), blanks and tabs
    around it stripped; None when no line starts with ``key:``."""
    at = text.rfind(key)
    if at < 0:
        return None
    start = at + len(key)
    end = text.find("\n", start)
    return text[start:end if end >= 0 else len(text)].strip(" \t")


def parse_fdinfo(text: str) -> Client | None:
    """The client an amdgpu fdinfo describes; None for another driver or without a client id.

    Only the keys used are looked up (the last line of each, as a ``key: value`` map keeps it):
    an fdinfo has 20-40 lines and a read parses one per client."""
    text = "\n" + text
    client_id = _value(text, "\ndrm-client-id:")
    if not client_id or _value(text, "\ndrm-driver:") != "amdgpu":
        return None
    vram = None
    for key in _VRAM_KEYS:
        raw = _value(text, key)
        if raw is not None and (vram := _size(raw)) is not None:
            break
    busy: float | None = None
    capacities = "\ndrm-engine-capacity-" in text
    for key, capacity_key in _ENGINE_KEYS:
        raw = _value(text, key)
        if raw is None:
            continue
        number, _, unit = raw.partition(" ")
        capacity = _value(text, capacity_key) if capacities else None
        if capacity is None:
            capacity = "1"
        if (unit.strip() != "ns" or not (number.isascii() and number.isdigit())
                or not (capacity.isascii() and capacity.isdigit()) or int(capacity) < 1):
            continue
        busy = (busy or 0.0) + int(number) / int(capacity)
    return Client(client_id, vram, busy)


class UnlistedKind(enum.Enum):
    """Why processes may be missing from every card; the comment says which fields of :class:`Unlisted` it fills."""

    FDS_HIDDEN = "fds-hidden"  # hidden: processes whose descriptors could not be listed (not root)


@dataclass(frozen=True, slots=True)
class Unlisted(Reason):
    """Why some processes may be missing from every card: ``kind`` and the facts its sentence names."""

    kind: UnlistedKind
    hidden: int = 0

    TEXT: ClassVar[ReasonText] = {
        UnlistedKind.FDS_HIDDEN: "{0.hidden} processes' descriptors could not be listed (not root)",
    }


@dataclass(slots=True)
class CardProcesses:
    """What one read found on one card: its processes and the reasons for their None fields."""

    processes: tuple[GpuProcess, ...] = ()
    reasons: dict[str, str] = field(default_factory=dict)


class DrmClients:
    """Finds and re-reads the amdgpu DRM clients of every process under ``proc``.

    ``nodes`` maps a device node name (``renderD128``, ``card1``) to the card it
    belongs to; descriptors of other nodes are ignored."""

    def __init__(self, proc: Path, nodes: Mapping[str, str], *, rescan_s: float = 5.0,
                 full_rescan_s: float = 30.0, kfd: Path | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._proc = proc
        self._nodes = dict(nodes)
        self._rescan_s = rescan_s
        self._full_rescan_s = full_rescan_s
        self._kfd = kfd
        self._clock = clock
        self._fds: dict[int, list[tuple[str, str]]] = {}
        """pid -> (its fdinfo file, card) for its descriptors on our nodes."""
        self._scanned_at = self._full_at = -1e18
        self._hidden = 0
        """Processes whose descriptors could not be listed at the last full scan (not root)."""
        self._busy: dict[tuple[int, str, str], float] = {}
        self._busy_at: float | None = None
        self._files = OpenFiles()
        self._open: set[str] = set()
        self.read()  # prime the busy counters, so the first read has rates

    def _candidates(self, now: float) -> list[str] | None:
        """The pids to list: None for every process (a full scan); else the KFD's compute
        processes (``/sys/class/kfd/kfd/proc/PID``, what rocm-smi lists) and the ones known."""
        if self._kfd is None or now - self._full_at >= self._full_rescan_s or not self._kfd.is_dir():
            return None
        return sorted({*listdir(self._kfd), *map(str, self._fds)})

    def _scan(self, now: float) -> None:
        names = self._candidates(now)
        full = names is None
        fds: dict[int, list[tuple[str, str]]] = {}
        hidden = 0
        for name in listdir(self._proc) if names is None else names:
            if not name.isdigit():
                continue
            fd_dir = f"{self._proc}/{name}/fd"
            try:
                entries = os.listdir(fd_dir)
            except PermissionError:
                hidden += 1
                continue
            except OSError:
                continue  # gone, or a kernel thread
            for fd in entries:
                try:
                    target = os.readlink(f"{fd_dir}/{fd}")
                except OSError:
                    continue
                if target.startswith("/dev/dri/"):
                    card = self._nodes.get(target[len("/dev/dri/"):])
                    if card is not None:
                        fds.setdefault(int(name), []).append((f"{self._proc}/{name}/fdinfo/{fd}", card))
        self._fds = fds
        if full:
            self._hidden, self._full_at = hidden, now
        self._scanned_at = now

    def read(self) -> dict[str, CardProcesses]:
        """card -> its processes (pid, VRAM held, gfx+compute utilization since the last read)."""
        now = self._clock()
        if now - self._scanned_at >= self._rescan_s:
            self._scan(now)
            now = self._clock()
        dt_ns = None if self._busy_at is None else (now - self._busy_at) * 1e9
        out: dict[str, CardProcesses] = {}
        busy: dict[tuple[int, str, str], float] = {}
        gone: list[int] = []
        used: set[str] = set()
        parsed: dict[bytes, Client | None] = {}
        for pid, fds in self._fds.items():
            clients: dict[str, dict[str, Client]] = {}
            for path, card in fds:
                raw, _ = self._files.read(path, MAX_FDINFO)
                if raw is None:
                    continue  # closed since the scan
                used.add(path)
                client = parsed.get(raw)  # a dup'ed descriptor reads the same text: parse it once
                if client is None and raw not in parsed:
                    client = parsed[raw] = parse_fdinfo(raw.decode("ascii", errors="replace"))
                if client is not None:
                    clients.setdefault(card, {}).setdefault(client.client_id, client)
            if not clients:
                gone.append(pid)
            for card, by_id in clients.items():
                entry = out.setdefault(card, CardProcesses())
                entry.processes += (self._process(pid, card, by_id, busy, dt_ns, entry.reasons),)
        for pid in gone:
            self._fds.pop(pid, None)
        for path in self._open - used:  # descriptors closed, processes gone
            self._files.forget(path)
        self._open = used
        self._busy, self._busy_at = busy, now
        unlisted = self.unlisted()
        if unlisted is not None:
            note = f"{unlisted}: their GPU use is not shown"
            for entry in out.values():
                entry.reasons.setdefault("processes", note)
        return out

    def close(self) -> None:
        """Close the fdinfo files kept open."""
        self._files.close()
        self._open = set()

    def unlisted(self) -> Unlisted | None:
        """Why some processes may be missing from every card (None: every process was listed)."""
        if not self._hidden:
            return None
        return Unlisted(UnlistedKind.FDS_HIDDEN, self._hidden)

    def _process(self, pid: int, card: str, clients: Mapping[str, Client], busy: dict[tuple[int, str, str], float],
                 dt_ns: float | None, reasons: dict[str, str]) -> GpuProcess:
        used: int | None = 0
        total = 0.0
        known = False
        timed = False  # some client has a busy time
        last = self._busy
        for cid, c in clients.items():
            if c.vram_bytes is None:
                used = None
            elif used is not None:
                used += c.vram_bytes
            ns = c.busy_ns
            if ns is None:
                continue
            timed = True
            key = (pid, card, cid)
            busy[key] = ns
            before = last.get(key)
            if before is not None and ns >= before:
                total += ns - before
                known = True
        if used is None:
            reasons["processes.used_memory_bytes"] = "an amdgpu fdinfo without a VRAM figure"
        util: float | None = None
        if known and dt_ns:
            util = min(100.0, max(0.0, total / dt_ns * 100.0))
        elif not timed:
            reasons["processes.sm_util_percent"] = "no drm-engine-gfx/compute busy time in this kernel's fdinfo"
        else:
            reasons["processes.sm_util_percent"] = FIRST_SEEN
        reasons.setdefault("processes.mem_util_percent", "not in DRM fdinfo (no per-process memory activity)")
        return GpuProcess(pid, used, util)
