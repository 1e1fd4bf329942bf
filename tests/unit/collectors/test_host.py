"""Host collector: a psutil fake with recorded counters, and the real machine.

:class:`FakePsutil` replaces the psutil functions the collector calls with
records shaped as psutil's own (values recorded on a 2-core VM) that each
test advances by hand, so rates and percentages are exact. The real-machine
tests check the collector against psutil and /proc read independently.

Tolerances: CPU % within 15 points of psutil over the same window (the
machine is shared with other busy processes, so the two windows' few
milliseconds of difference matter); memory used within 64 MiB of
MemTotal - MemAvailable read by the test (memory moves between reads).
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import NamedTuple

import psutil
import pytest

from gpulens.collectors import host
from gpulens.collectors.host import HostCollector, busy_total, whole_disks


class ScpuTimes(NamedTuple):
    """psutil's ``scputimes`` on Linux, seconds."""

    user: float
    nice: float
    system: float
    idle: float
    iowait: float
    irq: float
    softirq: float
    steal: float
    guest: float
    guest_nice: float


class Svmem(NamedTuple):
    """psutil's ``svmem`` on Linux, bytes."""

    total: int
    available: int
    percent: float
    used: int
    free: int
    active: int
    inactive: int
    buffers: int
    cached: int
    shared: int
    slab: int


class Sswap(NamedTuple):
    """psutil's ``sswap``, bytes."""

    total: int
    used: int
    free: int
    percent: float
    sin: int
    sout: int


class Snetio(NamedTuple):
    """psutil's ``snetio``."""

    bytes_sent: int
    bytes_recv: int
    packets_sent: int = 0
    packets_recv: int = 0
    errin: int = 0
    errout: int = 0
    dropin: int = 0
    dropout: int = 0


class Sdiskio(NamedTuple):
    """psutil's ``sdiskio`` on Linux (bytes are 512-byte sectors x 512)."""

    read_count: int
    write_count: int
    read_bytes: int
    write_bytes: int
    read_time: int = 0
    write_time: int = 0
    read_merged_count: int = 0
    write_merged_count: int = 0
    busy_time: int = 0


def _cpu(user: float, system: float, idle: float, iowait: float = 0.5, guest: float = 0.0) -> ScpuTimes:
    return ScpuTimes(user, 0.0, system, idle, iowait, 0.0, 0.0, 0.0, guest, 0.0)


class FakePsutil:
    """The psutil host functions the collector calls, serving recorded counters.

    Tests change the attributes between readings; a name in ``fail`` makes
    that function raise the given error, as psutil does for an unreadable
    /proc file.
    """

    def __init__(self) -> None:
        self.total = _cpu(1.00, 0.50, 8.00)
        self.cores = [_cpu(0.50, 0.25, 4.00, 0.25), _cpu(0.50, 0.25, 4.00, 0.25)]
        self.vm = Svmem(
            total=1000 * 1024, available=600 * 1024, percent=40.0, used=400 * 1024, free=200 * 1024,
            active=0, inactive=0, buffers=0, cached=0, shared=0, slab=0,
        )
        self.swap = Sswap(total=100 * 1024, used=60 * 1024, free=40 * 1024, percent=60.0, sin=0, sout=0)
        self.nics = {"lo": Snetio(1000, 1000), "eth0": Snetio(bytes_sent=7000, bytes_recv=5000)}
        self.disks = {
            "vda": Sdiskio(100, 50, 2000 * 512, 4000 * 512),
            "vda1": Sdiskio(100, 50, 2000 * 512, 4000 * 512),  # partition: not in /sys/block
            "loop0": Sdiskio(100, 50, 9999 * 512, 9999 * 512),  # virtual: no device/
        }
        self.load = (0.50, 0.40, 0.30)
        self.fail: dict[str, Exception] = {}

    def _check(self, name: str) -> None:
        if name in self.fail:
            raise self.fail[name]

    def cpu_times(self, percpu: bool = False) -> ScpuTimes | list[ScpuTimes]:
        self._check("cpu_times")
        return list(self.cores) if percpu else self.total

    def virtual_memory(self) -> Svmem:
        self._check("virtual_memory")
        return self.vm

    def swap_memory(self) -> Sswap:
        self._check("swap_memory")
        return self.swap

    def net_io_counters(self, pernic: bool = False, nowrap: bool = True) -> dict[str, Snetio]:
        assert pernic and not nowrap, "the collector needs raw per-NIC counters to see resets"
        self._check("net_io_counters")
        return dict(self.nics)

    def disk_io_counters(self, perdisk: bool = False, nowrap: bool = True) -> dict[str, Sdiskio]:
        assert perdisk and not nowrap, "the collector needs raw per-disk counters to see resets"
        self._check("disk_io_counters")
        return dict(self.disks)

    def getloadavg(self) -> tuple[float, float, float]:
        self._check("getloadavg")
        return self.load


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakePsutil:
    f = FakePsutil()
    for name in ("cpu_times", "virtual_memory", "swap_memory", "net_io_counters", "disk_io_counters"):
        monkeypatch.setattr(psutil, name, getattr(f, name))
    monkeypatch.setattr(os, "getloadavg", f.getloadavg)
    return f


