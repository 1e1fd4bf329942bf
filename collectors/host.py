"""Host CPU, memory, network and storage, read straight from procfs.

psutil would do, but one read of ``/proc/stat``, ``/proc/meminfo``,
``/proc/net/dev`` and ``/proc/diskstats`` per tick is several times cheaper
than its per-call object churn, and the sampler runs every second.

Rates need two readings: :class:`HostCollector` takes the first one when it
is constructed, so the first :meth:`HostCollector.sample` is already a rate
over a real interval (it waits out :data:`MIN_INTERVAL_S` if called sooner).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gpulens.core.model import (
    CpuSample,
    DiskIo,
    MemorySample,
    NetInterface,
    NetworkSample,
    StorageSample,
)

MIN_INTERVAL_S = 0.2
"""Shortest interval a rate is computed over: /proc/stat counts in 10 ms jiffies."""

SECTOR_BYTES = 512
"""/proc/diskstats counts 512-byte sectors whatever the device's block size."""

ARPHRD_LOOPBACK = "772"


@dataclass(frozen=True, slots=True)
class HostReading:
    """The host part of a sample plus the reason for every None in it."""

    cpu: CpuSample
    memory: MemorySample
    network: NetworkSample
    storage: StorageSample
    unavailable: Mapping[str, str]


def _read(path: Path) -> str:
    with open(path, encoding="ascii", errors="replace") as f:
        return f.read()


def parse_proc_stat(text: str) -> dict[str, tuple[int, int]]:
    """``/proc/stat`` cpu lines -> name -> (busy jiffies, total jiffies).

    Total leaves out guest and guest_nice (already counted in user and nice);
    idle time is idle + iowait, as in ``top``.
    """
    result: dict[str, tuple[int, int]] = {}
    for line in text.splitlines():
        if not line.startswith("cpu"):
            break
        parts = line.split()
        values = [int(v) for v in parts[1:9]]
        total = sum(values)
        idle = values[3] + (values[4] if len(values) > 4 else 0)
        result[parts[0]] = (total - idle, total)
    return result


def parse_meminfo(text: str) -> dict[str, int]:
    """``/proc/meminfo`` -> field -> bytes (values are given in kB)."""
    result: dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        fields = rest.split()
        if fields:
            result[name] = int(fields[0]) * (1024 if len(fields) > 1 else 1)
    return result


def parse_net_dev(text: str) -> dict[str, tuple[int, int]]:
    """``/proc/net/dev`` -> interface -> (rx bytes, tx bytes)."""
    result: dict[str, tuple[int, int]] = {}
    for line in text.splitlines()[2:]:
        name, _, rest = line.partition(":")
        fields = rest.split()
        if len(fields) >= 9:
            result[name.strip()] = (int(fields[0]), int(fields[8]))
    return result


def parse_diskstats(text: str, disks: frozenset[str]) -> dict[str, tuple[int, int]]:
    """``/proc/diskstats`` -> disk -> (read bytes, written bytes), for ``disks`` only."""
    result: dict[str, tuple[int, int]] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 10 and fields[2] in disks:
            result[fields[2]] = (int(fields[5]) * SECTOR_BYTES, int(fields[9]) * SECTOR_BYTES)
    return result


def whole_disks(sys_block: Path = Path("/sys/block")) -> frozenset[str]:
    """Block devices backed by hardware (``/sys/block/X/device`` exists).

    This keeps whole disks (sda, nvme0n1, vda) and drops partitions (not in
    /sys/block), loop, zram, dm and md devices, whose I/O is already counted
    on the disks beneath them.
    """
    try:
        names = os.listdir(sys_block)
    except OSError:
        return frozenset()
    return frozenset(n.replace("!", "/") for n in names if (sys_block / n / "device").exists())


def _rates(new: tuple[int, int], old: tuple[int, int] | None, dt: float) -> tuple[float, float] | str:
    """Both rates, or why there are none (a device that appeared or was reset)."""
    if old is None:
        return "appeared during the interval"
    if new[0] < old[0] or new[1] < old[1]:
        return "counter went backwards (device reset)"
    return (new[0] - old[0]) / dt, (new[1] - old[1]) / dt


