"""perf_event_open: the arithmetic on hand-computed counter values, the sysfs
event encoding, and the unavailable path for real on this machine.

No recorded hardware counter values exist in the fixtures (these VMs have no
hardware counters), so the arithmetic is checked on values computed by hand
in the shape ``perf stat`` reports them.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
from pathlib import Path

import pytest

from gpulens.collectors.perf import syscall as sc
from gpulens.collectors.perf.counters import (
    PerfCollector,
    Reading,
    bandwidth_bytes_per_s,
    describe_errno,
    hit_ratio,
    hit_ratio_from_hits,
    scaled_delta,
)

REASON = re.compile(r"perf_event_open\([^)]+\): E[A-Z]+ — |no uncore_imc PMU|no L2 event known")


def test_hit_ratios() -> None:
    # perf stat: 1,000,000 LLC-loads, 250,000 LLC-load-misses -> 75 % hits.
    assert hit_ratio(1_000_000, 250_000) == pytest.approx(0.75)
    assert hit_ratio(0, 0) is None  # nothing accessed: no ratio, not 100 %
    assert hit_ratio(None, 5) is None
    assert hit_ratio(100, 150) == 0.0  # multiplexing can overshoot; clamp
    # AMD counts hits and misses: 900 hits, 100 misses -> 90 %.
    assert hit_ratio_from_hits(900, 100) == pytest.approx(0.9)
    assert hit_ratio_from_hits(0, 0) is None


def test_scaled_delta_multiplexing() -> None:
    old = Reading(value=1_000, enabled_ns=1_000_000, running_ns=1_000_000)
    # ran half of the 2 ms it was enabled: 500 counted -> 1,000 estimated.
    new = Reading(value=1_500, enabled_ns=3_000_000, running_ns=2_000_000)
    assert scaled_delta(new, old) == pytest.approx(1_000)
    assert scaled_delta(old, old) is None  # never scheduled in the interval


def test_bandwidth() -> None:
    # 10 M read CAS + 5 M write CAS in 0.5 s, 64 B each -> 1.92 GB/s.
    assert bandwidth_bytes_per_s(10e6, 5e6, 0.5) == pytest.approx(1.92e9)
    assert bandwidth_bytes_per_s(None, 5e6, 0.5) is None
    assert bandwidth_bytes_per_s(1, 1, 0) is None


def test_sysfs_event_encoding() -> None:
    # Intel uncore_imc: format/event = config:0-7, format/umask = config:8-15,
    # events/cas_count_read = event=0x04,umask=0x03 (Linux uncore_snbep.c).
    fmt = {"event": sc.parse_format("config:0-7"), "umask": sc.parse_format("config:8-15")}
    assert sc.encode_event("event=0x04,umask=0x03\n", fmt) == 0x0304
    # AMD core PMU: event = config:0-7,32-35 (a split field).
    amd = {"event": sc.parse_format("config:0-7,32-35"), "umask": sc.parse_format("config:8-15")}
    assert sc.encode_event("event=0x164,umask=0x1", amd) == 0x1_0000_0164  # 0x64 at bits 0-7, 0x1 at 32, umask 1 at 8
    with pytest.raises(ValueError, match="not in the PMU"):
        sc.encode_event("cmask=1", fmt)
    with pytest.raises(ValueError, match="not in config"):
        sc.parse_format("config1:0-7")
    assert sc.parse_cpumask("0,18\n") == [0, 18]
    assert sc.parse_cpumask("0-3") == [0, 1, 2, 3]


def test_attr_layout_and_hw_cache_configs() -> None:
    assert ctypes.sizeof(sc.PerfEventAttr) == 136  # PERF_ATTR_SIZE_VER8
    assert sc.LLC_READ_ACCESS == 0x2 and sc.LLC_READ_MISS == 0x10002


def test_describe_errno() -> None:
    assert describe_errno("LLC-loads", errno.ENOENT, "2") == (
        "perf_event_open(LLC-loads): ENOENT — no hardware counters (VM?)"
    )
    assert "perf_event_paranoid=2" in describe_errno("LLC-loads", errno.EACCES, "2")


def test_syscall_plumbing_with_a_software_event() -> None:
    # cpu-clock of this process is allowed even at perf_event_paranoid 2.
    fd = sc.perf_event_open(1, 0, 0, -1)  # PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK
    try:
        first = sc.read_counter(fd)
        sum(range(200_000))
        second = sc.read_counter(fd)
    finally:
        os.close(fd)
    assert second[0] > first[0] > 0
    assert second[2] <= second[1]


def test_real_collector_figures_or_errno_reasons() -> None:
    collector = PerfCollector()
    try:
        sum(range(100_000))
        reading = collector.read()
    finally:
        collector.close()
    for field in ("l2_hit_ratio", "l3_hit_ratio", "mem_bandwidth_bytes_per_s"):
        value = getattr(reading.cache, field)
        if value is None:
            reason = reading.unavailable[f"cache.{field}"]
            assert REASON.search(reason) or reason == "no counted events in the interval", reason
        elif field.endswith("ratio"):
            assert 0.0 <= value <= 1.0
        else:
            assert value >= 0.0


def test_fake_uncore_pmu_fails_with_errno_reason(tmp_path: Path) -> None:
    imc = tmp_path / "uncore_imc_0"
    (imc / "format").mkdir(parents=True)
    (imc / "events").mkdir()
    (imc / "type").write_text("987654\n")  # no such PMU type in the kernel
    (imc / "cpumask").write_text("0\n")
    (imc / "format" / "event").write_text("config:0-7\n")
    (imc / "format" / "umask").write_text("config:8-15\n")
    (imc / "events" / "cas_count_read").write_text("event=0x04,umask=0x03\n")
    (imc / "events" / "cas_count_write").write_text("event=0x04,umask=0x0c\n")
    collector = PerfCollector(event_sources=tmp_path)
    try:
        reading = collector.read()
    finally:
        collector.close()
    assert reading.cache.mem_bandwidth_bytes_per_s is None
    reason = reading.unavailable["cache.mem_bandwidth_bytes_per_s"]
    assert reason.startswith("perf_event_open(uncore_imc_0/cas_count_read): E"), reason


def test_fake_uncore_pmu_with_bad_format(tmp_path: Path) -> None:
    imc = tmp_path / "uncore_imc_0"
    (imc / "format").mkdir(parents=True)
    (imc / "events").mkdir()
    (imc / "type").write_text("not a number\n")
    collector = PerfCollector(event_sources=tmp_path)
    try:
        reason = collector.read().unavailable["cache.mem_bandwidth_bytes_per_s"]
    finally:
        collector.close()
    assert "unexpected sysfs format" in reason