@pytest.fixture
def sys_root(tmp_path: Path) -> Path:
    """A fake /sys: lo is loopback, eth0 ethernet; vda a disk, loop0 virtual."""
    root = tmp_path / "sys"
    for name, kind in (("lo", "772"), ("eth0", "1")):
        (root / "class" / "net" / name).mkdir(parents=True)
        (root / "class" / "net" / name / "type").write_text(kind + "\n")
    (root / "block" / "vda" / "device").mkdir(parents=True)
    (root / "block" / "loop0").mkdir(parents=True)  # no device/: virtual, excluded
    return root


def test_busy_total_counts_as_top() -> None:
    # idle = idle + iowait; guest is already inside user, so not counted twice.
    assert busy_total(_cpu(1.00, 0.50, 8.00, 0.50)) == pytest.approx((1.5, 10.0))
    assert busy_total(_cpu(1.00, 0.50, 8.00, 0.50, guest=0.25)) == pytest.approx((1.5, 10.0))


def test_fake_rates_are_exact_and_exclude_loopback_partitions_loops(fake: FakePsutil, sys_root: Path) -> None:
    t0 = time.monotonic()
    collector = HostCollector(sys_root=sys_root)
    fake.total = _cpu(1.90, 0.60, 9.00)  # +1.00 busy of +2.00 total -> 50 %
    fake.cores = [_cpu(1.40, 0.35, 4.00, 0.25), _cpu(0.50, 0.25, 5.00, 0.25)]  # 100 %, 0 %
    fake.nics = {"lo": Snetio(9000, 9000), "eth0": Snetio(bytes_sent=7000, bytes_recv=6000)}
    fake.disks = {**fake.disks, "vda": Sdiskio(100, 50, 4000 * 512, 4000 * 512)}
    reading = collector.sample()
    elapsed = time.monotonic() - t0
    assert reading.cpu.total_percent == pytest.approx(50.0)
    assert reading.cpu.per_core_percent == pytest.approx((100.0, 0.0))
    assert reading.cpu.count == 2 and reading.cpu.load_avg_1m == 0.5
    assert reading.memory.total_bytes == 1000 * 1024
    assert reading.memory.used_bytes == 400 * 1024  # total - available, as `free`
    assert reading.memory.available_bytes == 600 * 1024
    assert reading.memory.swap_used_bytes == 60 * 1024
    assert [i.name for i in reading.network.interfaces] == ["eth0"]  # lo excluded
    # 1000 bytes over an interval between MIN_INTERVAL_S and the elapsed time.
    assert reading.network.rx_bytes_per_s is not None
    assert 1000 / elapsed <= reading.network.rx_bytes_per_s <= 1000 / host.MIN_INTERVAL_S
    assert reading.network.tx_bytes_per_s == 0.0
    assert [d.name for d in reading.storage.disks] == ["vda"]  # vda1 and loop0 excluded
    assert reading.storage.read_bytes_per_s is not None
    assert 2000 * 512 / elapsed <= reading.storage.read_bytes_per_s <= 2000 * 512 / host.MIN_INTERVAL_S
    assert reading.storage.write_bytes_per_s == 0.0
    assert reading.unavailable == {}


def test_first_fake_sample_waits_min_interval(fake: FakePsutil, sys_root: Path) -> None:
    t0 = time.monotonic()
    reading = HostCollector(sys_root=sys_root).sample()
    assert time.monotonic() - t0 >= host.MIN_INTERVAL_S
    assert reading.cpu.total_percent == 0.0  # counters did not move: idle, and a real interval


def test_counter_reset_gives_reason_not_zero(fake: FakePsutil, sys_root: Path) -> None:
    collector = HostCollector(sys_root=sys_root)
    fake.nics = {**fake.nics, "eth0": Snetio(bytes_sent=7000, bytes_recv=10)}
    fake.disks = {**fake.disks, "vda": Sdiskio(1, 1, 512, 512)}
    reading = collector.sample()
    assert reading.network.interfaces == ()
    assert "reset" in reading.unavailable["network.eth0"]
    assert reading.storage.disks == ()
    assert "reset" in reading.unavailable["storage.vda"]


