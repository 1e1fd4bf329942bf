"""The direct /proc readers (collectors/procstat.py) against psutil, and against hostile files.

psutil's answer is the reference: both read one snapshot of this machine's
/proc files (``psutil.PROCFS_PATH`` pointed at a copy), so the figures must be
equal, not merely close. Hostile files (junk, truncated lines, huge numbers,
a FIFO, a file larger than the bound) must give a reason naming the file,
never a number, and never hang.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from gpulens.collectors.host import HostCollector, whole_disks
from gpulens.collectors.procstat import (
    SECTOR_BYTES,
    KeptStats,
    ProcFile,
    parse_cpu_lines,
    parse_diskstats,
    parse_meminfo,
    parse_net_dev,
)

CLK_TCK = os.sysconf("SC_CLK_TCK")
FILES = ("stat", "meminfo", "net/dev", "diskstats")


@pytest.fixture
def snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """One copy of this machine's /proc files, which psutil reads too."""
    root = tmp_path / "proc"
    (root / "net").mkdir(parents=True)
    for name in (*FILES, "vmstat"):  # vmstat: psutil's swap in/out figures
        (root / name).write_bytes(Path("/proc", name).read_bytes())
    monkeypatch.setattr(psutil, "PROCFS_PATH", str(root))
    return root


def test_cpu_lines_equal_psutils_on_this_machine(snapshot: Path) -> None:
    (busy, total), cores = parse_cpu_lines((snapshot / "stat").read_bytes())
    # psutil's seconds are the kernel's jiffies / CLK_TCK; busy and total as `top` counts them.
    for ours, theirs in zip([(busy, total), *cores], [psutil.cpu_times(), *psutil.cpu_times(percpu=True)],
                            strict=True):
        their_total = sum(theirs) - theirs.guest - theirs.guest_nice
        their_busy = their_total - theirs.idle - theirs.iowait
        assert ours[0] / CLK_TCK == pytest.approx(their_busy, rel=1e-12, abs=1e-9)
        assert ours[1] / CLK_TCK == pytest.approx(their_total, rel=1e-12, abs=1e-9)
    assert len(cores) == psutil.cpu_count() == os.cpu_count()


def test_meminfo_equals_psutils_on_this_machine(snapshot: Path) -> None:
    mem = parse_meminfo((snapshot / "meminfo").read_bytes(),
                        (b"MemTotal", b"MemFree", b"MemAvailable", b"SwapTotal", b"SwapFree"))
    vm, swap = psutil.virtual_memory(), psutil.swap_memory()
    assert mem[b"MemTotal"] == vm.total and mem[b"MemFree"] == vm.free
    assert 0 < mem[b"MemAvailable"] <= mem[b"MemTotal"]
    assert mem[b"MemAvailable"] == vm.available
    assert mem[b"SwapTotal"] - mem[b"SwapFree"] == swap.used


def test_net_dev_equals_psutils_on_this_machine(snapshot: Path) -> None:
    ours = {os.fsdecode(name): (rx, tx) for name, rx, tx in parse_net_dev((snapshot / "net/dev").read_bytes())}
    theirs = psutil.net_io_counters(pernic=True, nowrap=False)
    assert ours == {name: (c.bytes_recv, c.bytes_sent) for name, c in theirs.items()}
    assert "lo" in ours


def test_diskstats_equal_psutils_on_this_machine(snapshot: Path) -> None:
    ours = parse_diskstats((snapshot / "diskstats").read_bytes(), os.fsdecode)
    theirs = psutil.disk_io_counters(perdisk=True, nowrap=False) or {}
    assert ours == {name: (c.read_bytes, c.write_bytes) for name, c in theirs.items()}


