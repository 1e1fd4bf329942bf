"""Host CPU, memory, network and storage: /proc read directly, psutil where it serves.

Per tick: one ``pread`` each of ``/proc/stat`` (its cpu lines), ``/proc/meminfo``,
``/proc/net/dev`` and ``/proc/diskstats``, kept open and parsed for the reported
fields only (:mod:`gpulens.collectors.procstat`), and ``os.getloadavg()`` (or the sampler's one
read of ``/proc/loadavg`` a tick, shared with the job scan); about
40 us CPU together on the development VM, where psutil's six calls for the same
figures took about 230 us. Counters are raw (a reset is seen, not hidden as a
wrap). The process tree stays on the hand-written /proc scanner in
:mod:`gpulens.collectors.jobs`, where psutil measured 3.9x dearer.

psutil serves where the files do not hold the figure: available memory when
``/proc/meminfo`` has no (or a zero) MemAvailable (psutil estimates it as
``free`` does), swap when it has no Swap lines (``sysinfo(2)``), disk counters
when ``/proc/diskstats`` is missing (psutil walks /sys/block), and the per-mode
CPU seconds ``/metrics`` reads at scrape time (:func:`read_cpu_times`); psutil
reads ``psutil.PROCFS_PATH``, not ``proc_root``. Which interfaces are loopback and
which block devices are whole disks is read from sysfs once per name, as psutil
has no cheap equivalent.

Rates need two readings: :class:`HostCollector` takes the first one when it
is constructed, so the first :meth:`HostCollector.sample` is already a rate
over a real interval (it waits out :data:`MIN_INTERVAL_S` if called sooner).

Missing is not zero: a counter that cannot be read is ``None`` in the sample
and its reason is in :attr:`HostReading.unavailable`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

import psutil

from gpulens.collectors.procstat import (
    OncePerTick,
    ProcFile,
    parse_cpu_lines,
    parse_diskstats,
    parse_meminfo,
    parse_net_dev,
)
from gpulens.core.makers import fast_builder
from gpulens.core.model import (
    CpuSample,
    CpuTimes,
    DiskIo,
    MemorySample,
    NetInterface,
    NetworkSample,
    StorageSample,
)

_cpu = fast_builder(CpuSample, ("total_percent", "per_core_percent", "load_avg_1m", "count"))
_memory = fast_builder(MemorySample, ("total_bytes", "used_bytes", "available_bytes", "swap_used_bytes"))
_network = fast_builder(NetworkSample, ("rx_bytes_per_s", "tx_bytes_per_s", "interfaces"))
_storage = fast_builder(StorageSample, ("read_bytes_per_s", "write_bytes_per_s", "disks"))
_nic = fast_builder(NetInterface, ("name", "rx_bytes_per_s", "tx_bytes_per_s", "rx_bytes", "tx_bytes"))
_disk = fast_builder(DiskIo, ("name", "read_bytes_per_s", "write_bytes_per_s", "read_bytes", "write_bytes"))
"""Each tick's figures made without the frozen ``__init__`` (core.makers)."""

MIN_INTERVAL_S = 0.2
"""Shortest interval a rate is computed over: /proc/stat counts in 10 ms jiffies."""

ARPHRD_LOOPBACK = "772"

MAX_NAMES = 4096
"""Interface and device names remembered (with their loopback and whole-disk answers) before forgetting them all."""

_READ_ERRORS = (OSError, ValueError, KeyError, NotImplementedError)
"""What a counter that cannot be read raises: OSError (a /proc file missing or
unreadable), ValueError (contents not as the kernel writes them, or too large);
from psutil's fallbacks also KeyError (MemTotal or MemFree missing from
/proc/meminfo) and NotImplementedError (neither /proc/diskstats nor /sys/block)."""

_MEMINFO = (b"MemTotal", b"MemFree", b"MemAvailable", b"SwapTotal", b"SwapFree")

_T = TypeVar("_T")
_Pair = tuple[float, float]
_CpuTimes = tuple[tuple[int, int], tuple[tuple[int, int], ...]]
"""(busy, total) jiffies for the whole machine, then for each core in order."""


