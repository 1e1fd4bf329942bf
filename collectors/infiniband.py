"""InfiniBand ports from ``/sys/class/infiniband/DEV/ports/N``.

``counters/port_rcv_data`` and ``counters/port_xmit_data`` count 4-byte
words (the IBA spec's PortRcvData/PortXmitData), so bytes = words * 4.
Rates need two readings: the collector takes the first when constructed.
A port seen for the first time later has no rate yet (None plus reason).
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from gpulens.core.model import IbPort

DEFAULT_ROOT = Path("/sys/class/infiniband")
WORD_BYTES = 4
"""port_rcv_data / port_xmit_data count 4-byte words (lanes' octets / 4)."""
MIN_INTERVAL_S = 0.05
ABSENT_RECHECK_S = 5.0
"""While the root is absent (most machines), it is looked for again at most this often: a stat(2) of a
missing sysfs path cost about 70 us of a cold tick's CPU on the development VM. A device whose driver
loads later is seen within this time."""


@dataclass(frozen=True, slots=True)
class IbReading:
    """All ports, and the reason for every None (key ``infiniband...``)."""

    ports: tuple[IbPort, ...]
    unavailable: Mapping[str, str]


def _read_text(path: Path) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read(4096).strip()
    except OSError:
        return None


def _read_int(path: Path) -> int | None:
    text = _read_text(path)
    if text is None:
        return None
    try:
        return int(text, 0)
    except ValueError:
        return None


def parse_state(text: str | None) -> str:
    """``"4: ACTIVE"`` -> ``"ACTIVE"`` (the sysfs form is ``code: NAME``)."""
    if not text:
        return ""
    return text.partition(":")[2].strip() or text


class InfinibandCollector:
    """Reads every port under ``root``; the root is injectable for tests."""

    def __init__(self, root: Path | str = DEFAULT_ROOT, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._absent_until = -1.0
        """Until when (clock) the root is taken as still absent without looking."""
        self._root = Path(root)
        self._root_text = str(self._root)
        self._absent = IbReading((), MappingProxyType({"infiniband": f"{self._root} absent (no InfiniBand devices)"}))
        """The reading while the root is absent (most machines): nothing built, one stat(2) each ABSENT_RECHECK_S."""
        self._last_time = time.monotonic()
        self._last: dict[tuple[str, int], tuple[int | None, int | None]] = {}
        for dev, port, path in self._ports():
            self._last[(dev, port)] = self._data(path)

    def _ports(self) -> list[tuple[str, int, Path]]:
        try:
            devices = sorted(os.listdir(self._root))
        except OSError:
            return []
        found = []
        for dev in devices:
            try:
                ports = os.listdir(self._root / dev / "ports")
            except OSError:
                continue
            for p in sorted(ports, key=lambda s: (len(s), s)):
                if p.isdigit():
                    found.append((dev, int(p), self._root / dev / "ports" / p))
        return found

    @staticmethod
    def _data(path: Path) -> tuple[int | None, int | None]:
        return (
            _read_int(path / "counters" / "port_rcv_data"),
            _read_int(path / "counters" / "port_xmit_data"),
        )

    def read(self) -> IbReading:
        """Ports with rates in bytes/s since the previous call; never raises on sysfs errors."""
        if self._absent_until >= 0 and self._clock() < self._absent_until:
            return self._absent
        try:
            is_dir = stat.S_ISDIR(os.stat(self._root_text).st_mode)
        except (OSError, ValueError):
            is_dir = False
        if not is_dir:
            self._absent_until = self._clock() + ABSENT_RECHECK_S
            return self._absent
        self._absent_until = -1.0
        wait = self._last_time + MIN_INTERVAL_S - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        now = time.monotonic()
        dt = now - self._last_time
        ports: list[IbPort] = []
        unavailable: dict[str, str] = {}
        current: dict[tuple[str, int], tuple[int | None, int | None]] = {}
        for dev, port, path in self._ports():
            data = self._data(path)
            current[(dev, port)] = data
            old = self._last.get((dev, port))
            key = f"infiniband.{dev}/{port}"
            rates: list[float | None] = []
            for i, name in ((0, "rx"), (1, "tx")):
                new_v, old_v = data[i], None if old is None else old[i]
                if new_v is None:
                    unavailable[f"{key}.{name}_bytes_per_s"] = "counter file unreadable"
                    rates.append(None)
                elif old_v is None:
                    unavailable[f"{key}.{name}_bytes_per_s"] = "port appeared this interval"
                    rates.append(None)
                elif new_v < old_v:
                    unavailable[f"{key}.{name}_bytes_per_s"] = "counter was reset"
                    rates.append(None)
                else:
                    rates.append((new_v - old_v) * WORD_BYTES / dt)
            ports.append(
                IbPort(
                    device=dev,
                    port=port,
                    rx_bytes_per_s=rates[0],
                    tx_bytes_per_s=rates[1],
                    state=parse_state(_read_text(path / "state")),
                    rate=_read_text(path / "rate") or "",
                    symbol_errors=_read_int(path / "counters" / "symbol_error"),
                    link_downed=_read_int(path / "counters" / "link_downed"),
                )
            )
        if not ports:
            unavailable["infiniband"] = f"no ports under {self._root}"
        self._last, self._last_time = current, now
        return IbReading(tuple(ports), unavailable)