def test_diskstats_keeps_only_the_devices_asked_for() -> None:
    data = (b"   8  0 sda 10 0 20 0 30 0 40 0 0 0 0\n"
            b"   8  1 sda1 10 20 30 40\n"  # Linux 2.6's short partition line: reads, sectors read, writes, written
            b"   7  0 loop0 1 0 2 0 3 0 4 0 0 0 0 0 0 0 0 0 0\n")
    wanted = {b"sda": "sda", b"sda1": "sda1"}
    assert parse_diskstats(data, wanted.get) == {"sda": (20 * SECTOR_BYTES, 40 * SECTOR_BYTES),
                                                 "sda1": (20 * SECTOR_BYTES, 40 * SECTOR_BYTES)}


def test_proc_file_reads_afresh_and_grows_to_its_bound(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    f = ProcFile(str(path), size=16, limit=1000)
    assert f.read() == b"x" * 100  # grew 16 -> 64 -> 256
    with open(path, "r+b") as out:
        out.write(b"y" * 10)
    assert f.read() == b"y" * 10 + b"x" * 90  # the same descriptor, from the start
    path.write_bytes(b"z" * 5000)
    with pytest.raises(ValueError, match="larger than 1000 bytes"):
        f.read()
    enough = ProcFile(str(path), size=16, limit=1000, enough=b"zz")
    assert enough.read() == b"z" * 16  # the marker is in the first 16 bytes: nothing more read
    f.close()
    f.close()  # twice is fine


def test_proc_file_opens_again_after_a_failed_read(tmp_path: Path) -> None:
    f = ProcFile(str(tmp_path / "absent"))
    with pytest.raises(FileNotFoundError):
        f.read()
    (tmp_path / "absent").write_bytes(b"back")
    assert f.read() == b"back"


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00\xff\x1b[31m junk",
        b"intr 1 2 3\ncpu  1 2 3 4\n",  # the aggregate line must come first
        b"cpu  1 2 x 4 5 6 7 8\n",
        b"cpu  1 2 3\n",  # fewer than user nice system idle
        b"cpu  " + b"9" * 5000 + b" 1 1 1\n",  # past Python's int digit limit
        b"cpu  1 2 3 4 5 6 7 8\ncpu0 1 2\n",
    ],
)
def test_hostile_stat_is_refused(data: bytes) -> None:
    with pytest.raises(ValueError):
        parse_cpu_lines(data)


def test_hostile_meminfo_is_refused_or_left_out() -> None:
    assert parse_meminfo(b"\x00\xff junk\nMemTotalX: 5 kB\n", (b"MemTotal",)) == {}  # absent, not 0
    with pytest.raises(ValueError):
        parse_meminfo(b"MemTotal:\nMemFree: 1 kB\n", (b"MemTotal",))
    with pytest.raises(ValueError):
        parse_meminfo(b"MemTotal: lots kB\n", (b"MemTotal",))
    assert parse_meminfo(b"MemFree: 1 kB\nMemTotal:   7 kB", (b"MemTotal", b"MemFree")) == {
        b"MemTotal": 7 * 1024, b"MemFree": 1024}  # no final newline, any order


@pytest.mark.parametrize(
    "data",
    [
        b"h1\nh2\nno colon here 1 2 3\n",
        b"h1\nh2\neth0: 1 2 3\n",
        b"h1\nh2\neth0: 1 2 3 4 5 6 7 8 x 1 1 1 1 1 1 1\n",
    ],
)
def test_hostile_net_dev_is_refused(data: bytes) -> None:
    with pytest.raises(ValueError):
        parse_net_dev(data)


@pytest.mark.parametrize(
    "data",
    [
        b"8 0\n",
        b"8 0 sda 1 2 3 4 5\n",  # neither 4 nor 11+ counters
        b"8 0 sda 1 2 x 4 5 6 7 8 9 10 11\n",
    ],
)
def test_hostile_diskstats_is_refused_for_a_kept_disk(data: bytes) -> None:
    with pytest.raises(ValueError):
        parse_diskstats(data, {b"sda": "sda"}.get)
    if data.split()[2:3] == [b"sda"]:
        assert parse_diskstats(data, lambda name: None) == {}  # a device left out is not even parsed


