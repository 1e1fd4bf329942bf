"""The GPU screen's own series: SM occupancy, tensor activity, DRAM bandwidth, memory clock, and the
energy counter's rate (J/s between a GPU's samples; n/a for the first, a backfill, a counter reset)."""

from __future__ import annotations

import math
from dataclasses import replace

from gpulens.core.events import SampleEvent
from gpulens.core.model import GpuSample, HostSample
from gpulens.store.store import Store
from tests.unit.store.test_store import T0, sample

DETAIL = ("gpu.sm_occupancy_percent", "gpu.tensor_active_percent", "gpu.dram_bw_util_percent",
          "gpu.mem_clock_mhz")


def with_gpus(t: float, *gpus: GpuSample) -> HostSample:
    return replace(sample(t), gpus=gpus)


def gpu(index: int, joules: float | None, **fields: float) -> GpuSample:
    return GpuSample(index=index, name="G", uuid=f"u{index}", utilization_percent=50.0, energy_joules=joules,
                     **fields)  # type: ignore[arg-type]


def test_each_detail_metric_is_kept_per_gpu_with_exact_extremes() -> None:
    store = Store()
    for i in range(30):
        store.apply(SampleEvent(with_gpus(T0 + i, gpu(0, None, sm_occupancy_percent=float(i),
                                                     tensor_active_percent=2.0 * i, dram_bw_util_percent=40.0,
                                                     mem_clock_mhz=2619),
                                          gpu(1, None, sm_occupancy_percent=90.0))))
    occ = store.window_stats("h1", "gpu.sm_occupancy_percent", 60, gpu=0)
    assert (occ.min, occ.max, occ.now) == (0.0, 29.0, 29.0)
    assert store.window_stats("h1", "gpu.tensor_active_percent", 60, gpu=0).max == 58.0
    assert store.window_stats("h1", "gpu.dram_bw_util_percent", 60, gpu=0).now == 40.0
    assert store.window_stats("h1", "gpu.mem_clock_mhz", 60, gpu=0).now == 2619.0
    assert store.window_stats("h1", "gpu.sm_occupancy_percent", 60, gpu=1).min == 90.0
    # GPU 1 reports no tensor figure: NaN, never 0.
    assert store.window_stats("h1", "gpu.tensor_active_percent", 60, gpu=1).empty
    assert all(math.isnan(v) for v in store.series("h1", "gpu.tensor_active_percent", 60, 10, gpu=1))


def test_the_energy_rate_is_the_counters_joules_per_second_between_samples() -> None:
    store = Store()
    for t, j0, j1 in ((0, 1000.0, 5e6), (2, 1700.0, 5e6 + 100), (3, 2000.0, 5e6 + 150)):
        store.apply(SampleEvent(with_gpus(T0 + t, gpu(0, j0), gpu(3, j1))))
    series = store.series("h1", "gpu.energy_rate_w", 60, 60, gpu=0)
    known = [v for v in series if not math.isnan(v)]
    assert known == [350.0, 300.0]  # (1700-1000)/2 s, then 300 J in 1 s; the first sample has no rate
    assert store.window_stats("h1", "gpu.energy_rate_w", 60, gpu=3).now == 50.0
    assert store.window_stats("h1", "gpu.energy_rate_w", 60, gpu=0).max == 350.0


def test_no_rate_for_a_counter_that_went_back_a_backfill_or_a_gpu_without_a_counter() -> None:
    store = Store()
    store.apply(SampleEvent(with_gpus(T0, gpu(0, 9000.0), gpu(1, None))))
    store.apply(SampleEvent(with_gpus(T0 + 1, gpu(0, 100.0), gpu(1, None))))  # driver reloaded
    store.apply(SampleEvent(with_gpus(T0 - 5, gpu(0, 50.0), gpu(1, None)), backfill=True))
    store.apply(SampleEvent(with_gpus(T0 + 2, gpu(0, 400.0), gpu(1, None))))
    rates = store.series("h1", "gpu.energy_rate_w", 60, 60, gpu=0)
    assert [v for v in rates if not math.isnan(v)] == [300.0]  # only T0+1 -> T0+2
    assert store.window_stats("h1", "gpu.energy_rate_w", 60, gpu=1).empty


def test_a_gpu_reporting_none_of_them_says_why() -> None:
    store = Store()
    g = GpuSample(index=0, name="G", uuid="u", unavailable={
        "sm_occupancy_percent": "GPM not supported on this GPU", "energy_joules": "Not Supported"})
    store.apply(SampleEvent(with_gpus(T0, g)))
    assert store.unavailable("h1", "gpu.sm_occupancy_percent") == "GPM not supported on this GPU"
    assert store.unavailable("h1", "gpu.energy_rate_w") == "Not Supported"
    for metric in DETAIL:
        assert store.window_stats("h1", metric, 60, gpu=0).empty


def test_gpus_listed_in_another_order_keep_their_rates_and_the_host_adds_them() -> None:
    store = Store()
    store.apply(SampleEvent(with_gpus(T0, gpu(0, 1000.0), gpu(1, 2000.0))))
    store.apply(SampleEvent(with_gpus(T0 + 1, gpu(1, 2300.0), gpu(0, 1100.0))))  # swapped: matched by index
    assert store.window_stats("h1", "gpu.energy_rate_w", 60, gpu=0).now == 100.0
    assert store.window_stats("h1", "gpu.energy_rate_w", 60, gpu=1).now == 300.0
    # Over the host, watts add up (as gpu.power_w does), they are not averaged.
    assert store.window_stats("h1", "gpu.energy_rate_w", 60).now == 400.0


def test_the_last_value_is_the_newest_samples_only() -> None:
    store = Store()
    store.apply(SampleEvent(with_gpus(T0, gpu(0, 1000.0))))
    store.apply(SampleEvent(with_gpus(T0 + 1, gpu(0, 1200.0))))
    assert store.last_value("h1", "gpu.energy_rate_w", gpu=0) == 200.0
    store.apply(SampleEvent(with_gpus(T0 + 2, gpu(0, 10.0))))  # the driver reloaded: no rate now
    assert math.isnan(store.last_value("h1", "gpu.energy_rate_w", gpu=0))
    assert store.window_stats("h1", "gpu.energy_rate_w", 60, gpu=0).now == 200.0  # what the figure used to show
    assert math.isnan(store.last_value("h1", "gpu.energy_rate_w", gpu=7))
    assert math.isnan(store.last_value("nowhere", "gpu.energy_rate_w", gpu=0))


def test_has_data_says_what_window_stats_says() -> None:
    store = Store()
    for i in range(40):
        gpus = (gpu(0, 100.0 * i, sm_occupancy_percent=5.0),) if i < 10 else (gpu(0, None),)
        store.apply(SampleEvent(with_gpus(T0 + 20 * i, *gpus)))  # the occupancy stops after 200 s
    for metric in ("cpu.total_percent", "gpu.utilization_percent", "gpu.sm_occupancy_percent",
                   "gpu.energy_rate_w", "gpu.temperature_c", "storage.read_bytes_per_s", "no.such"):
        for window in (60, 300, 900, 3600):
            assert store.has_data("h1", metric, window) == (not store.window_stats("h1", metric, window).empty), (
                metric, window)
    assert store.has_data("h1", "gpu.sm_occupancy_percent", 3600)
    assert not store.has_data("h1", "gpu.sm_occupancy_percent", 300)
    assert not store.has_data("elsewhere", "cpu.total_percent", 300)