@dataclass(frozen=True, slots=True)
class HostReading:
    """The host part of a sample plus the reason for every None in it."""

    cpu: CpuSample
    memory: MemorySample
    network: NetworkSample
    storage: StorageSample
    unavailable: Mapping[str, str]


def _attempt(read: Callable[[], _T], what: str) -> _T | str:
    """``read()``, or why it failed (a str: the reason for ``unavailable``)."""
    try:
        return read()
    except _READ_ERRORS as err:
        return f"{what} failed: {err!r}"


class PsutilCpuTimes(Protocol):
    """The fields of psutil's cpu-times record every platform has (iowait, irq, softirq and steal are Linux's)."""

    @property
    def user(self) -> float: ...
    @property
    def nice(self) -> float: ...
    @property
    def system(self) -> float: ...
    @property
    def idle(self) -> float: ...


def cpu_times(times: PsutilCpuTimes) -> CpuTimes:
    """A psutil cpu-times record -> the kernel's per-mode seconds (guest time is inside user)."""
    return CpuTimes(
        user=times.user, nice=times.nice, system=times.system, idle=times.idle,
        iowait=getattr(times, "iowait", 0.0), irq=getattr(times, "irq", 0.0),
        softirq=getattr(times, "softirq", 0.0), steal=getattr(times, "steal", 0.0),
    )


def read_cpu_times() -> tuple[CpuTimes, ...]:
    """Each CPU's kernel time counters now, in CPU order (``/proc/stat``; for ``/metrics``).

    Raises:
        OSError: /proc/stat cannot be read.
    """
    return tuple(map(cpu_times, psutil.cpu_times(percpu=True)))


def _no_previous(reason: str) -> str:
    return f"no previous reading ({reason}); rates resume next tick"


def _percent(new: _Pair, old: _Pair) -> float:
    d_total = new[1] - old[1]
    # A core that saw no jiffy tick at all (just onlined) shows idle, not a guess.
    return 0.0 if d_total <= 0 else min(100.0, max(0.0, 100.0 * (new[0] - old[0]) / d_total))


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


def _psutil_memory(swap_used: int | None, unavailable: dict[str, str]) -> MemorySample:
    """Total and available memory from ``psutil.virtual_memory()``: its estimate of available memory
    where /proc/meminfo gives none (or says 0), or its reason."""
    vm = _attempt(psutil.virtual_memory, "psutil.virtual_memory()")
    if isinstance(vm, str):
        unavailable["memory.total_bytes"] = vm
        unavailable["memory.available_bytes"] = vm
        unavailable["memory.used_bytes"] = "needs total and available memory"
        return MemorySample(None, None, None, swap_used)
    available: int | None = vm.available
    if not available:  # psutil sets 0 (and warns) when it cannot determine it
        unavailable["memory.available_bytes"] = "psutil could not determine available memory (MemAvailable)"
        unavailable["memory.used_bytes"] = "needs available memory"
        available = None
    return MemorySample(
        total_bytes=vm.total,
        # "used" as procps-ng 4 `free` prints it: total - available.
        used_bytes=None if available is None else vm.total - available,
        available_bytes=available,
        swap_used_bytes=swap_used,
    )