@pytest.fixture
def hostile_root(tmp_path: Path) -> Path:
    root = tmp_path / "proc"
    (root / "net").mkdir(parents=True)
    for name in FILES:
        (root / name).write_bytes(Path("/proc", name).read_bytes())
    return root


@pytest.mark.parametrize(
    ("file", "key", "junk"),
    [
        ("stat", "cpu", b"\x1b]0;owned\x07 cpu 1 2\n"),
        ("meminfo", "memory.total_bytes", b"MemTotal: \xff\xfe kB\n"),
        ("net/dev", "network", b"Inter\nface\n" + b"eth0: 1 2\n"),
        ("diskstats", "storage", b"x" * (5 << 20)),  # past the 4 MiB bound
    ],
)
def test_hostile_file_gives_the_collector_a_reason_not_a_number(
    hostile_root: Path, file: str, key: str, junk: bytes
) -> None:
    if key == "storage" and not whole_disks():
        pytest.skip("no whole disks here: storage is n/a before any file is read")
    collector = HostCollector(proc_root=hostile_root)
    with open(hostile_root / file, "r+b") as f:  # in place: the collector keeps the file open
        f.truncate()
        f.write(junk)
    reading = collector.sample()
    assert f"{hostile_root}/{file} failed:" in reading.unavailable[key]
    assert "Error(" in reading.unavailable[key]
    numbers = {"cpu": reading.cpu.total_percent, "memory.total_bytes": reading.memory.total_bytes,
               "network": reading.network.rx_bytes_per_s, "storage": reading.storage.read_bytes_per_s}
    assert numbers.pop(key) is None
    assert None not in numbers.values()
    collector.close()


def test_a_fifo_in_place_of_a_proc_file_does_not_hang(tmp_path: Path) -> None:
    root = tmp_path / "proc"
    (root / "net").mkdir(parents=True)
    for name in FILES:
        (root / name).write_bytes(Path("/proc", name).read_bytes())
    (root / "stat").unlink()
    os.mkfifo(root / "stat")  # no writer: a blocking open or read would wait for ever
    t0 = time.monotonic()
    reading = HostCollector(proc_root=root).sample()
    assert time.monotonic() - t0 < 5
    assert "stat failed:" in reading.unavailable["cpu"] and reading.cpu.total_percent is None


# -- kept /proc/PID/stat files ----------------------------------------------------------------


def _read_path(path: str, size: int) -> bytes:
    with open(path, "rb") as f:
        return f.read(size)


def test_kept_stat_is_fresh_and_fails_over_to_the_path_when_its_process_is_gone() -> None:
    child = subprocess.Popen(["sleep", "60"])
    try:
        stats = KeptStats("/proc", _read_path)
        name = str(child.pid)
        first = stats.read(name, keep=True)
        assert first.split()[0] == name.encode() and name in stats._fds
        os.kill(child.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while stats.read(name, keep=True).split(b") ")[1][:1] != b"T" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert stats.read(name, keep=True).split(b") ")[1][:1] == b"T"  # read afresh through the kept file
        child.kill()
        child.wait()  # reaped: the kept file now fails with ESRCH, and the path with ENOENT
        with pytest.raises(OSError):
            stats.read(name, keep=True)
        assert name not in stats._fds
    finally:
        child.kill()
        child.wait()


def test_kept_stats_are_bounded_and_swept() -> None:
    pid = str(os.getpid())
    stats = KeptStats("/proc", _read_path, limit=1)
    stats.read(pid, keep=True)
    stats.read("1", keep=True)  # over the limit: read by path, not kept
    stats.read("self", keep=False)
    assert list(stats._fds) == [pid]
    stats.sweep()
    assert list(stats._fds) == [pid]  # read since the last sweep
    stats.sweep()
    assert stats._fds == {}  # not read since: closed
    stats.read(pid, keep=True)
    stats.close()
    assert stats._fds == {}
