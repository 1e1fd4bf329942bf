"""L2/L3 cache hit ratios and memory bandwidth from ``perf_event_open``.

The syscall is made through ctypes (no extra dependency). Counters are
system-wide (pid -1, one per CPU), which needs ``perf_event_paranoid <= 0``
or CAP_PERFMON; VMs usually expose no hardware counters at all (ENOENT).
Either way the figure is None and the reason names the event and errno.
The events are listed in docs/perf-events.md; the arithmetic lives in the
pure functions :func:`hit_ratio`, :func:`scaled_delta` and
:func:`bandwidth_bytes_per_s`, tested on recorded counter values.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpulens.collectors.perf import syscall as sc
from gpulens.core.model import CacheSample

EVENT_SOURCES = Path("/sys/bus/event_source/devices")
CACHE_LINE_BYTES = 64
"""Bytes moved per IMC CAS command (one cache line)."""


@dataclass(frozen=True, slots=True)
class Reading:
    """One counter read: raw value, time enabled and time running (ns)."""

    value: int
    enabled_ns: int
    running_ns: int


@dataclass(frozen=True, slots=True)
class PerfReading:
    """Cache figures plus the reason for every None (keys ``cache.*``)."""

    cache: CacheSample
    unavailable: Mapping[str, str]


def scaled_delta(new: Reading, old: Reading) -> float | None:
    """Count over the interval, scaled up for multiplexing (as ``perf stat``).

    Returns None when the counter never ran in the interval.
    """
    running = new.running_ns - old.running_ns
    enabled = new.enabled_ns - old.enabled_ns
    if running <= 0:
        return None
    return (new.value - old.value) * (enabled / running)


def hit_ratio(accesses: float | None, misses: float | None) -> float | None:
    """1 - misses/accesses in 0..1; None with no accesses (a ratio of nothing)."""
    if accesses is None or misses is None or accesses <= 0:
        return None
    return min(1.0, max(0.0, 1.0 - misses / accesses))


def hit_ratio_from_hits(hits: float | None, misses: float | None) -> float | None:
    """hits/(hits+misses) in 0..1 (AMD counts hits and misses separately)."""
    if hits is None or misses is None or hits + misses <= 0:
        return None
    return min(1.0, max(0.0, hits / (hits + misses)))


def bandwidth_bytes_per_s(
    cas_reads: float | None, cas_writes: float | None, interval_s: float
) -> float | None:
    """(read + write CAS commands) * 64 bytes / interval; None if either is unknown."""
    if cas_reads is None or cas_writes is None or interval_s <= 0:
        return None
    return (cas_reads + cas_writes) * CACHE_LINE_BYTES / interval_s


def describe_errno(event: str, err: int, paranoid: str) -> str:
    """The reason shown for an event that cannot be opened."""
    name = errno.errorcode.get(err, str(err))
    if err in (errno.ENOENT, errno.EOPNOTSUPP, errno.ENODEV):
        why = "no hardware counters (VM?)"
    elif err in (errno.EACCES, errno.EPERM):
        why = f"perf_event_paranoid={paranoid} (system-wide counters need <= 0 or CAP_PERFMON)"
    elif err == errno.EMFILE:
        why = "too many open files"
    else:
        why = os.strerror(err)
    return f"perf_event_open({event}): {name} — {why}"


def _paranoid() -> str:
    try:
        return Path("/proc/sys/kernel/perf_event_paranoid").read_text().strip()
    except OSError:
        return "?"


def _cpu_vendor() -> str:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


class _Counter:
    """One event opened on a set of CPUs; the sum of its per-CPU readings."""

    def __init__(self, name: str, type_: int, config: int, cpus: Sequence[int]) -> None:
        self.name = name
        self.fds: list[int] = []
        try:
            for cpu in cpus:
                self.fds.append(sc.perf_event_open(type_, config, -1, cpu))
        except OSError:
            self.close()
            raise

    def read(self) -> Reading:
        total = [0, 0, 0]
        for fd in self.fds:
            for i, v in enumerate(sc.read_counter(fd)):
                total[i] += v
        return Reading(*total)

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []


def _online_cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0]


class PerfCollector:
    """Opens the counters once; :meth:`read` turns their deltas into figures."""

    def __init__(self, event_sources: Path = EVENT_SOURCES) -> None:
        self._counters: dict[str, _Counter] = {}
        self._unavailable: dict[str, str] = {}
        self._l2_from_hits = False
        paranoid = _paranoid()
        cpus = _online_cpus()

        def open_pair(field: str, pair: Sequence[tuple[str, int, int]], on: Sequence[int]) -> None:
            opened: list[tuple[str, _Counter]] = []
            for key, type_, config in pair:
                try:
                    opened.append((key, _Counter(key, type_, config, on)))
                except OSError as err:
                    for _k, c in opened:
                        c.close()
                    self._unavailable[field] = describe_errno(key, err.errno or 0, paranoid)
                    return
            self._counters.update(opened)

        open_pair("cache.l3_hit_ratio", [
            ("LLC-loads", sc.PERF_TYPE_HW_CACHE, sc.LLC_READ_ACCESS),
            ("LLC-load-misses", sc.PERF_TYPE_HW_CACHE, sc.LLC_READ_MISS),
        ], cpus)
        vendor = _cpu_vendor()
        if vendor == "GenuineIntel":
            open_pair("cache.l2_hit_ratio", [
                ("l2_rqsts.references", sc.PERF_TYPE_RAW, sc.INTEL_L2_RQSTS_REFERENCES),
                ("l2_rqsts.miss", sc.PERF_TYPE_RAW, sc.INTEL_L2_RQSTS_MISS),
            ], cpus)
        elif vendor == "AuthenticAMD":
            self._l2_from_hits = True
            open_pair("cache.l2_hit_ratio", [
                ("l2_cache_req_stat.ic_dc_hit_in_l2", sc.PERF_TYPE_RAW, sc.AMD_L2_HIT),
                ("l2_cache_req_stat.ic_dc_miss_in_l2", sc.PERF_TYPE_RAW, sc.AMD_L2_MISS),
            ], cpus)
        else:
            self._unavailable["cache.l2_hit_ratio"] = f"no L2 event known for CPU vendor {vendor or '?'}"
        self._open_imc(event_sources)
        self._last_time = time.monotonic()
        self._last = {k: c.read() for k, c in self._counters.items()}

    def _open_imc(self, event_sources: Path) -> None:
        field = "cache.mem_bandwidth_bytes_per_s"
        pmus = sorted(p for p in _listdir(event_sources) if p.startswith("uncore_imc"))
        if not pmus:
            self._unavailable[field] = f"no uncore_imc PMU in {event_sources} (VM or non-Intel CPU)"
            return
        reads: list[_Counter] = []
        writes: list[_Counter] = []
        paranoid = _paranoid()
        try:
            for pmu in pmus:
                dev = event_sources / pmu
                type_ = int((dev / "type").read_text())
                cpus = sc.parse_cpumask((dev / "cpumask").read_text()) if (dev / "cpumask").exists() else [0]
                fmt = sc.read_format_dir(dev / "format")
                rd = sc.encode_event((dev / "events" / "cas_count_read").read_text(), fmt)
                wr = sc.encode_event((dev / "events" / "cas_count_write").read_text(), fmt)
                reads.append(_Counter(f"{pmu}/cas_count_read", type_, rd, cpus))
                writes.append(_Counter(f"{pmu}/cas_count_write", type_, wr, cpus))
        except OSError as err:
            for c in reads + writes:
                c.close()
            if err.errno is None:
                self._unavailable[field] = f"uncore_imc: {err}"
            else:
                self._unavailable[field] = describe_errno(f"{pmus[0]}/cas_count_read", err.errno, paranoid)
            return
        except ValueError as err:
            for c in reads + writes:
                c.close()
            self._unavailable[field] = f"uncore_imc: unexpected sysfs format: {err}"
            return
        for i, c in enumerate(reads):
            self._counters[f"imc_read{i}"] = c
        for i, c in enumerate(writes):
            self._counters[f"imc_write{i}"] = c

    def read(self) -> PerfReading:
        """Figures over the interval since the previous call (or construction)."""
        if not self._counters:  # none opened here (no PMU, not permitted): no figure, each with its reason
            unavailable = dict(self._unavailable)
            for field in _FIELDS:
                unavailable.setdefault(field, NO_EVENTS)
            return PerfReading(CacheSample(), unavailable)
        now = time.monotonic()
        current = {k: c.read() for k, c in self._counters.items()}
        deltas = {k: scaled_delta(current[k], self._last[k]) for k in current}
        dt = now - self._last_time
        self._last, self._last_time = current, now
        unavailable = dict(self._unavailable)
        l3 = hit_ratio(deltas["LLC-loads"], deltas["LLC-load-misses"]) if "LLC-loads" in deltas else None
        l2 = self._l2_ratio(deltas)
        bw = _bandwidth(deltas, dt)
        for field, value in zip(_FIELDS, (l3, l2, bw), strict=True):
            if value is None and field not in unavailable:
                unavailable[field] = NO_EVENTS
        return PerfReading(CacheSample(l2, l3, bw), unavailable)

    def _l2_ratio(self, deltas: dict[str, float | None]) -> float | None:
        """The L2 hit ratio from AMD's hit/miss events or Intel's references/misses (None: neither counted)."""
        if self._l2_from_hits and "l2_cache_req_stat.ic_dc_hit_in_l2" in deltas:
            return hit_ratio_from_hits(
                deltas["l2_cache_req_stat.ic_dc_hit_in_l2"], deltas["l2_cache_req_stat.ic_dc_miss_in_l2"]
            )
        if "l2_rqsts.references" in deltas:
            return hit_ratio(deltas["l2_rqsts.references"], deltas["l2_rqsts.miss"])
        return None

    def close(self) -> None:
        """Close every counter fd."""
        for c in self._counters.values():
            c.close()
        self._counters = {}


_FIELDS = ("cache.l3_hit_ratio", "cache.l2_hit_ratio", "cache.mem_bandwidth_bytes_per_s")
NO_EVENTS = "no counted events in the interval"


def _bandwidth(deltas: dict[str, float | None], dt: float) -> float | None:
    """Memory bandwidth from the uncore IMC read/write counts (None: no IMC counter, or one not counted)."""
    imc_r = [v for k, v in deltas.items() if k.startswith("imc_read")]
    imc_w = [v for k, v in deltas.items() if k.startswith("imc_write")]
    if not imc_r:
        return None
    known = None not in imc_r and None not in imc_w
    return bandwidth_bytes_per_s(
        sum(v for v in imc_r if v is not None) if known else None,
        sum(v for v in imc_w if v is not None), dt,
    )


def _listdir(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []
