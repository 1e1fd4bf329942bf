"""Host collector: a fake /proc with recorded counters, and the real machine.

:class:`FakeProc` writes the /proc files the collector reads (``stat``,
``meminfo``, ``net/dev``, ``diskstats``) in the kernel's format, with values
recorded on a 2-core VM, and each test changes them by hand, so rates and
percentages are exact. The collector keeps the files open and reads them from
the start each tick, so the fake rewrites them in place (a deleted file would
still be read through the kept descriptor, as a real /proc file never is).
Where the collector hands over to psutil (no MemAvailable, no Swap lines, no
/proc/diskstats) the test fakes the psutil call. The real-machine tests check
the collector against psutil and /proc read independently; the parsers' own
comparison with psutil and hostile files are in test_procstat.py.

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
from gpulens.collectors.host import HostCollector, whole_disks
from gpulens.collectors.procstat import parse_cpu_lines


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


class Cpu(NamedTuple):
    """One /proc/stat cpu line, in jiffies (guest is inside user, as the kernel counts)."""

    user: int
    system: int
    idle: int
    iowait: int = 50
    guest: int = 0

    def line(self, name: str) -> str:
        return f"{name} {self.user} 0 {self.system} {self.idle} {self.iowait} 0 0 0 {self.guest} 0"


class FakeProc:
    """The /proc files the host collector reads, served from recorded counters.

    Tests change the attributes and call :meth:`write` between readings;
    ``missing`` names files to leave out (``stat``, ``net/dev``, ...).
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "net").mkdir(parents=True)
        self.total = Cpu(100, 50, 800)
        self.cores = [Cpu(50, 25, 400, 25), Cpu(50, 25, 400, 25)]
        self.meminfo = {"MemTotal": 1000, "MemFree": 200, "MemAvailable": 600, "SwapTotal": 100, "SwapFree": 40}
        self.nics = {"lo": (1000, 1000), "eth0": (5000, 7000)}  # received, sent bytes
        self.disks = {  # sectors read, sectors written
            "vda": (2000, 4000),
            "vda1": (2000, 4000),  # partition: not in /sys/block
            "loop0": (9999, 9999),  # virtual: no device/
        }
        self.load = (0.50, 0.40, 0.30)
        self.fail_load: Exception | None = None
        self.write()

    def files(self) -> dict[str, str]:
        cpus = [self.total.line("cpu "), *(c.line(f"cpu{i}") for i, c in enumerate(self.cores))]
        net = [f"{name:>6}: {rx} 10 0 0 0 0 0 0 {tx} 10 0 0 0 0 0 0" for name, (rx, tx) in self.nics.items()]
        disks = [f" 253 {i} {name} 100 0 {r} 10 50 0 {w} 20 0 30 30 0 0 0 0 0 0"
                 for i, (name, (r, w)) in enumerate(self.disks.items())]
        return {
            "stat": "\n".join([*cpus, "intr 12345 0 0", "ctxt 999", "btime 1700000000", ""]),
            "meminfo": "".join(f"{k}: {v:>8} kB\n" for k, v in self.meminfo.items()),
            "net/dev": "\n".join(["Inter-|   Receive   |  Transmit", " face |bytes    packets|bytes    packets",
                                   *net, ""]),
            "diskstats": "\n".join([*disks, ""]),
        }

    def write(self) -> None:
        """Rewrite every file in place (the collector's kept descriptors see the new contents)."""
        for name, text in self.files().items():
            with open(self.root / name, "a+") as f:
                f.seek(0)
                f.truncate()
                f.write(text)

    def getloadavg(self) -> tuple[float, float, float]:
        if self.fail_load is not None:
            raise self.fail_load
        return self.load


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeProc:
    f = FakeProc(tmp_path / "proc")
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


def _collector(fake: FakeProc, sys_root: Path) -> HostCollector:
    return HostCollector(sys_root=sys_root, proc_root=fake.root)


def test_cpu_lines_count_as_top() -> None:
    # idle = idle + iowait; guest is already inside user, so not counted twice.
    total, cores = parse_cpu_lines(b"cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 100 0 50 800 50 0 0 0 25 0\nintr 1\n")
    assert total == (150, 1000)
    assert cores == ((150, 1000),)


def test_fake_rates_are_exact_and_exclude_loopback_partitions_loops(fake: FakeProc, sys_root: Path) -> None:
    t0 = time.monotonic()
    collector = _collector(fake, sys_root)
    fake.total = Cpu(190, 60, 900)  # +100 busy of +200 total -> 50 %
    fake.cores = [Cpu(140, 35, 400, 25), Cpu(50, 25, 500, 25)]  # 100 %, 0 %
    fake.nics = {"lo": (9000, 9000), "eth0": (6000, 7000)}
    fake.disks = {**fake.disks, "vda": (4000, 4000)}
    fake.write()
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
    assert reading.network.interfaces[0].rx_bytes == 6000 and reading.network.interfaces[0].tx_bytes == 7000
    assert [d.name for d in reading.storage.disks] == ["vda"]  # vda1 and loop0 excluded
    assert reading.storage.read_bytes_per_s is not None
    assert 2000 * 512 / elapsed <= reading.storage.read_bytes_per_s <= 2000 * 512 / host.MIN_INTERVAL_S
    assert reading.storage.write_bytes_per_s == 0.0
    assert reading.storage.disks[0].read_bytes == 4000 * 512
    assert reading.unavailable == {}
    collector.close()


