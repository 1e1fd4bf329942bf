"""Per-GPU table of the host screen: every NVML field of the newest sample."""

from __future__ import annotations

from gpulens.collectors.model import GpuSample, HostSample
from gpulens.collectors.store_views import gpu_mem_percent

from ..format import NA, num, pct, rate, size
from ._table import IncrementalTable


def _ecc(g: GpuSample) -> str:
    if g.ecc_corrected is None and g.ecc_uncorrected is None:
        return NA
    return f"{g.ecc_corrected if g.ecc_corrected is not None else NA}/{g.ecc_uncorrected if g.ecc_uncorrected is not None else NA}"


class GpuTable(IncrementalTable):
    """One row per GPU: util, SM, memory, power, temperature, clocks, PCIe, NVLink, ECC, XID."""

    COLUMNS = (
        ("gpu", "GPU", False, 3), ("name", "Name", False, 14), ("util", "Util", True, 5),
        ("sm", "SM act", True, 6), ("occ", "SM occ", True, 6), ("dram", "DRAM bw", True, 7),
        ("mem", "Mem used", True, 14), ("memp", "Mem%", True, 5), ("memutil", "Mem util", True, 8),
        ("power", "Power/limit", True, 11), ("temp", "Temp", True, 5), ("clk", "SM/mem MHz", True, 10),
        ("pcie", "PCIe rx/tx", True, 19), ("nvlink", "NVLink rx/tx", True, 19), ("ecc", "ECC c/u", True, 7),
        ("xid", "XID", True, 5), ("throttle", "Throttle", False, 16), ("procs", "Procs", True, 5),
    )

    @staticmethod
    def cells(g: GpuSample) -> tuple[str, ...]:
        """The texts of one GPU's row (n/a for a field NVML did not give)."""
        power = NA if g.power_w is None else f"{g.power_w:.0f}/{num(g.power_limit_w)}W"
        clk = NA if g.sm_clock_mhz is None else f"{g.sm_clock_mhz}/{g.mem_clock_mhz or NA}"
        return (
            str(g.index), g.name.removeprefix("NVIDIA "), pct(g.utilization_percent),
            pct(g.sm_activity_percent), pct(g.sm_occupancy_percent), pct(g.dram_bw_util_percent),
            NA if g.mem_used_bytes is None else f"{size(g.mem_used_bytes)}/{size(g.mem_total_bytes)}",
            pct(gpu_mem_percent(g)), pct(g.memory_utilization_percent), power,
            num(g.temperature_c, "C"), clk,
            NA if g.pcie_rx_bytes_per_s is None else f"{rate(g.pcie_rx_bytes_per_s)}/{rate(g.pcie_tx_bytes_per_s)}",
            NA if g.nvlink_rx_bytes_per_s is None else f"{rate(g.nvlink_rx_bytes_per_s)}/{rate(g.nvlink_tx_bytes_per_s)}",
            _ecc(g), ",".join(map(str, g.xid_events)) or "-",
            ",".join(r.removesuffix("_slowdown") for r in g.throttle_reasons) or "-",
            str(len(g.processes)),
        )

    def show(self, sample: HostSample | None) -> bool:
        """Show the GPUs of ``sample``; True if anything changed."""
        gpus = sample.gpus if sample else ()
        return self.sync({str(g.index): self.cells(g) for g in gpus}, [str(g.index) for g in gpus])