def test_device_that_appears_is_left_out_with_reason(fake: FakePsutil, sys_root: Path) -> None:
    collector = HostCollector(sys_root=sys_root)
    (sys_root / "class" / "net" / "eth1").mkdir()
    (sys_root / "class" / "net" / "eth1" / "type").write_text("1\n")
    fake.nics = {**fake.nics, "eth1": Snetio(500, 500)}
    reading = collector.sample()
    assert [i.name for i in reading.network.interfaces] == ["eth0"]
    assert reading.unavailable["network.eth1"] == "appeared during the interval"


def test_undeterminable_available_memory_is_none_with_reason(fake: FakePsutil, sys_root: Path) -> None:
    # psutil sets available to 0 (with a RuntimeWarning) when it cannot work it out.
    fake.vm = fake.vm._replace(available=0)
    reading = HostCollector(sys_root=sys_root).sample()
    assert reading.memory.total_bytes == 1000 * 1024
    assert reading.memory.used_bytes is None and reading.memory.available_bytes is None
    assert "MemAvailable" in reading.unavailable["memory.available_bytes"]
    assert "memory.used_bytes" in reading.unavailable


@pytest.mark.parametrize(
    ("function", "error", "key"),
    [
        ("cpu_times", FileNotFoundError(2, "No such file", "/proc/stat"), "cpu"),
        ("virtual_memory", KeyError("MemTotal:"), "memory.total_bytes"),
        ("swap_memory", PermissionError(13, "Permission denied", "/proc/meminfo"), "memory.swap_used_bytes"),
        ("net_io_counters", FileNotFoundError(2, "No such file", "/proc/net/dev"), "network"),
        ("disk_io_counters", NotImplementedError("/proc/diskstats nor /sys/block"), "storage"),
        ("getloadavg", OSError("Load averages are unobtainable"), "cpu.load_avg_1m"),
    ],
)
def test_unreadable_counter_is_none_with_reason_never_zero(
    fake: FakePsutil, sys_root: Path, function: str, error: Exception, key: str
) -> None:
    collector = HostCollector(sys_root=sys_root)
    fake.fail[function] = error
    reading = collector.sample()
    assert function in reading.unavailable[key]
    values = {
        "cpu": reading.cpu.total_percent,
        "memory.total_bytes": reading.memory.total_bytes,
        "memory.swap_used_bytes": reading.memory.swap_used_bytes,
        "network": reading.network.rx_bytes_per_s,
        "storage": reading.storage.read_bytes_per_s,
        "cpu.load_avg_1m": reading.cpu.load_avg_1m,
    }
    assert values.pop(key) is None
    assert None not in values.values()  # the rest of the reading is unaffected
    if function == "virtual_memory":
        assert reading.memory.used_bytes is None and reading.memory.available_bytes is None
    if function == "cpu_times":
        assert reading.cpu.per_core_percent == () and reading.cpu.count is None

    # The next tick has no previous reading to take a rate from; the one after recovers.
    del fake.fail[function]
    reading = collector.sample()
    if key in ("cpu", "network", "storage"):
        assert "no previous reading" in reading.unavailable[key]
    else:
        assert reading.unavailable == {}
    assert collector.sample().unavailable == {}


def test_core_count_change_drops_per_core_with_reason(fake: FakePsutil, sys_root: Path) -> None:
    collector = HostCollector(sys_root=sys_root)
    fake.cores = [*fake.cores, _cpu(0.0, 0.0, 0.0)]  # a core onlined
    fake.total = _cpu(1.50, 0.50, 8.00)
    reading = collector.sample()
    assert reading.cpu.total_percent == pytest.approx(100.0)  # +0.5 busy of +0.5 total
    assert reading.cpu.per_core_percent == () and reading.cpu.count == 3
    assert "hotplug" in reading.unavailable["cpu.per_core_percent"]


def test_no_whole_disks_is_none_with_reason(fake: FakePsutil, tmp_path: Path) -> None:
    reading = HostCollector(sys_root=tmp_path / "empty-sys").sample()
    assert reading.storage.read_bytes_per_s is None and reading.storage.write_bytes_per_s is None
    assert "no whole disks" in reading.unavailable["storage"]


