"""Unit tests of the store and its ring buffers (no textual)."""

from __future__ import annotations

import math
import subprocess
import sys
from dataclasses import replace

from gpulens.core.events import Emit, HostStatusEvent, SampleEvent, SourceEvent, SourceStatusEvent
from gpulens.core.model import (
    CpuSample,
    GpuSample,
    HostSample,
    JobInfo,
    MemorySample,
    NetworkSample,
    StorageSample,
)
from gpulens.sources.demo import DemoSource
from gpulens.store.resample import resample
from gpulens.store.ring import Ring
from gpulens.store.store import Store, memory_estimate_bytes

T0 = 1_700_000_000.0


def sample(t: float, host: str = "h1", util: float | None = 50.0, cpu: float | None = 10.0,
           jobs: tuple[JobInfo, ...] = ()) -> HostSample:
    gpu = GpuSample(index=0, name="G", uuid="u", utilization_percent=util, mem_used_bytes=40,
                    mem_total_bytes=80, power_w=100.0,
                    unavailable={} if util is not None else {"utilization_percent": "not supported"})
    return HostSample(host=host, time=t, cpu=CpuSample(total_percent=cpu),
                      memory=MemorySample(total_bytes=100, used_bytes=25),
                      network=NetworkSample(rx_bytes_per_s=1.0, tx_bytes_per_s=2.0),
                      storage=StorageSample(read_bytes_per_s=None, write_bytes_per_s=None),
                      gpus=(gpu,), jobs=jobs,
                      unavailable={"storage.read_bytes_per_s": "no disks"})


def feed(store: Store) -> Emit:
    """A source's ``emit`` that applies each event to ``store`` (dropping apply's changed flag)."""
    def emit(event: SourceEvent) -> None:
        store.apply(event)

    return emit


def test_window_mean_and_series() -> None:
    store = Store()
    for i in range(120):
        store.apply(SampleEvent(sample(T0 + i, util=float(i % 2) * 100)))
    assert store.now == T0 + 119
    assert math.isclose(store.window_mean("h1", "gpu.utilization_percent", 60), 50.0, abs_tol=5)
    assert math.isclose(store.window_mean("h1", "cpu.total_percent", 300), 10.0, rel_tol=1e-6)
    series = store.series("h1", "cpu.total_percent", 60, 60)
    assert len(series) == 60 and all(math.isclose(v, 10.0, rel_tol=1e-6) for v in series)
    assert store.window_mean("h1", "memory.used_percent", 60) == 25.0
    assert math.isnan(store.window_mean("h1", "storage.read_bytes_per_s", 60))
    assert store.unavailable("h1", "storage.read_bytes_per_s") == "no disks"


def test_out_of_order_and_duplicates() -> None:
    store = Store()
    store.apply(SampleEvent(sample(T0 + 10, cpu=30.0)))
    assert store.apply(SampleEvent(sample(T0 + 5, cpu=10.0), backfill=True))
    assert not store.apply(SampleEvent(sample(T0 + 5, cpu=99.0), backfill=True))  # duplicate
    assert not store.apply(SampleEvent(sample(T0 + 10, cpu=99.0)))
    s = store.series("h1", "cpu.total_percent", 11, 11)
    assert s[5] == 10.0 and s[10] == 30.0 and math.isnan(s[6])
    latest = store.latest("h1")
    assert latest is not None and latest.time == T0 + 10
    assert store.window_mean("h1", "cpu.total_percent", 60) == 20.0


def test_missing_is_nan_not_zero() -> None:
    store = Store()
    store.apply(SampleEvent(sample(T0, util=None)))
    assert math.isnan(store.window_mean("h1", "gpu.utilization_percent", 60))
    assert store.unavailable("h1", "gpu.utilization_percent") == "not supported"
    assert store.host_row("h1", 60).util_percent != 0


def test_old_data_expires_and_memory_bounded() -> None:
    store = Store(history_s=600)
    for i in range(0, 2000, 5):
        store.apply(SampleEvent(sample(T0 + i, cpu=float(i))))
    assert store.window_mean("h1", "cpu.total_percent", 60) > 1900
    ring = store._hosts["h1"].ring
    assert len(ring.fbuf) == store.fine_slots * ring.n and len(ring.cbuf) == store.coarse_slots * ring.n
    assert not store.apply(SampleEvent(sample(T0, cpu=1.0), backfill=True))  # older than history
    est = memory_estimate_bytes(1000, 8)
    # 13 host + 8 x 13 GPU series, each with per-bucket min and max (exact window extremes).
    assert 600e6 < est < 750e6


def test_versions_and_status_events() -> None:
    store = Store()
    store.apply(SampleEvent(sample(T0)))
    v = store.host_version("h1")
    assert store.apply(HostStatusEvent(host="h1", up=False, reason="ssh: timeout", time=T0))
    assert store.host_version("h1") == v + 1 and store.host_status("h1") == (False, "ssh: timeout")
    assert "DOWN" in store.host_row("h1", 60).alerts
    assert not store.apply(HostStatusEvent(host="h1", up=False, reason="ssh: timeout", time=T0))
    store.apply(SourceStatusEvent(message="slow", ok=False, time=T0))
    assert store.source_status is not None and store.source_status.message == "slow"


