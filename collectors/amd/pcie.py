"""PCIe throughput from amdgpu's ``pcie_bw``, read off the sampling thread.

Reading ``pcie_bw`` makes the driver count PCIe messages for one second
(``msleep(1000)`` in the ASIC's get_pcie_usage) before it answers ``received
sent max-payload``: a read blocks for a second. So each card's file is read
by its own daemon thread every ``period_s``, and a sample takes the newest
reading. Bytes per second are ``messages x max payload size``: the driver's
documented estimate, an upper bound (a message may carry less).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from gpulens.collectors.amd.sysfs import parse_pcie_bw, read_text

Rates = tuple[float, float]


def read_pcie_bw(path: Path) -> tuple[Rates | None, str | None]:
    """(rx, tx) bytes/s from one read of ``pcie_bw`` (blocks ~1 s on real hardware)."""
    text, why = read_text(path)
    if text is None:
        return None, why
    parsed, why = parse_pcie_bw(text)
    if parsed is None:
        return None, why
    rx, tx, mps = parsed
    return (float(rx * mps), float(tx * mps)), None


class PcieBw:
    """The newest ``pcie_bw`` reading of one card.

    ``background``: read on a daemon thread (production); False: read when
    :meth:`get` is called (tests, fixture trees, where a read does not block)."""

    def __init__(self, path: Path, *, background: bool = True, period_s: float = 2.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._path = path
        self._clock = clock
        self._period = period_s
        self._latest: tuple[Rates | None, str | None, float] = (None, "no pcie_bw reading yet", -1e18)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(target=self._loop, name=f"pcie_bw {path.parent.name}", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            rates, why = read_pcie_bw(self._path)
            self._latest = (rates, why, self._clock())
            if why is not None and "absent" in why:
                return  # the file is not there (APU, MI300): no need to look again
            self._stop.wait(self._period)

    def get(self) -> tuple[Rates | None, str | None]:
        """(rx, tx) bytes/s of the newest reading, or None and why (none yet, too old, unreadable)."""
        if self._thread is None:
            return read_pcie_bw(self._path)
        rates, why, at = self._latest
        if rates is None:
            return None, why
        age = self._clock() - at
        if age > max(5.0, 3 * self._period):
            return None, f"pcie_bw reading is {age:.0f} s old (the reader is stuck in the driver)"
        return rates, None

    def close(self) -> None:
        """Stop the reader (it ends after the read in progress, if any)."""
        self._stop.set()