def _meminfo_bytes(key: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(key)


def test_fake_records_match_real_psutil() -> None:
    assert ScpuTimes._fields == psutil.cpu_times()._fields
    assert Svmem._fields == psutil.virtual_memory()._fields
    assert Sswap._fields == psutil.swap_memory()._fields
    assert Snetio._fields == next(iter(psutil.net_io_counters(pernic=True).values()))._fields
    disks = psutil.disk_io_counters(perdisk=True)
    if disks:
        assert Sdiskio._fields == next(iter(disks.values()))._fields


def test_real_psutil_values_present_and_plausible() -> None:
    reading = HostCollector().sample()
    cpu, mem = reading.cpu, reading.memory
    assert cpu.total_percent is not None and 0.0 <= cpu.total_percent <= 100.0
    assert cpu.count is not None and cpu.count >= 1 and len(cpu.per_core_percent) == cpu.count
    assert all(0.0 <= p <= 100.0 for p in cpu.per_core_percent)
    assert cpu.load_avg_1m is not None and 0.0 <= cpu.load_avg_1m < 10_000
    assert mem.total_bytes == _meminfo_bytes("MemTotal")
    assert mem.available_bytes is not None and 0 < mem.available_bytes <= mem.total_bytes
    assert mem.used_bytes is not None and 0 < mem.used_bytes < mem.total_bytes
    assert mem.swap_used_bytes is not None and 0 <= mem.swap_used_bytes <= _meminfo_bytes("SwapTotal")
    net = reading.network
    assert net.rx_bytes_per_s is not None and net.tx_bytes_per_s is not None
    names = {i.name for i in net.interfaces}
    assert "lo" not in names and names <= set(os.listdir("/sys/class/net"))
    for iface in net.interfaces:
        assert math.isfinite(iface.rx_bytes_per_s) and iface.rx_bytes_per_s >= 0
        assert math.isfinite(iface.tx_bytes_per_s) and iface.tx_bytes_per_s >= 0
    if whole_disks():
        assert reading.storage.read_bytes_per_s is not None and reading.storage.read_bytes_per_s >= 0
        assert {d.name for d in reading.storage.disks} == set(whole_disks())
    assert not any(k.startswith(("cpu", "memory")) for k in reading.unavailable), reading.unavailable


def test_real_machine_against_psutil(tmp_path: Path) -> None:
    nics_before = psutil.net_io_counters(pernic=True)
    disks_before = psutil.disk_io_counters(perdisk=True) or {}
    t_outer0 = time.monotonic()
    collector = HostCollector()
    psutil.cpu_percent(percpu=True)  # psutil's window starts with ours
    t_inner0 = time.monotonic()
    # Real disk writes in the window: the root filesystem here is a real disk.
    with open(tmp_path / "blob", "wb") as f:
        f.write(os.urandom(4 << 20))
        f.flush()
        os.fsync(f.fileno())
    time.sleep(0.3)
    t_inner1 = time.monotonic()
    reading = collector.sample()
    t_outer1 = time.monotonic()
    ps_cores = psutil.cpu_percent(percpu=True)
    nics_after = psutil.net_io_counters(pernic=True)
    disks_after = psutil.disk_io_counters(perdisk=True) or {}

    cpu = reading.cpu
    assert cpu.count == psutil.cpu_count() == len(cpu.per_core_percent)
    assert cpu.total_percent is not None and 0.0 <= cpu.total_percent <= 100.0
    for ours, theirs in zip(cpu.per_core_percent, ps_cores, strict=True):
        assert abs(ours - theirs) <= 15.0, (cpu.per_core_percent, ps_cores)

    mem = reading.memory
    assert mem.total_bytes == psutil.virtual_memory().total
    assert mem.used_bytes is not None
    expected_used = _meminfo_bytes("MemTotal") - _meminfo_bytes("MemAvailable")
    assert abs(mem.used_bytes - expected_used) <= 64 << 20

    assert {i.name for i in reading.network.interfaces} <= set(nics_after) - {"lo"}
    assert reading.network.rx_bytes_per_s == pytest.approx(sum(i.rx_bytes_per_s for i in reading.network.interfaces))
    for iface in reading.network.interfaces:
        bracket = nics_after[iface.name].bytes_recv - nics_before[iface.name].bytes_recv
        assert 0 <= iface.rx_bytes_per_s * (t_inner1 - t_inner0) <= bracket

    disks = {d.name: d for d in reading.storage.disks}
    assert set(disks) <= set(disks_after)
    assert set(disks) == set(whole_disks())
    written = 0.0
    for name, d in disks.items():
        bracket = disks_after[name].write_bytes - disks_before[name].write_bytes
        assert d.write_bytes_per_s * (t_inner1 - t_inner0) <= bracket
        written += d.write_bytes_per_s * (t_outer1 - t_outer0)
    if disks and Path(tmp_path).stat().st_dev == os.stat("/").st_dev:
        assert written >= 4 << 20  # our 4 MiB, fsynced inside the window


def test_first_sample_is_a_real_interval_even_when_called_at_once() -> None:
    t0 = time.monotonic()
    reading = HostCollector().sample()
    assert time.monotonic() - t0 >= host.MIN_INTERVAL_S
    assert reading.cpu.total_percent is not None
