"""Host collector: parsers on literal procfs text, a fake /proc, and the real
machine checked against psutil / procfs read independently.

Tolerances: CPU % within 15 points of psutil over the same window (the
machine is shared with other busy processes, so the two windows' few
milliseconds of difference matter); memory used within 64 MiB of
MemTotal - MemAvailable read by the test (memory moves between reads).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil
import pytest

from gpulens.collectors import host
from gpulens.collectors.host import (
    HostCollector,
    parse_diskstats,
    parse_meminfo,
    parse_net_dev,
    parse_proc_stat,
    whole_disks,
)

STAT = """cpu  100 0 50 800 50 0 0 0 0 0
cpu0 50 0 25 400 25 0 0 0 0 0
cpu1 50 0 25 400 25 0 0 0 0 0
intr 1 2 3
"""
NET_DEV = """Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo: 1000 10 0 0 0 0 0 0 1000 10 0 0 0 0 0 0
  eth0: 5000 20 0 0 0 0 0 0 7000 30 0 0 0 0 0 0
"""
DISKSTATS = """ 254 0 vda 100 0 2000 0 50 0 4000 0 0 0 0 0 0 0 0 0 0
 254 1 vda1 100 0 2000 0 50 0 4000 0 0 0 0 0 0 0 0 0 0
   7 0 loop0 100 0 9999 0 50 0 9999 0 0 0 0 0 0 0 0 0 0
"""
MEMINFO = """MemTotal:       1000 kB
MemFree:         200 kB
MemAvailable:    600 kB
SwapTotal:       100 kB
SwapFree:         40 kB
HugePages_Total:   0
"""


def test_parsers_on_literal_text() -> None:
    assert parse_proc_stat(STAT) == {"cpu": (150, 1000), "cpu0": (75, 500), "cpu1": (75, 500)}
    assert parse_net_dev(NET_DEV) == {"lo": (1000, 1000), "eth0": (5000, 7000)}
    assert parse_diskstats(DISKSTATS, frozenset({"vda"})) == {"vda": (2000 * 512, 4000 * 512)}
    info = parse_meminfo(MEMINFO)
    assert info["MemTotal"] == 1024_000 and info["HugePages_Total"] == 0


def _fake_root(tmp_path: Path) -> tuple[Path, Path]:
    proc, sys_root = tmp_path / "proc", tmp_path / "sys"
    (proc / "net").mkdir(parents=True)
    (proc / "stat").write_text(STAT)
    (proc / "net" / "dev").write_text(NET_DEV)
    (proc / "diskstats").write_text(DISKSTATS)
    (proc / "meminfo").write_text(MEMINFO)
    (proc / "loadavg").write_text("0.50 0.40 0.30 1/100 999\n")
    for name, kind in (("lo", "772"), ("eth0", "1")):
        (sys_root / "class" / "net" / name).mkdir(parents=True)
        (sys_root / "class" / "net" / name / "type").write_text(kind + "\n")
    (sys_root / "block" / "vda" / "device").mkdir(parents=True)
    (sys_root / "block" / "loop0").mkdir(parents=True)  # no device/: virtual, excluded
    return proc, sys_root


def test_fake_proc_rates_are_exact_and_exclude_loopback_partitions_loops(tmp_path: Path) -> None:
    proc, sys_root = _fake_root(tmp_path)
    t0 = time.monotonic()
    collector = HostCollector(proc, sys_root)
    (proc / "stat").write_text(
        "cpu  190 0 60 900 50 0 0 0 0 0\n"  # +100 busy of +200 total -> 50 %
        "cpu0 140 0 35 400 25 0 0 0 0 0\n"  # +100 of +100 -> 100 %
        "cpu1 50 0 25 500 25 0 0 0 0 0\n"  # +0 of +100 -> 0 %
    )
    (proc / "net" / "dev").write_text(NET_DEV.replace("5000 20", "6000 20").replace("1000 10 0 0 0 0 0 0 1000", "9000 10 0 0 0 0 0 0 9000"))
    (proc / "diskstats").write_text(DISKSTATS.replace("vda 100 0 2000", "vda 100 0 4000"))
    reading = collector.sample()
    elapsed = time.monotonic() - t0
    assert reading.cpu.total_percent == pytest.approx(50.0)
    assert reading.cpu.per_core_percent == (100.0, 0.0)
    assert reading.cpu.count == 2 and reading.cpu.load_avg_1m == 0.5
    assert reading.memory.total_bytes == 1000 * 1024
    assert reading.memory.used_bytes == 400 * 1024
    assert reading.memory.swap_used_bytes == 60 * 1024
    assert [i.name for i in reading.network.interfaces] == ["eth0"]  # lo excluded
    # 1000 bytes over an interval between MIN_INTERVAL_S and the elapsed time.
    assert 1000 / elapsed <= reading.network.rx_bytes_per_s <= 1000 / host.MIN_INTERVAL_S
    assert reading.network.tx_bytes_per_s == 0.0
    assert [d.name for d in reading.storage.disks] == ["vda"]
    assert 2000 * 512 / elapsed <= reading.storage.read_bytes_per_s <= 2000 * 512 / host.MIN_INTERVAL_S
    assert reading.unavailable == {}


def test_counter_reset_gives_reason_not_zero(tmp_path: Path) -> None:
    proc, sys_root = _fake_root(tmp_path)
    collector = HostCollector(proc, sys_root)
    (proc / "net" / "dev").write_text(NET_DEV.replace("5000 20", "10 20"))
    reading = collector.sample()
    assert reading.network.interfaces == ()
    assert "reset" in reading.unavailable["network.eth0"]


def test_missing_memavailable_is_none_with_reason(tmp_path: Path) -> None:
    proc, sys_root = _fake_root(tmp_path)
    (proc / "meminfo").write_text("MemTotal: 1000 kB\nMemFree: 10 kB\n")
    reading = HostCollector(proc, sys_root).sample()
    assert reading.memory.used_bytes is None
    assert "MemAvailable" in reading.unavailable["memory.available_bytes"]


def _meminfo_bytes(key: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(key)


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
