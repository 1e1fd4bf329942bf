"""A SIMULATED sampler for tests and benchmarks of the agent and streams.

``gpulens agent --simulated-gpus N`` uses it instead of the real
collectors, so many agents can run on one small machine. Every sample says
``simulated=True`` (the UI shows SIMULATED). Sample ``k`` of an instance has
``time = start + k * interval_s`` exactly, so a test can tell a lost sample
(a step of two intervals) from a restart (a new ``start``).
"""

from __future__ import annotations

import math
import time

from gpulens.core.model import (
    CpuSample,
    GpuSample,
    HostSample,
    MemorySample,
    NetworkSample,
    StorageSample,
)


class SyntheticSampler:
    """Deterministic, cheap fake samples of a host with ``gpus`` GPUs."""

    def __init__(self, *, hostname: str, gpus: int = 8, interval_s: float = 1.0, start: float | None = None) -> None:
        self.host = hostname
        self.gpus = gpus
        self.interval_s = interval_s
        self.start = time.time() if start is None else start
        self.k = 0

    def sample(self) -> HostSample:
        """The next sample on this instance's time grid."""
        k = self.k
        self.k += 1
        t = self.start + k * self.interval_s
        wave = 50.0 + 40.0 * math.sin(k / 10.0)
        gpus = tuple(
            GpuSample(
                index=i,
                name="SIMULATED H100",
                uuid=f"GPU-sim-{self.host}-{i}",
                utilization_percent=round(wave, 1),
                memory_utilization_percent=round(wave / 2, 1),
                mem_used_bytes=int(40e9 + i * 1e8),
                mem_total_bytes=int(80e9),
                power_w=round(300.0 + wave, 1),
                power_limit_w=700.0,
                temperature_c=60.0 + i,
                sm_clock_mhz=1980,
                mem_clock_mhz=2619,
                pcie_rx_bytes_per_s=1.5e9,
                pcie_tx_bytes_per_s=0.5e9,
                sm_activity_percent=round(wave * 0.9, 1),
            )
            for i in range(self.gpus)
        )
        return HostSample(
            host=self.host,
            time=t,
            cpu=CpuSample(total_percent=round(wave / 3, 1), load_avg_1m=4.0, count=64),
            memory=MemorySample(total_bytes=int(512e9), used_bytes=int(100e9), available_bytes=int(412e9)),
            network=NetworkSample(rx_bytes_per_s=1e8, tx_bytes_per_s=2e8),
            storage=StorageSample(read_bytes_per_s=5e7, write_bytes_per_s=1e7),
            gpus=gpus,
            simulated=True,
        )

    def close(self) -> None:
        """Nothing to release."""