def test_first_fake_sample_waits_min_interval(fake: FakeProc, sys_root: Path) -> None:
    t0 = time.monotonic()
    reading = _collector(fake, sys_root).sample()
    assert time.monotonic() - t0 >= host.MIN_INTERVAL_S
    assert reading.cpu.total_percent == 0.0  # counters did not move: idle, and a real interval


def test_counter_reset_gives_reason_not_zero(fake: FakeProc, sys_root: Path) -> None:
    collector = _collector(fake, sys_root)
    fake.nics = {**fake.nics, "eth0": (10, 7000)}
    fake.disks = {**fake.disks, "vda": (1, 1)}
    fake.write()
    reading = collector.sample()
    assert reading.network.interfaces == ()
    assert "reset" in reading.unavailable["network.eth0"]
    assert reading.storage.disks == ()
    assert "reset" in reading.unavailable["storage.vda"]


def test_device_that_appears_is_left_out_with_reason(fake: FakeProc, sys_root: Path) -> None:
    collector = _collector(fake, sys_root)
    (sys_root / "class" / "net" / "eth1").mkdir()
    (sys_root / "class" / "net" / "eth1" / "type").write_text("1\n")
    fake.nics = {**fake.nics, "eth1": (500, 500)}
    fake.write()
    reading = collector.sample()
    assert [i.name for i in reading.network.interfaces] == ["eth0"]
    assert reading.unavailable["network.eth1"] == "appeared during the interval"


def test_container_shown_the_hosts_available_memory_gets_free_memory(fake: FakeProc, sys_root: Path) -> None:
    fake.meminfo["MemAvailable"] = 5000  # more than MemTotal: psutil and procps say MemFree
    fake.write()
    reading = _collector(fake, sys_root).sample()
    assert reading.memory.available_bytes == 200 * 1024 and reading.memory.used_bytes == 800 * 1024


@pytest.mark.parametrize("available", [0, None])
def test_undeterminable_available_memory_is_none_with_reason(
    fake: FakeProc, sys_root: Path, monkeypatch: pytest.MonkeyPatch, available: int | None
) -> None:
    # No (or a zero) MemAvailable: psutil estimates it, and sets 0 (with a RuntimeWarning) when it cannot.
    if available is None:
        del fake.meminfo["MemAvailable"]
    else:
        fake.meminfo["MemAvailable"] = available
    fake.write()
    vm = Svmem(total=1000 * 1024, available=0, percent=0.0, used=1000 * 1024, free=200 * 1024,
               active=0, inactive=0, buffers=0, cached=0, shared=0, slab=0)
    monkeypatch.setattr(psutil, "virtual_memory", lambda: vm)
    reading = _collector(fake, sys_root).sample()
    assert reading.memory.total_bytes == 1000 * 1024
    assert reading.memory.used_bytes is None and reading.memory.available_bytes is None
    assert "MemAvailable" in reading.unavailable["memory.available_bytes"]
    assert "memory.used_bytes" in reading.unavailable
    assert reading.memory.swap_used_bytes == 60 * 1024