class HostCollector:
    """CPU, memory, network and storage rates between consecutive calls."""

    def __init__(self, proc: Path = Path("/proc"), sys_root: Path = Path("/sys")) -> None:
        self._proc = proc
        self._sys = sys_root
        self._disks = whole_disks(sys_root / "block")
        self._loopback: dict[str, bool] = {}
        self._last_time = time.monotonic()
        self._cpu = self._read_cpu()
        self._net = self._read_net()
        self._disk = self._read_disk()

    def _read_cpu(self) -> dict[str, tuple[int, int]]:
        return parse_proc_stat(_read(self._proc / "stat"))

    def _is_loopback(self, name: str) -> bool:
        known = self._loopback.get(name)
        if known is None:
            try:
                known = _read(self._sys / "class/net" / name / "type").strip() == ARPHRD_LOOPBACK
            except OSError:
                known = name == "lo"
            self._loopback[name] = known
        return known

    def _read_net(self) -> dict[str, tuple[int, int]]:
        counters = parse_net_dev(_read(self._proc / "net/dev"))
        return {k: v for k, v in counters.items() if not self._is_loopback(k)}

    def _read_disk(self) -> dict[str, tuple[int, int]]:
        return parse_diskstats(_read(self._proc / "diskstats"), self._disks)

    def sample(self) -> HostReading:
        """Rates since the previous call (or construction); waits out MIN_INTERVAL_S.

        Raises:
            OSError: /proc itself cannot be read (not Linux).
        """
        wait = self._last_time + MIN_INTERVAL_S - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        now = time.monotonic()
        dt = now - self._last_time
        cpu, net, disk = self._read_cpu(), self._read_net(), self._read_disk()
        unavailable: dict[str, str] = {}
        result = HostReading(
            cpu=self._cpu_sample(cpu),
            memory=self._memory_sample(unavailable),
            network=self._network_sample(net, dt, unavailable),
            storage=self._storage_sample(disk, dt, unavailable),
            unavailable=unavailable,
        )
        if result.cpu.load_avg_1m is None:
            unavailable["cpu.load_avg_1m"] = "/proc/loadavg unreadable"
        if result.memory.total_bytes is None:
            unavailable["memory.total_bytes"] = "MemTotal missing in /proc/meminfo"
        self._last_time, self._cpu, self._net, self._disk = now, cpu, net, disk
        return result

    def _cpu_sample(self, cpu: dict[str, tuple[int, int]]) -> CpuSample:
        def percent(name: str) -> float:
            busy, total = cpu[name]
            old_busy, old_total = self._cpu.get(name, (busy, total))
            d_total = total - old_total
            # A core that saw no jiffy tick at all (just onlined) shows idle, not a guess.
            return 0.0 if d_total <= 0 else min(100.0, max(0.0, 100.0 * (busy - old_busy) / d_total))

        cores = sorted((k for k in cpu if k != "cpu"), key=lambda k: int(k[3:]))
        try:
            load: float | None = float(_read(self._proc / "loadavg").split()[0])
        except (OSError, ValueError, IndexError):
            load = None
        return CpuSample(
            total_percent=percent("cpu"),
            per_core_percent=tuple(percent(c) for c in cores),
            load_avg_1m=load,
            count=len(cores),
        )

    def _memory_sample(self, unavailable: dict[str, str]) -> MemorySample:
        info = parse_meminfo(_read(self._proc / "meminfo"))
        total = info.get("MemTotal")
        available = info.get("MemAvailable")
        if available is None:
            unavailable["memory.available_bytes"] = "MemAvailable missing in /proc/meminfo (kernel < 3.14)"
            unavailable["memory.used_bytes"] = "needs MemAvailable"
        swap_total, swap_free = info.get("SwapTotal"), info.get("SwapFree")
        swap_used = None if swap_total is None or swap_free is None else swap_total - swap_free
        return MemorySample(
            total_bytes=total,
            # "used" as procps-ng 4 `free` prints it: total - available.
            used_bytes=None if total is None or available is None else total - available,
            available_bytes=available,
            swap_used_bytes=swap_used,
        )

    def _network_sample(
        self, net: dict[str, tuple[int, int]], dt: float, unavailable: dict[str, str]
    ) -> NetworkSample:
        ifaces = []
        for name in sorted(net):
            rates = _rates(net[name], self._net.get(name), dt)
            if isinstance(rates, str):  # left out of the totals, with the reason
                unavailable[f"network.{name}"] = rates
                continue
            ifaces.append(NetInterface(name, *rates))
        return NetworkSample(
            rx_bytes_per_s=sum(i.rx_bytes_per_s for i in ifaces),
            tx_bytes_per_s=sum(i.tx_bytes_per_s for i in ifaces),
            interfaces=tuple(ifaces),
        )

    def _storage_sample(
        self, disk: dict[str, tuple[int, int]], dt: float, unavailable: dict[str, str]
    ) -> StorageSample:
        disks = []
        for name in sorted(disk):
            rates = _rates(disk[name], self._disk.get(name), dt)
            if isinstance(rates, str):
                unavailable[f"storage.{name}"] = rates
                continue
            disks.append(DiskIo(name, *rates))
        if not self._disks:
            unavailable["storage"] = "no whole disks under /sys/block (container without devices?)"
            return StorageSample(None, None)
        return StorageSample(
            read_bytes_per_s=sum(d.read_bytes_per_s for d in disks),
            write_bytes_per_s=sum(d.write_bytes_per_s for d in disks),
            disks=tuple(disks),
        )
