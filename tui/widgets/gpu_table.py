"""Per-GPU table of the host screen: every NVML field of the newest sample, thresholds marked.

A value past a threshold carries its marker (``89C!``, ``95%▲``) and is
drawn in its level's colour; the marker alone keeps the meaning under NO_COLOR.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip

from gpulens.core.config import Thresholds
from gpulens.core.model import GpuSample, HostSample
from gpulens.core.units import NA, num, pct, rate, size
from gpulens.store.views import gpu_mem_percent
from gpulens.tui.widgets._table import IncrementalTable
from gpulens.tui.widgets.thresholds import (
    CRIT,
    DEFAULT,
    OK,
    STYLES,
    gpu_levels,
    level_of_text,
    marked,
    throttle_text,
)


def _ecc(g: GpuSample) -> str:
    if g.ecc_corrected is None and g.ecc_uncorrected is None:
        return NA
    return f"{g.ecc_corrected if g.ecc_corrected is not None else NA}/{g.ecc_uncorrected if g.ecc_uncorrected is not None else NA}"


THROTTLE_SHORT = {
    "gpu_idle": "idle", "applications_clocks_setting": "app-clocks", "sw_power_cap": "pwr-cap",
    "hw_slowdown": "HW-slow", "sync_boost": "sync-boost", "sw_thermal_slowdown": "SW-therm",
    "hw_thermal_slowdown": "HW-therm", "hw_power_brake_slowdown": "pwr-brake",
    "display_clock_setting": "display-clocks",
}
"""NVML clock-event reasons, short enough that two fit the column (``SW-therm,HW-therm``)."""


def pair(a: float | None, b: float | None, fmt: Callable[[float | None], str]) -> str:
    """``3.6/2.7GB/s``: one unit for both (rates in the larger one: ``1.1/0.854GB/s``, not
    ``1.1GB/s/854MB/s``); ``1.0GB/s / n/a`` when one is unknown; one n/a when both are."""
    if a is None and b is None:
        return NA
    left, right = fmt(a), fmt(b)
    if NA in (left, right):
        return f"{left} / {right}"
    unit = left.lstrip("0123456789.-")
    if unit and right.lstrip("0123456789.-") == unit:
        return f"{left[: len(left) - len(unit)]}/{right}"
    if fmt is rate and a is not None and b is not None:
        big = rate(max(abs(a), abs(b)))
        unit = big.lstrip("0123456789.-")
        scale = {"B/s": 1.0, "kB/s": 1e3, "MB/s": 1e6, "GB/s": 1e9, "TB/s": 1e12}.get(unit)
        if scale is not None:
            small, large = (b, a) if abs(a) >= abs(b) else (a, b)
            shown = {small: f"{small / scale:.3g}", large: big[: len(big) - len(unit)]}
            return f"{shown[a]}/{shown[b]}{unit}"
    return f"{left}/{right}"


def mem_pair(used: float, total: float | None) -> str:
    """``0.6/80.0GiB``: used in the unit of the total, so the column stays narrow."""
    if total is None:
        return f"{size(used)}/{NA}"
    unit = size(total).lstrip("0123456789.-")
    scale = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40, "PiB": 1 << 50}.get(unit)
    if scale is None or scale == 1:
        return pair(used, total, size)
    return f"{used / scale:.1f}/{size(total)}"


class GpuTable(IncrementalTable):
    """One row per GPU: util, SM, memory, power, temperature, clocks, PCIe, NVLink, ECC, XID."""

    COLUMNS = (
        ("gpu", "GPU", False, 4), ("name", "Name", False, 14), ("util", "Util", True, 5),
        ("sm", "SM act", True, 7), ("occ", "SM occ", True, 7), ("dram", "DRAM bw", True, 8),
        ("mem", "Mem used", True, 12), ("memp", "Mem%", True, 6), ("memutil", "Mem util", True, 9),
        ("power", "Power/limit", True, 12), ("temp", "Temp", True, 5), ("clk", "SM/mem MHz", True, 11),
        ("pcie", "PCIe rx/tx", True, 15), ("nvlink", "NVLink rx/tx", True, 15), ("ecc", "ECC c/u", True, 8),
        ("xid", "XID", True, 5), ("throttle", "Throttle", False, 18), ("procs", "Procs", True, 6),
    )
    """Each wider than its label, so the sort arrow never cuts it (``GPU↑``, not ``GP↑``)."""
    FLEX = ("throttle", "name")
    DROP = ("occ", "memutil", "name", "procs", "clk", "ecc", "dram", "memp", "nvlink", "pcie", "sm")

    thresholds: Thresholds = DEFAULT
    """Where values turn warning or critical (the config's ``[thresholds]``)."""

    @staticmethod
    def cells(g: GpuSample, t: Thresholds = DEFAULT, xid: int | None = None) -> tuple[str, ...]:
        """The texts of one GPU's row (n/a for a field NVML did not give), markers past thresholds.

        ``xid``: the GPU's last XID in the window, shown when this sample reports none (a GPU that
        fell off the bus reports its XID 79 once, then nothing at all).
        """
        lv = gpu_levels(g, t)
        if not g.xid_events and xid is not None:
            lv = {**lv, "xid": CRIT}  # as gpu_levels rates a reported XID
        power = NA if g.power_w is None else f"{g.power_w:.0f}/{num(g.power_limit_w)}W"
        clk = NA if g.sm_clock_mhz is None else f"{g.sm_clock_mhz}/{g.mem_clock_mhz or NA}"
        return (
            str(g.index), g.name.removeprefix("NVIDIA "), marked(pct(g.utilization_percent), lv["util"]),
            pct(g.sm_activity_percent), pct(g.sm_occupancy_percent), pct(g.dram_bw_util_percent),
            NA if g.mem_used_bytes is None else mem_pair(g.mem_used_bytes, g.mem_total_bytes),
            marked(pct(gpu_mem_percent(g)), lv["mem"]), pct(g.memory_utilization_percent),
            marked(power, lv["power"]), marked(num(g.temperature_c, "C"), lv["temp"]), clk,
            NA if g.pcie_rx_bytes_per_s is None else pair(g.pcie_rx_bytes_per_s, g.pcie_tx_bytes_per_s, rate),
            NA if g.nvlink_rx_bytes_per_s is None else pair(g.nvlink_rx_bytes_per_s, g.nvlink_tx_bytes_per_s, rate),
            _ecc(g), marked(",".join(map(str, g.xid_events or ((xid,) if xid is not None else ()))), lv["xid"])
            if g.xid_events or xid is not None else "-",
            marked(throttle_text(g, lambda r: THROTTLE_SHORT.get(r, r.removesuffix("_slowdown"))), lv["throttle"]),
            str(len(g.processes)),
        )

    def show(self, sample: HostSample | None, xids: Mapping[int, int] | None = None) -> bool:
        """Show the GPUs of ``sample`` (``xids``: each GPU's last XID in the window); True if anything changed."""
        gpus = sample.gpus if sample else ()
        t, xids = self.thresholds, xids or {}
        return self.sync({str(g.index): self.cells(g, t, xids.get(g.index)) for g in gpus}, [str(g.index) for g in gpus])

    def _line(self, cells: Sequence[str], style: Style, width: int) -> Strip:
        """A row; a cell ending in a level's marker is drawn in that level's style."""
        segs = [Segment(" ", style)]
        for n, (i, w) in enumerate(self.column_layout(width)):
            right = self.COLUMNS[i][2]
            text = cells[i]
            lvl = level_of_text(text)
            if len(text) > w:
                text = text[: w - 1] + "…"
            if n:
                segs.append(Segment(" ", style))
            segs.append(Segment(text.rjust(w) if right else text.ljust(w),
                                style + STYLES[lvl] if lvl != OK else style))
        return Strip(segs).crop_extend(0, width, style)