def test_psutil_estimate_serves_where_meminfo_has_no_available_memory(
    fake: FakeProc, sys_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    del fake.meminfo["MemAvailable"]  # a kernel before 3.14
    del fake.meminfo["SwapTotal"], fake.meminfo["SwapFree"]  # psutil asks sysinfo(2)
    fake.write()
    vm = Svmem(total=1000 * 1024, available=550 * 1024, percent=45.0, used=450 * 1024, free=200 * 1024,
               active=0, inactive=0, buffers=0, cached=0, shared=0, slab=0)
    monkeypatch.setattr(psutil, "virtual_memory", lambda: vm)
    monkeypatch.setattr(psutil, "swap_memory", lambda: Sswap(100 * 1024, 30 * 1024, 70 * 1024, 30.0, 0, 0))
    reading = _collector(fake, sys_root).sample()
    assert reading.memory.available_bytes == 550 * 1024 and reading.memory.used_bytes == 450 * 1024
    assert reading.memory.swap_used_bytes == 30 * 1024
    assert reading.unavailable == {}


def _fail(function: str, monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    def raise_it(*args: object, **kwargs: object) -> object:
        raise error

    monkeypatch.setattr(psutil, function, raise_it)


@pytest.mark.parametrize(
    ("file", "key", "says"),
    [
        ("stat", "cpu", "/stat failed: FileNotFoundError"),
        ("meminfo", "memory.total_bytes", "/meminfo failed: FileNotFoundError"),
        ("meminfo", "memory.swap_used_bytes", "/meminfo failed: FileNotFoundError"),
        ("net/dev", "network", "/net/dev failed: FileNotFoundError"),
        ("diskstats", "storage", "/diskstats failed: NotImplementedError"),  # psutil's /sys/block walk, faked
        ("meminfo:MemTotal", "memory.total_bytes", "psutil.virtual_memory() failed: KeyError"),
        ("meminfo:SwapFree", "memory.swap_used_bytes", "psutil.swap_memory() failed: PermissionError"),
        ("loadavg", "cpu.load_avg_1m", "os.getloadavg() failed"),
    ],
)
def test_unreadable_counter_is_none_with_reason_never_zero(
    fake: FakeProc, sys_root: Path, monkeypatch: pytest.MonkeyPatch, file: str, key: str, says: str
) -> None:
    collector = _collector(fake, sys_root)
    _fail("disk_io_counters", monkeypatch, NotImplementedError("/proc/diskstats nor /sys/block"))
    _fail("virtual_memory", monkeypatch, KeyError(b"MemTotal:"))
    _fail("swap_memory", monkeypatch, PermissionError(13, "Permission denied", "/proc/meminfo"))
    saved = dict(fake.meminfo)
    if file == "loadavg":
        fake.fail_load = OSError("Load averages are unobtainable")
    elif file.startswith("meminfo:"):
        del fake.meminfo[file.partition(":")[2]]
        fake.write()
    else:
        (fake.root / file).unlink()
        collector.close()  # kept descriptors would still read the deleted file: open again
    reading = collector.sample()
    assert says in reading.unavailable[key], reading.unavailable[key]
    values = {
        "cpu": reading.cpu.total_percent,
        "memory.total_bytes": reading.memory.total_bytes,
        "memory.swap_used_bytes": reading.memory.swap_used_bytes,
        "network": reading.network.rx_bytes_per_s,
        "storage": reading.storage.read_bytes_per_s,
        "cpu.load_avg_1m": reading.cpu.load_avg_1m,
    }
    assert values.pop(key) is None
    if file == "meminfo":  # one file for both: total and swap go together
        values.pop("memory.swap_used_bytes" if key == "memory.total_bytes" else "memory.total_bytes")
    assert None not in values.values()  # the rest of the reading is unaffected
    if key == "memory.total_bytes":
        assert reading.memory.used_bytes is None and reading.memory.available_bytes is None
    if file == "stat":
        assert reading.cpu.per_core_percent == () and reading.cpu.count is None

    # The next tick has no previous reading to take a rate from; the one after recovers.
    fake.fail_load = None
    fake.meminfo = saved
    fake.write()
    reading = collector.sample()
    if key in ("cpu", "network", "storage"):
        assert "no previous reading" in reading.unavailable[key]
    else:
        assert reading.unavailable == {}
    assert collector.sample().unavailable == {}


def test_core_count_change_drops_per_core_with_reason(fake: FakeProc, sys_root: Path) -> None:
    collector = _collector(fake, sys_root)
    fake.cores = [*fake.cores, Cpu(0, 0, 0, 0)]  # a core onlined
    fake.total = Cpu(150, 50, 800)
    fake.write()
    reading = collector.sample()
    assert reading.cpu.total_percent == pytest.approx(100.0)  # +50 busy of +50 total
    assert reading.cpu.per_core_percent == () and reading.cpu.count == 3
    assert "hotplug" in reading.unavailable["cpu.per_core_percent"]


def test_no_whole_disks_is_none_with_reason(fake: FakeProc, tmp_path: Path) -> None:
    reading = HostCollector(sys_root=tmp_path / "empty-sys", proc_root=fake.root).sample()
    assert reading.storage.read_bytes_per_s is None and reading.storage.write_bytes_per_s is None
    assert "no whole disks" in reading.unavailable["storage"]


def test_kept_files_are_read_afresh_and_closed(fake: FakeProc, sys_root: Path) -> None:
    collector = _collector(fake, sys_root)
    fake.nics = {**fake.nics, "eth0": (5500, 7000)}
    fake.write()
    assert collector.sample().network.interfaces[0].rx_bytes == 5500
    fds = set(os.listdir("/proc/self/fd"))
    fake.nics = {**fake.nics, "eth0": (5600, 7000)}
    fake.write()
    assert collector.sample().network.interfaces[0].rx_bytes == 5600  # the same descriptor, read from the start
    assert set(os.listdir("/proc/self/fd")) == fds  # nothing opened again
    collector.close()
    after = set(os.listdir("/proc/self/fd"))
    assert after < fds and len(fds - after) == 4  # stat, meminfo, net/dev, diskstats


def _meminfo_bytes(key: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(key)


def test_fake_records_match_real_psutil() -> None:
    assert Svmem._fields == psutil.virtual_memory()._fields
    assert Sswap._fields == psutil.swap_memory()._fields
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
