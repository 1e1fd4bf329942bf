"""Exact window statistics: max/min over any window equal the raw samples', "now" is the last one."""

from __future__ import annotations

import math
import random
import struct
from dataclasses import replace

from gpulens.core.events import SampleEvent
from gpulens.core.model import GpuProcess, JobInfo
from gpulens.store.store import Store
from tests.unit.store.test_store import T0, sample

WINDOWS = (60, 300, 900, 3600)


def f32(v: float) -> float:
    """``v`` as the store keeps it (float32)."""
    return float(struct.unpack("f", struct.pack("f", v))[0])


def _feed(store: Store, n: int, seed: int) -> list[tuple[float, float]]:
    """``n`` samples 1 s apart with a noisy CPU and a few one-second spikes; returns (time, cpu)."""
    rng = random.Random(seed)
    spikes = {rng.randrange(n) for _ in range(6)} | {n - 1 - 700, n - 1 - 40}  # one in 15m only, one in 1m
    raw = []
    for i in range(n):
        cpu = 99.5 if i in spikes else round(rng.uniform(20, 60), 3)
        if i % 97 == 0:
            cpu = 0.25  # dips, for min
        t = T0 + i
        raw.append((t, cpu))
        store.apply(SampleEvent(sample(t, cpu=cpu, util=(cpu if i % 5 else None))))
    return raw


def _in_window(store: Store, raw: list[tuple[float, float]], window_s: float) -> list[float]:
    """The raw values whose time falls in the window as the store defines it (whole 10 s buckets)."""
    now_cb = math.floor(store.now) // 10
    k = math.ceil(window_s / 10)
    return [v for t, v in raw if now_cb - k + 1 <= math.floor(t) // 10 <= now_cb]


def test_max_min_over_every_window_equal_the_raw_samples() -> None:
    store = Store()
    raw = _feed(store, 4000, seed=11)  # more than the hour the coarse tier holds
    for w in WINDOWS:
        vals = _in_window(store, raw, w)
        st = store.window_stats("h1", "cpu.total_percent", w)
        assert st.max == f32(max(vals)), w
        assert st.min == f32(min(vals)), w
        assert st.samples == len(vals)
        assert math.isclose(st.mean, sum(vals) / len(vals), rel_tol=1e-4)
        assert st.now == f32(raw[-1][1])
    # The spike 40 s ago is in every window, so every window's max is the same 99.5.
    assert {store.window_stats("h1", "cpu.total_percent", w).max for w in WINDOWS} == {99.5}


def test_stats_say_how_much_data_they_cover_and_skip_missing_values() -> None:
    store = Store()
    raw = _feed(store, 132, seed=5)  # 2m12s of data
    st = store.window_stats("h1", "cpu.total_percent", 3600)
    assert st.covered_s == 132 and st.samples == 132
    util = store.window_stats("h1", "gpu.utilization_percent", 3600)
    known = [v for i, (_, v) in enumerate(raw) if i % 5]
    assert util.samples == len(known) and util.max == f32(max(known))
    empty = store.window_stats("h1", "storage.read_bytes_per_s", 60)
    assert empty.empty and math.isnan(empty.max) and math.isnan(empty.now)


def test_backfilled_spike_counts() -> None:
    # An out-of-order sample for a bucket not seen yet (a gap filled late).
    store2 = Store()
    for i in range(0, 600):
        if i != 333:
            store2.apply(SampleEvent(sample(T0 + i, cpu=10.0)))
    store2.apply(SampleEvent(sample(T0 + 333, cpu=97.0), backfill=True))
    assert store2.window_stats("h1", "cpu.total_percent", 900).max == 97.0
    assert store2.window_stats("h1", "cpu.total_percent", 900).now == 10.0  # now: the newest, not the last applied


def test_per_gpu_and_job_stats_and_gpu_events() -> None:
    job = JobInfo(pid=9, tree_id="t", cmdline="python x", user="u", start_time=T0, cpu_percent=30.0,
                  rss_bytes=1000, gpu_mem_bytes={"0": 5 << 20}, job_key="J")
    store = Store()
    for i in range(30):
        s = sample(T0 + i, util=80.0 if i == 20 else 20.0, jobs=(job,))
        g = replace(s.gpus[0], throttle_reasons=("sw_thermal_slowdown",) if 10 <= i < 15 else (),
                    xid_events=(79,) if i == 25 else (), temperature_c=40.0 + i,
                    processes=(GpuProcess(pid=9, used_memory_bytes=5 << 20, sm_util_percent=12.0),))
        store.apply(SampleEvent(replace(s, gpus=(g,))))
        if i == 3:
            store.track_process("h1", 9)
    assert store.window_stats("h1", "gpu.temperature_c", 60, gpu=0).max == 69.0
    assert store.window_stats("h1", "gpu.utilization_percent", 60, gpu=0).max == 80.0
    assert store.job_stats("J", "job.cpu_percent", 60).max == 30.0
    events = store.gpu_events("h1", 0)
    assert [(e.time - T0, e.kind, e.detail) for e in events] == [
        (10, "throttle", "sw_thermal_slowdown"), (15, "throttle-end", "sw_thermal_slowdown"), (25, "xid", "79")]
    cpu = store.window_stats("h1", "proc.cpu_percent", 60, pid=9)
    assert cpu.samples == 27 and cpu.max == 30.0  # recorded from when tracking began (sample 3 on)
    assert store.window_stats("h1", "proc.gpu_util_percent", 60, pid=9).now == 12.0
    assert store.series("h1", "proc.rss_bytes", 30, 30, pid=9)[-1] == 1000.0
    store.processes.untrack("h1", 9)
    assert store.window_stats("h1", "proc.cpu_percent", 60, pid=9).empty
