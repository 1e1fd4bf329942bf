"""Writes the ``gpu_metrics`` files of the amdgpu fixture trees (run: python tests/data/amdgpu/make_gpu_metrics.py).

Each table is one ``struct.pack`` of the kernel's struct, fields in the order of
drivers/gpu/drm/amd/include/kgd_pp_interface.h (torvalds/linux 00dedab07b52:
gpu_metrics_v1_3, v1_4, v1_5, v1_6), little-endian, with the struct's padding written out (``x``). It is
transcribed from the header by hand, independently of gpulens' decoder
(collectors/amd/gpu_metrics.py), so a mistake in one shows up against the other.
A field the firmware does not fill is all ones, as the driver leaves it
(``smu_cmn_init_soft_gpu_metrics`` memsets the table to 0xFF).
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
NA16, NA32, NA64 = 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF

# struct gpu_metrics_v1_3: header; temperature_edge, _hotspot, _mem, _vrgfx, _vrsoc, _vrmem;
# average_gfx/umc/mm_activity; average_socket_power; energy_accumulator; system_clock_counter;
# 7 average clocks; 7 current clocks; throttle_status; current_fan_speed; pcie_link_width,
# pcie_link_speed; padding; gfx_activity_acc, mem_activity_acc; temperature_hbm[4];
# firmware_timestamp; voltage_soc, _gfx, _mem; padding1; indep_throttle_status.
V1_3 = "<HBB" "6H" "3H" "H" "Q" "Q" "7H" "7H" "I" "H" "HH" "H" "II" "4H" "Q" "3H" "H" "Q"
# struct gpu_metrics_v1_4: header; temperature_hotspot, _mem, _vrsoc; curr_socket_power;
# average_gfx_activity, average_umc_activity; vcn_activity[4]; energy_accumulator;
# system_clock_counter; throttle_status; gfxclk_lock_status; pcie_link_width, _speed;
# xgmi_link_width, _speed; gfx_activity_acc, mem_activity_acc; pcie_bandwidth_acc, _inst;
# pcie_l0_to_recov_count_acc; pcie_replay_count_acc; pcie_replay_rover_count_acc;
# xgmi_read_data_acc[8]; xgmi_write_data_acc[8]; firmware_timestamp; current_gfxclk[8];
# current_socclk[4]; current_vclk0[4]; current_dclk0[4]; current_uclk; padding; tail padding to 8.
V1_4 = "<HBB" "3H" "H" "2H" "4H" "Q" "Q" "I" "I" "HH" "HH" "II" "QQ" "Q" "Q" "Q" "8Q" "8Q" "Q" "8H" "4H" "4H" "4H" "H" "H" "4x"
# struct gpu_metrics_v1_5: v1_4 with jpeg_activity[32] after vcn_activity and
# pcie_nak_sent_count_acc, pcie_nak_rcvd_count_acc (u32) after pcie_replay_rover_count_acc.
V1_5 = ("<HBB" "3H" "H" "2H" "4H" "32H" "Q" "Q" "I" "I" "HH" "HH" "II" "QQ" "Q" "Q" "Q" "II" "8Q" "8Q" "Q"
        "8H" "4H" "4H" "4H" "H" "H" "4x")
# struct gpu_metrics_v1_6: v1_5 with accumulation_counter and five throttler residencies (u32) after
# system_clock_counter.
V1_6 = ("<HBB" "3H" "H" "2H" "4H" "32H" "Q" "Q" "6I" "I" "I" "HH" "HH" "II" "QQ" "Q" "Q" "Q" "II" "8Q" "8Q" "Q"
        "8H" "4H" "4H" "4H" "H" "H" "4x")
SIZES = {"1.3": 120, "1.4": 288, "1.5": 360, "1.6": 384}
"""sizeof of each struct on x86-64, which structure_size carries."""


def v1_3(*, edge: int = 45, hotspot: int = 58, mem: int = 52, gfx: int = 87, umc: int = 41, power: int = 251,
         energy: int = 0x1234_5678, gfxclk: int = 1650, uclk: int = 1600, indep_throttle: int = 0) -> bytes:
    """A gpu_metrics_v1_3 table (MI200-class and RDNA2/3 cards)."""
    return struct.pack(
        V1_3, SIZES["1.3"], 1, 3,
        edge, hotspot, mem, NA16, NA16, NA16,
        gfx, umc, NA16,
        power, energy, 123_456_789_000,
        gfxclk, 1090, uclk, NA16, NA16, NA16, NA16,
        gfxclk, 1090, uclk, NA16, NA16, NA16, NA16,
        0, NA16, 16, 160, 0, 1_000_000, 400_000,
        mem, mem + 1, mem + 2, mem + 1,
        987_654_321, 850, 900, 1200, 0,
        indep_throttle,
    )


def _v1_4_5(content: int, *, hotspot: int, mem: int, power: int, gfx: int, umc: int, energy: int,
            xgmi_read: tuple[int, ...], xgmi_write: tuple[int, ...], gfxclk: int, uclk: int) -> bytes:
    five = content >= 5
    head = (SIZES[f"1.{content}"], 1, content, hotspot, mem, 45, power, gfx, umc, 0, 0, 0, 0)
    jpeg = (0,) * 32 if five else ()
    residency = (1000, 0, 7, 0, 0, 0) if content >= 6 else ()
    mid = (0, 0xFF, 16, 320, 16, 32, 5_000_000, 2_000_000, 7_000_000, 12, 0, 3, 0)
    nak = (0, 0) if five else ()
    tail = (*xgmi_read, *xgmi_write, 987_654_321, *(gfxclk,) * 8, *(1090,) * 4, *(29,) * 4, *(22,) * 4, uclk, 0)
    fmt = {4: V1_4, 5: V1_5, 6: V1_6}[content]
    return struct.pack(fmt, *head, *jpeg, energy, 123_456_789_000, *residency, *mid, *nak, *tail)


XGMI_READ = (0, *(1_000_000 + 1000 * i for i in range(1, 8)))
XGMI_WRITE = (0, *(2_000_000 + 1000 * i for i in range(1, 8)))


def v1_4(**kw: object) -> bytes:
    """A gpu_metrics_v1_4 table (MI300-class, older kernels)."""
    return _v1_4_5(4, **{**_V14_DEFAULTS, **kw})  # type: ignore[arg-type]


def v1_5(**kw: object) -> bytes:
    """A gpu_metrics_v1_5 table (MI300-class)."""
    return _v1_4_5(5, **{**_V14_DEFAULTS, **kw})  # type: ignore[arg-type]


def v1_6(**kw: object) -> bytes:
    """A gpu_metrics_v1_6 table (MI300-class, newer kernels)."""
    return _v1_4_5(6, **{**_V14_DEFAULTS, **kw})  # type: ignore[arg-type]


_V14_DEFAULTS: dict[str, object] = {
    "hotspot": 61, "mem": 49, "power": 548, "gfx": 64, "umc": 22, "energy": 123_456_789_012,
    "xgmi_read": XGMI_READ, "xgmi_write": XGMI_WRITE, "gfxclk": 1420, "uclk": 1300,
}
FILES: dict[str, Callable[[], bytes]] = {
    "mi210/sys/class/drm/card0/device/gpu_metrics": lambda: v1_3(indep_throttle=1 << 0),  # PPT0 throttling
    "mi250x/sys/class/drm/card1/device/gpu_metrics": lambda: v1_3(edge=41, hotspot=63, mem=57, gfx=93,
                                                                  umc=55, power=402, gfxclk=1700),
    "mi250x/sys/class/drm/card2/device/gpu_metrics": lambda: v1_3(edge=41, hotspot=60, mem=56, gfx=88,
                                                                  umc=55, power=0, gfxclk=1700),
    "mi300x/sys/class/drm/card1/device/gpu_metrics": lambda: v1_5(),
    "radeon/sys/class/drm/card0/device/gpu_metrics": lambda: v1_3(edge=43, hotspot=51, mem=58, gfx=12, umc=3,
                                                                  power=48, gfxclk=1221, uclk=1249),
    "gpu_metrics/mi300x-v1_4.bin": lambda: v1_4(),
    "gpu_metrics/mi300x-v1_6.bin": lambda: v1_6(),
}


def main() -> int:
    for rel, make in FILES.items():
        blob = make()
        assert struct.unpack_from("<H", blob)[0] == len(blob), rel
        path = HERE / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(blob)
        print(f"{rel}: {len(blob)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