class HostCollector:
    """CPU, memory, network and storage rates between consecutive calls; :meth:`close` frees its descriptors."""

    def __init__(self, *, sys_root: Path = Path("/sys"), proc_root: Path = Path("/proc"),
                 loadavg: OncePerTick | None = None) -> None:
        """``loadavg``: ``/proc/loadavg`` as the sampler reads it once a tick, for the load average (None:
        ``os.getloadavg()``)."""
        self._loadavg = loadavg
        self._sys = sys_root
        self._disks = whole_disks(sys_root / "block")
        self._stat = ProcFile(f"{proc_root}/stat", enough=b"\nintr ")
        self._meminfo = ProcFile(f"{proc_root}/meminfo")
        self._net_dev = ProcFile(f"{proc_root}/net/dev")
        self._diskstats = ProcFile(f"{proc_root}/diskstats")
        self._nic_names: dict[bytes, str] = {}
        """Interface name as /proc/net/dev spells it -> its name, or "" for a loopback interface."""
        self._disk_names: dict[bytes, str] = {}
        """Device name as /proc/diskstats spells it -> its name, or "" for a device that is no whole disk."""
        self._cpu_why, self._net_why, self._disk_why = (
            f"reading {f.path}" for f in (self._stat, self._net_dev, self._diskstats))
        self._last_time = time.monotonic()
        self._cpu = _attempt(self._read_cpu, self._cpu_why)
        self._net = _attempt(self._read_net, self._net_why)
        self._disk = _attempt(self._read_disk, self._disk_why)

    def close(self) -> None:
        """Close the kept /proc files (a later sample opens them again)."""
        for f in (self._stat, self._meminfo, self._net_dev, self._diskstats):
            f.close()

    def _read_cpu(self) -> _CpuTimes:
        return parse_cpu_lines(self._stat.read())

    def _nic_name(self, raw: bytes) -> str:
        """The interface's name, or "" when it is a loopback interface (sysfs ``type``, read once per name)."""
        name = os.fsdecode(raw)
        try:
            kind = (self._sys / "class/net" / name / "type").read_text("ascii", "replace")
            loopback = kind.strip() == ARPHRD_LOOPBACK
        except OSError:
            loopback = name == "lo"
        if len(self._nic_names) >= MAX_NAMES:
            self._nic_names.clear()
        self._nic_names[raw] = "" if loopback else name
        return self._nic_names[raw]

    def _read_net(self) -> dict[str, tuple[int, int]]:
        names = self._nic_names
        out: dict[str, tuple[int, int]] = {}
        for raw, rx, tx in parse_net_dev(self._net_dev.read()):
            name = names.get(raw)
            if name is None:
                name = self._nic_name(raw)
            if name:
                out[name] = (rx, tx)
        return out

    def _disk_name(self, raw: bytes) -> str | None:
        """The device's name when it is a whole disk (``whole_disks``), else None; answered once per name."""
        name = self._disk_names.get(raw)
        if name is None:
            name = os.fsdecode(raw)
            name = name if name in self._disks else ""
            if len(self._disk_names) >= MAX_NAMES:
                self._disk_names.clear()
            self._disk_names[raw] = name
        return name or None

    def _read_disk(self) -> dict[str, tuple[int, int]]:
        try:
            data = self._diskstats.read()
        except FileNotFoundError:  # no /proc/diskstats: psutil reads /sys/block, or says neither is there
            counters = psutil.disk_io_counters(perdisk=True, nowrap=False) or {}
            return {k: (c.read_bytes, c.write_bytes) for k, c in counters.items() if k in self._disks}
        return parse_diskstats(data, self._disk_name)

    def sample(self) -> HostReading:
        """Rates since the previous call (or construction); waits out MIN_INTERVAL_S.

        Never raises for a counter that cannot be read: that part of the
        reading is None and ``unavailable`` says why.
        """
        wait = self._last_time + MIN_INTERVAL_S - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        now = time.monotonic()
        dt = now - self._last_time
        cpu = _attempt(self._read_cpu, self._cpu_why)
        net = _attempt(self._read_net, self._net_why)
        disk = _attempt(self._read_disk, self._disk_why)
        unavailable: dict[str, str] = {}
        result = HostReading(
            cpu=self._cpu_sample(cpu, unavailable),
            memory=self._memory_sample(unavailable),
            network=self._network_sample(net, dt, unavailable),
            storage=self._storage_sample(disk, dt, unavailable),
            unavailable=unavailable,
        )
        self._last_time, self._cpu, self._net, self._disk = now, cpu, net, disk
        return result

    def _memory_sample(self, unavailable: dict[str, str]) -> MemorySample:
        try:
            mem = parse_meminfo(self._meminfo.read(), _MEMINFO)
        except (OSError, ValueError) as err:
            why = f"reading {self._meminfo.path} failed: {err!r}"
            for key in ("memory.total_bytes", "memory.available_bytes", "memory.swap_used_bytes"):
                unavailable[key] = why
            unavailable["memory.used_bytes"] = "needs total and available memory"
            return MemorySample(None, None, None, None)
        swap_used: int | None = None
        swap_total, swap_free = mem.get(b"SwapTotal"), mem.get(b"SwapFree")
        if swap_total is not None and swap_free is not None:
            swap_used = swap_total - swap_free
        else:  # no Swap lines: psutil asks sysinfo(2)
            swap = _attempt(psutil.swap_memory, "psutil.swap_memory()")
            if isinstance(swap, str):
                unavailable["memory.swap_used_bytes"] = swap
            else:
                swap_used = swap.used
        total, free, available = mem.get(b"MemTotal"), mem.get(b"MemFree"), mem.get(b"MemAvailable")
        if total is None or free is None or available is None or available <= 0:
            return _psutil_memory(swap_used, unavailable)
        if available > total:  # a container shown the host's MemAvailable: free memory, as psutil and procps say
            available = free
        # "used" as procps-ng 4 `free` prints it: total - available.
        return _memory(total, total - available, available, swap_used)

    def _cpu_sample(self, cpu: _CpuTimes | str, unavailable: dict[str, str]) -> CpuSample:
        load = self._load(unavailable)
        if isinstance(cpu, str):
            unavailable["cpu"] = cpu
            return CpuSample(None, load_avg_1m=load)
        (total, cores), old = cpu, self._cpu
        if isinstance(old, str):
            unavailable["cpu"] = _no_previous(old)
            return CpuSample(None, load_avg_1m=load, count=len(cores))
        per_core: tuple[float, ...] = ()
        if len(cores) == len(old[1]):
            per_core = tuple(_percent(n, o) for n, o in zip(cores, old[1], strict=True))
        else:  # /proc/stat lists online cores by position, so a hotplug breaks the pairing
            unavailable["cpu.per_core_percent"] = "number of cores changed during the interval (CPU hotplug)"
        return _cpu(_percent(total, old[0]), per_core, load, len(cores))

    def _load(self, unavailable: dict[str, str]) -> float | None:
        """The 1-minute load average, or None with the reason."""
        if self._loadavg is not None:
            try:
                return float(self._loadavg.read().split(None, 1)[0])
            except (OSError, ValueError, IndexError) as err:
                unavailable["cpu.load_avg_1m"] = f"reading {self._loadavg.file.path} failed: {err!r}"
                return None
        try:
            return os.getloadavg()[0]
        except OSError as err:
            unavailable["cpu.load_avg_1m"] = f"os.getloadavg() failed: {err!r}"
            return None

    def _network_sample(
        self, net: dict[str, tuple[int, int]] | str, dt: float, unavailable: dict[str, str]
    ) -> NetworkSample:
        old = self._net
        if isinstance(net, str):
            unavailable["network"] = net
            return NetworkSample(None, None)
        if isinstance(old, str):
            unavailable["network"] = _no_previous(old)
            return NetworkSample(None, None)
        ifaces = []
        rx_total = tx_total = 0.0
        for name in sorted(net):
            counts = net[name]
            rates = _rates(counts, old.get(name), dt)
            if isinstance(rates, str):  # left out of the totals, with the reason
                unavailable[f"network.{name}"] = rates
                continue
            rx_total += rates[0]
            tx_total += rates[1]
            ifaces.append(_nic(name, rates[0], rates[1], counts[0], counts[1]))
        return _network(rx_total, tx_total, tuple(ifaces))

    def _storage_sample(
        self, disk: dict[str, tuple[int, int]] | str, dt: float, unavailable: dict[str, str]
    ) -> StorageSample:
        if not self._disks:
            unavailable["storage"] = "no whole disks under /sys/block (container without devices?)"
            return StorageSample(None, None)
        old = self._disk
        if isinstance(disk, str):
            unavailable["storage"] = disk
            return StorageSample(None, None)
        if isinstance(old, str):
            unavailable["storage"] = _no_previous(old)
            return StorageSample(None, None)
        disks = []
        read_total = write_total = 0.0
        for name in sorted(disk):
            counts = disk[name]
            rates = _rates(counts, old.get(name), dt)
            if isinstance(rates, str):
                unavailable[f"storage.{name}"] = rates
                continue
            read_total += rates[0]
            write_total += rates[1]
            disks.append(_disk(name, rates[0], rates[1], counts[0], counts[1]))
        return _storage(read_total, write_total, tuple(disks))
