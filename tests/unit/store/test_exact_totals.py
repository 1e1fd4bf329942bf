"""A host's totals (rx + tx, read + write, PCIe and NVLink over its GPUs, its hottest GPU's temperature, the
GPUs' mean clock) are each sample's own: min, max and "now" over any window are the raw samples', whatever the window.

A user saw the network plot read max 14.0GB/s over 1m and 12.0GB/s over 1h (raw: 14.22), and "now" move
with the window: the figures came from the averaged buckets of a sum, or from one GPU's extremes.
"""

from __future__ import annotations

import math
import random
from dataclasses import replace

from gpulens.core.events import SampleEvent
from gpulens.core.model import GpuSample, NetworkSample, StorageSample
from gpulens.store.store import Store
from tests.unit.store.test_store import T0, sample

WINDOWS = (60, 300, 900, 3600)


def run(seconds: int = 1800, seed: int = 7) -> tuple[Store, list[dict[str, float]]]:
    rng = random.Random(seed)
    store, raw = Store(), []
    for i in range(seconds):
        rx, tx = rng.uniform(0, 8e9), rng.uniform(0, 8e9)
        rd, wr = rng.uniform(0, 2e8), (None if i % 7 == 0 else rng.uniform(0, 2e8))
        temps = [rng.uniform(30, 90) for _ in range(4)]
        pcie = [rng.uniform(0, 1e9) for _ in range(4)]
        gpus = tuple(GpuSample(index=g, name="G", uuid=f"u{g}", utilization_percent=50.0, temperature_c=temps[g],
                               sm_clock_mhz=1000 + 10 * g + i % 50, pcie_rx_bytes_per_s=pcie[g],
                               pcie_tx_bytes_per_s=0.0) for g in range(4))
        s = replace(sample(T0 + i), network=NetworkSample(rx_bytes_per_s=rx, tx_bytes_per_s=tx),
                    storage=StorageSample(read_bytes_per_s=rd, write_bytes_per_s=wr), gpus=gpus, unavailable={})
        store.apply(SampleEvent(s))
        raw.append({"network.total_bytes_per_s": rx + tx, "storage.total_bytes_per_s": math.nan if wr is None else rd + wr,
                    "gpu.temperature_c": max(temps), "gpu.pcie_bytes_per_s": sum(pcie),
                    "gpu.sm_clock_mhz": sum(1000.0 + 10 * g + i % 50 for g in range(4)) / 4})
    return store, raw


def known_tail(values: list[float], n: int) -> list[float]:
    """The newest ``n`` known (not NaN) values."""
    known = [v for v in values if v == v]
    return known[len(known) - n:]


def test_every_total_has_the_raw_samples_extremes_and_newest_value_over_every_window() -> None:
    store, raw = run()
    for metric in raw[0]:
        nows = set()
        for w in WINDOWS:
            st = store.window_stats("h1", metric, w)
            inside = known_tail([r[metric] for r in raw], st.samples)
            assert st.samples >= (min(w, len(raw)) - 5) * (6 / 7 if metric.startswith("storage") else 1), (metric, w)
            assert not st.combined, (metric, w, st)
            assert math.isclose(st.max, max(inside), rel_tol=1e-6), (metric, w, st.max, max(inside))
            assert math.isclose(st.min, min(inside), rel_tol=1e-6), (metric, w)
            assert math.isclose(st.mean, sum(inside) / len(inside), rel_tol=1e-6), (metric, w)
            nows.add(st.now)
        assert len(nows) == 1 and math.isclose(nows.pop(), known_tail([r[metric] for r in raw], 1)[0],
                                             rel_tol=1e-6), metric  # the newest sample (float32 kept), in every window


def test_a_longer_window_never_has_a_smaller_max() -> None:
    store, _ = run(seconds=1200, seed=11)
    for metric in ("network.total_bytes_per_s", "storage.total_bytes_per_s", "gpu.temperature_c"):
        maxima = [store.window_stats("h1", metric, w).max for w in WINDOWS]
        assert maxima == sorted(maxima), (metric, maxima)


def test_a_total_is_na_with_the_reason_when_either_part_is() -> None:
    store = Store()
    s = replace(sample(T0), storage=StorageSample(read_bytes_per_s=None, write_bytes_per_s=None),
                unavailable={"storage": "no block devices"})
    store.apply(SampleEvent(s))
    assert store.window_stats("h1", "storage.total_bytes_per_s", 60).empty
    assert store.unavailable("h1", "storage.total_bytes_per_s") == "no block devices"
    store.apply(SampleEvent(replace(s, time=T0 + 1, storage=StorageSample(read_bytes_per_s=5.0,
                                                                        write_bytes_per_s=None))))
    # One direction alone is not the total: still n/a (a write that is not reported is not 0 B/s).
    assert store.window_stats("h1", "storage.total_bytes_per_s", 60).empty
    store.apply(SampleEvent(replace(s, time=T0 + 2, storage=StorageSample(read_bytes_per_s=5.0,
                                                                        write_bytes_per_s=2.0))))
    assert store.window_stats("h1", "storage.total_bytes_per_s", 60).now == 7.0
