"""The ``perf_event_open(2)`` syscall through ctypes, and sysfs event parsing.

Only counting mode is used: no sampling, no mmap ring. Each counter is
read with ``read_format = TOTAL_TIME_ENABLED | TOTAL_TIME_RUNNING`` so a
multiplexed counter can be scaled like ``perf stat`` does.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import struct
from pathlib import Path

PERF_TYPE_HARDWARE = 0
PERF_TYPE_HW_CACHE = 3
PERF_TYPE_RAW = 4

# PERF_TYPE_HW_CACHE config = cache id | (op << 8) | (result << 16)
_LL, _OP_READ, _RESULT_ACCESS, _RESULT_MISS = 2, 0, 0, 1
LLC_READ_ACCESS = _LL | (_OP_READ << 8) | (_RESULT_ACCESS << 16)
"""perf's ``LLC-loads``."""
LLC_READ_MISS = _LL | (_OP_READ << 8) | (_RESULT_MISS << 16)
"""perf's ``LLC-load-misses``."""

# Raw core-PMU encodings: (umask << 8) | event select.
INTEL_L2_RQSTS_REFERENCES = 0xFF24
"""L2_RQSTS.REFERENCES (event 0x24, umask 0xFF), Skylake and later."""
INTEL_L2_RQSTS_MISS = 0x3F24
"""L2_RQSTS.MISS (event 0x24, umask 0x3F), Skylake and later."""
AMD_L2_HIT = 0xF664
"""l2_cache_req_stat.ic_dc_hit_in_l2 (PMCx064, umask 0xF6), Zen."""
AMD_L2_MISS = 0x0964
"""l2_cache_req_stat.ic_dc_miss_in_l2 (PMCx064, umask 0x09), Zen."""

PERF_FORMAT_TOTAL_TIME_ENABLED = 1
PERF_FORMAT_TOTAL_TIME_RUNNING = 2
PERF_FLAG_FD_CLOEXEC = 8

_SYSCALL_NR = {"x86_64": 298, "aarch64": 241, "ppc64le": 319, "s390x": 331, "riscv64": 241}


class PerfEventAttr(ctypes.Structure):
    """``struct perf_event_attr`` up to ``config3`` (PERF_ATTR_SIZE_VER8, 136 bytes)."""

    _fields_ = (
        ("type", ctypes.c_uint32),
        ("size", ctypes.c_uint32),
        ("config", ctypes.c_uint64),
        ("sample_period", ctypes.c_uint64),
        ("sample_type", ctypes.c_uint64),
        ("read_format", ctypes.c_uint64),
        ("flags", ctypes.c_uint64),
        ("wakeup_events", ctypes.c_uint32),
        ("bp_type", ctypes.c_uint32),
        ("config1", ctypes.c_uint64),
        ("config2", ctypes.c_uint64),
        ("branch_sample_type", ctypes.c_uint64),
        ("sample_regs_user", ctypes.c_uint64),
        ("sample_stack_user", ctypes.c_uint32),
        ("clockid", ctypes.c_int32),
        ("sample_regs_intr", ctypes.c_uint64),
        ("aux_watermark", ctypes.c_uint32),
        ("sample_max_stack", ctypes.c_uint16),
        ("reserved_2", ctypes.c_uint16),
        ("aux_sample_size", ctypes.c_uint32),
        ("reserved_3", ctypes.c_uint32),
        ("sig_data", ctypes.c_uint64),
        ("config3", ctypes.c_uint64),
    )


_libc: ctypes.CDLL | None = None


def _syscall() -> tuple[ctypes.CDLL, int]:
    global _libc
    nr = _SYSCALL_NR.get(platform.machine())
    if nr is None:
        raise OSError(None, f"perf_event_open: unknown syscall number on {platform.machine()}")
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    return _libc, nr


def perf_event_open(type_: int, config: int, pid: int, cpu: int) -> int:
    """Open one counting event; returns the fd.

    Raises:
        OSError: with the kernel's errno (ENOENT: no such event here;
            EACCES: perf_event_paranoid too high).
    """
    libc, nr = _syscall()
    attr = PerfEventAttr()
    attr.type = type_
    attr.size = ctypes.sizeof(PerfEventAttr)
    attr.config = config
    attr.read_format = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING
    fd = libc.syscall(nr, ctypes.byref(attr), pid, cpu, -1, PERF_FLAG_FD_CLOEXEC)
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(fd)


def read_counter(fd: int) -> tuple[int, int, int]:
    """(value, time enabled ns, time running ns) of an open counter."""
    data = os.read(fd, 24)
    if len(data) != 24:
        raise OSError(None, f"perf counter read returned {len(data)} bytes, expected 24")
    value, enabled, running = struct.unpack("=QQQ", data)
    return value, enabled, running


def parse_cpumask(text: str) -> list[int]:
    """``"0,18"`` or ``"0-3"`` -> CPU numbers (a PMU's cpumask file)."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


def read_format_dir(path: Path) -> dict[str, list[tuple[int, int]]]:
    """A PMU's ``format/`` dir: term -> [(low bit, high bit)] inside ``config``."""
    fmt: dict[str, list[tuple[int, int]]] = {}
    for name in os.listdir(path):
        fmt[name] = parse_format((path / name).read_text())
    return fmt


def parse_format(text: str) -> list[tuple[int, int]]:
    """``"config:0-7,32-35"`` -> [(0, 7), (32, 35)]; only ``config`` is supported."""
    where, _, ranges = text.strip().partition(":")
    if where != "config":
        raise ValueError(f"format {text.strip()!r} is not in config")
    bits = []
    for r in ranges.split(","):
        lo, _, hi = r.partition("-")
        bits.append((int(lo), int(hi or lo)))
    return bits


def encode_event(text: str, fmt: dict[str, list[tuple[int, int]]]) -> int:
    """``"event=0x04,umask=0x03"`` -> the config value, bit-placed per ``fmt``."""
    config = 0
    for term in text.strip().split(","):
        key, _, raw = term.partition("=")
        value = int(raw, 0) if raw else 1
        if key not in fmt:
            raise ValueError(f"event term {key!r} not in the PMU's format")
        for lo, hi in fmt[key]:
            width = hi - lo + 1
            config |= (value & ((1 << width) - 1)) << lo
            value >>= width
    return config