def test_jobs_joined_by_key_and_panels() -> None:
    job = JobInfo(pid=7, tree_id="systemd/bash/python3", cmdline="python3 x.py", user="u",
                  start_time=T0 - 100, cpu_percent=50.0, gpu_mem_bytes={"0": 10}, job_key="J1")
    store = Store()
    store.apply(SampleEvent(sample(T0, host="a", jobs=(job,))))
    store.apply(SampleEvent(sample(T0, host="b", jobs=(job,))))
    (view,) = store.jobs(60)
    assert view.key == "J1" and view.hosts == ("a", "b") and view.gpu_mem_bytes == 20
    assert view.runtime_s == 100 and view.cpu_percent == 100.0
    assert store.find_job("7", 60) == view
    p = store.panel_series("gpu.power_w", "a", None, 60)
    assert p.error is None and p.points[-1][1] == 100.0
    error = store.panel_series("nope", "a", None, 60).error
    assert error is not None and error.startswith("unknown metric")
    assert store.panel_series("job.cpu_percent", None, "J1", 60).points[-1][1] == 100.0


def test_demo_fleet_alerts() -> None:
    demo = DemoSource(seed=3, clock=lambda: T0, live=False, backfill_s=120)
    store = Store()
    demo.start(feed(store))
    assert len(store.hosts()) == 16 and store.fleet(300).total_gpus == 128
    assert "IDLE-HELD 4" in store.host_row("gpu-node07", 300).alerts
    # node05 GPU 2 is slowed by heat (SW-therm,HW-therm): the critical kind, as the GPU table marks it.
    assert "THROTTLE HW" in store.host_row("gpu-node05", 300).alerts
    why = store.unavailable("gpu-node09", "cache.l2_hit_ratio")
    assert why is not None and why.startswith("perf_event_open")
    again = Store()
    DemoSource(seed=3, clock=lambda: T0, live=False, backfill_s=120).start(feed(again))
    assert again.fleet(300) == store.fleet(300)


def test_ring_wraps_and_resample() -> None:
    ring = Ring(1, 10, 4)
    for b in range(25):
        ring.put(b, [float(b)])
    assert ring.fine_series(0, 24, 10) == [float(b) for b in range(15, 25)]
    assert ring.seen(24) and not ring.seen(25)
    assert resample([1.0, 3.0, math.nan, math.nan], 2)[0] == 2.0
    assert math.isnan(resample([1.0, 3.0, math.nan, math.nan], 2)[1])


def test_collectors_do_not_import_textual() -> None:
    code = ("import sys, gpulens.store.store, gpulens.sources.local, "
            "gpulens.sources.demo, gpulens.ipc.recording; "
            "assert 'textual' not in sys.modules and 'rich' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def _counts(ring: Ring, m: int) -> list[int]:
    """Column ``m``'s coarse counts (samples less its missing values), in slot order."""
    return [full - miss for full, miss in zip(ring.cfull, ring.cmiss[m :: ring.n], strict=True)]


def test_ring_window_means_match_per_column_and_widening() -> None:
    ring = Ring(3, 20, 6)
    for b in [*range(0, 75), 71, 40, 38, 99, 98]:  # wraps, backfill, duplicates, a gap
        ring.put(b, [float(b), math.nan if b % 3 else 1.5, 2.0 * b])
    for k in (1, 2, 5, 9):
        per_col = [ring.window_mean(m, 9, k) for m in range(3)]
        assert repr(ring.window_means(9, k)) == repr(per_col)
        assert repr(ring.window_means(9, k, start=1, step=2)) == repr(per_col[1::2])
    wide = ring.widened(5)
    for m in range(3):
        assert repr(wide.fine_series(m, 99, 20)) == repr(ring.fine_series(m, 99, 20))
        assert repr(wide.coarse_series(m, 9, 6)) == repr(ring.coarse_series(m, 9, 6))
    assert all(math.isnan(v) for v in wide.window_means(9, 6, start=3))
    assert _counts(wide, 4) == [0] * 6 and _counts(wide, 0) == _counts(ring, 0)


def test_gpu_appearing_later_and_missing_gpus() -> None:
    store = Store()
    g0 = sample(T0).gpus[0]
    for i in range(30):
        gpus = (g0,) if i < 10 else (GpuSample(index=3, name="G", uuid="v", utilization_percent=90.0), g0)
        store.apply(SampleEvent(replace(sample(T0 + i), gpus=gpus if i % 7 else ())))
    assert store.gpu_indices("h1") == [0, 3]
    s0, s3 = store.series("h1", "gpu.utilization_percent", 30, 30, gpu=0), \
        store.series("h1", "gpu.utilization_percent", 30, 30, gpu=3)
    assert s0[1] == 50.0 and math.isnan(s0[7]) and all(math.isnan(v) for v in s3[:10]) and s3[12] == 90.0
    assert store.window_mean("h1", "gpu.utilization_percent", 60, gpu=3) == 90.0
    assert store.window_mean("h1", "gpu.power_w", 60) == 100.0  # summed over GPUs that report it
    assert store.fleet(60).busy_gpus == 2 and store.fleet(60).total_gpus == 2


def test_job_gpu_memory_is_na_when_its_hosts_read_no_gpus() -> None:
    job = JobInfo(pid=8, tree_id="systemd/bash/python3", cmdline="python3 y.py", user="u",
                  start_time=T0 - 10, cpu_percent=5.0, job_key="J2")
    no_gpus = replace(sample(T0, host="c", jobs=(job,)), gpus=(),
                      unavailable={"gpus": "NVML library not found"})
    store = Store()
    store.apply(SampleEvent(no_gpus))
    (view,) = store.jobs(60)
    assert math.isnan(view.gpu_mem_bytes)  # n/a, not 0 B
    store.apply(SampleEvent(sample(T0 + 1, host="c", jobs=(job,))))
    (view,) = store.jobs(60)
    assert view.gpu_mem_bytes == 0.0  # GPUs are read and the job holds none
