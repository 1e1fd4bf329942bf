"""The amdgpu ``gpu_metrics`` sysfs file: a binary table, decoded for the versions gpulens knows.

The file holds one C struct of drivers/gpu/drm/amd/include/kgd_pp_interface.h,
led by ``struct metrics_table_header`` (``u16 structure_size; u8
format_revision; u8 content_revision``). gpulens decodes v1.3 (MI200-class
Aldebaran and RDNA2/RDNA3 consumer cards) and v1.4-v1.6 (MI300-class); any
other version is n/a with the reason. The layouts below list the kernel's
fields in order; offsets follow C's natural alignment (each field aligned to
its size, the struct padded to its largest member), as the kernel compiles
them (little-endian on every platform amdgpu runs on). A field the firmware
does not provide is all ones: the driver fills the table with 0xFF before
writing it (``smu_cmn_init_soft_gpu_metrics``), so such a value is n/a.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

Field = tuple[str, str, int]
"""(name, struct code ``B``/``H``/``I``/``Q``, count)."""

_HEADER: tuple[Field, ...] = (("structure_size", "H", 1), ("format_revision", "B", 1),
                              ("content_revision", "B", 1))
_V1_COMMON_TEMPS: tuple[Field, ...] = (
    ("temperature_edge", "H", 1), ("temperature_hotspot", "H", 1), ("temperature_mem", "H", 1),
    ("temperature_vrgfx", "H", 1), ("temperature_vrsoc", "H", 1), ("temperature_vrmem", "H", 1),
    ("average_gfx_activity", "H", 1), ("average_umc_activity", "H", 1), ("average_mm_activity", "H", 1),
    ("average_socket_power", "H", 1), ("energy_accumulator", "Q", 1), ("system_clock_counter", "Q", 1),
    ("average_gfxclk_frequency", "H", 1), ("average_socclk_frequency", "H", 1),
    ("average_uclk_frequency", "H", 1), ("average_vclk0_frequency", "H", 1),
    ("average_dclk0_frequency", "H", 1), ("average_vclk1_frequency", "H", 1),
    ("average_dclk1_frequency", "H", 1), ("current_gfxclk", "H", 1), ("current_socclk", "H", 1),
    ("current_uclk", "H", 1), ("current_vclk0", "H", 1), ("current_dclk0", "H", 1),
    ("current_vclk1", "H", 1), ("current_dclk1", "H", 1), ("throttle_status", "I", 1),
    ("current_fan_speed", "H", 1), ("pcie_link_width", "H", 1), ("pcie_link_speed", "H", 1),
    ("padding", "H", 1), ("gfx_activity_acc", "I", 1), ("mem_activity_acc", "I", 1),
    ("temperature_hbm", "H", 4),
)
V1_3: tuple[Field, ...] = (
    *_HEADER, *_V1_COMMON_TEMPS, ("firmware_timestamp", "Q", 1), ("voltage_soc", "H", 1),
    ("voltage_gfx", "H", 1), ("voltage_mem", "H", 1), ("padding1", "H", 1), ("indep_throttle_status", "Q", 1),
)
"""struct gpu_metrics_v1_3 (NUM_HBM_INSTANCES = 4)."""


def _v1_4_5(jpeg: bool, residency: bool = False) -> tuple[Field, ...]:
    return (
        *_HEADER, ("temperature_hotspot", "H", 1), ("temperature_mem", "H", 1), ("temperature_vrsoc", "H", 1),
        ("curr_socket_power", "H", 1), ("average_gfx_activity", "H", 1), ("average_umc_activity", "H", 1),
        ("vcn_activity", "H", 4), *((("jpeg_activity", "H", 32),) if jpeg else ()),
        ("energy_accumulator", "Q", 1), ("system_clock_counter", "Q", 1),
        *((("accumulation_counter", "I", 1), ("prochot_residency_acc", "I", 1), ("ppt_residency_acc", "I", 1),
           ("socket_thm_residency_acc", "I", 1), ("vr_thm_residency_acc", "I", 1),
           ("hbm_thm_residency_acc", "I", 1)) if residency else ()),
        ("throttle_status", "I", 1),
        ("gfxclk_lock_status", "I", 1), ("pcie_link_width", "H", 1), ("pcie_link_speed", "H", 1),
        ("xgmi_link_width", "H", 1), ("xgmi_link_speed", "H", 1), ("gfx_activity_acc", "I", 1),
        ("mem_activity_acc", "I", 1), ("pcie_bandwidth_acc", "Q", 1), ("pcie_bandwidth_inst", "Q", 1),
        ("pcie_l0_to_recov_count_acc", "Q", 1), ("pcie_replay_count_acc", "Q", 1),
        ("pcie_replay_rover_count_acc", "Q", 1),
        *((("pcie_nak_sent_count_acc", "I", 1), ("pcie_nak_rcvd_count_acc", "I", 1)) if jpeg else ()),
        ("xgmi_read_data_acc", "Q", 8), ("xgmi_write_data_acc", "Q", 8), ("firmware_timestamp", "Q", 1),
        ("current_gfxclk", "H", 8), ("current_socclk", "H", 4), ("current_vclk0", "H", 4),
        ("current_dclk0", "H", 4), ("current_uclk", "H", 1), ("padding", "H", 1),
    )


V1_4 = _v1_4_5(jpeg=False)
"""struct gpu_metrics_v1_4 (NUM_VCN 4, NUM_XGMI_LINKS 8, MAX_GFX_CLKS 8, MAX_CLKS 4)."""
V1_5 = _v1_4_5(jpeg=True)
"""struct gpu_metrics_v1_5: v1.4 plus jpeg_activity[NUM_JPEG_ENG = 32] and the PCIe NAK counts."""
V1_6 = _v1_4_5(jpeg=True, residency=True)
"""struct gpu_metrics_v1_6: v1.5 plus the accumulated throttler residencies (its PCIe bandwidth in Mbps)."""
LAYOUTS: Mapping[tuple[int, int], tuple[Field, ...]] = {(1, 3): V1_3, (1, 4): V1_4, (1, 5): V1_5, (1, 6): V1_6}
ENERGY_UNIT_J = 2.0 ** -16
"""v1.4-v1.6 ``energy_accumulator``: "15.259uJ (2^-16) units" (the struct's comment)."""
XGMI_UNIT_BYTES = 1024
"""``xgmi_*_data_acc``: "KiloBytes" (the struct's comment), read as KiB."""
_SIZE = {"B": 1, "H": 2, "I": 4, "Q": 8}


def layout(fields: Sequence[Field]) -> tuple[dict[str, tuple[int, str, int]], int]:
    """name -> (offset, code, count) with C's natural alignment, and sizeof the struct."""
    at, align, out = 0, 1, {}
    for name, code, count in fields:
        size = _SIZE[code]
        at = (at + size - 1) // size * size
        out[name] = (at, code, count)
        at += size * count
        align = max(align, size)
    return out, (at + align - 1) // align * align


_OFFSETS = {version: layout(fields) for version, fields in LAYOUTS.items()}
SIZES: Mapping[tuple[int, int], int] = {version: size for version, (_, size) in _OFFSETS.items()}
"""sizeof each known struct: v1.3 120, v1.4 288, v1.5 360, v1.6 384 bytes."""


_FULL = {code: (1 << (8 * size)) - 1 for code, size in _SIZE.items()}
_SPECS: Mapping[tuple[int, int], Mapping[str, tuple[struct.Struct, int, int]]] = {
    version: {name: (struct.Struct(f"<{count}{code}"), at, _FULL[code]) for name, (at, code, count) in offsets.items()}
    for version, (offsets, _) in _OFFSETS.items()
}
"""version -> field -> (its precompiled little-endian struct, offset, the all-ones "not provided" value)."""
_HEADER_STRUCT = struct.Struct("<HBB")


@dataclass(frozen=True, slots=True)
class GpuMetrics:
    """One table: its version and bytes; fields are unpacked when asked for (a read uses a few)."""

    version: tuple[int, int]
    blob: bytes

    def values(self, name: str) -> tuple[int, ...]:
        """Every value of a field (one for a scalar); () when this version has no such field."""
        spec = _SPECS[self.version].get(name)
        if spec is None:
            return ()
        return spec[0].unpack_from(self.blob, spec[1])

    def get(self, name: str) -> int | None:
        """A scalar field; None when absent in this version or all ones (not provided)."""
        spec = _SPECS[self.version].get(name)
        if spec is None:
            return None
        value: int = spec[0].unpack_from(self.blob, spec[1])[0]
        return None if value == spec[2] else value

    def total(self, name: str) -> int | None:
        """The sum of an array field's provided entries (None when none is provided)."""
        spec = _SPECS[self.version].get(name)
        if spec is None:
            return None
        full = spec[2]
        given = [v for v in spec[0].unpack_from(self.blob, spec[1]) if v != full]
        return sum(given) if given else None


def version_text(version: tuple[int, int]) -> str:
    """``v1.3``."""
    return f"v{version[0]}.{version[1]}"


def decode(blob: bytes) -> tuple[GpuMetrics | None, str | None]:
    """The table in ``blob``, or None and why (truncated, unknown version, size mismatch)."""
    if len(blob) < 4:
        return None, f"gpu_metrics truncated: {len(blob)} bytes, not even its 4-byte header"
    size, fmt, content = _HEADER_STRUCT.unpack_from(blob, 0)
    version = (fmt, content)
    offsets = _OFFSETS.get(version)
    if offsets is None:
        return None, (f"gpu_metrics {version_text(version)} is a layout gpulens does not decode "
                      "(it knows v1.3, v1.4, v1.5, v1.6)")
    _, expected = offsets
    if size != expected:
        return None, (f"gpu_metrics {version_text(version)} says structure_size {size}, "
                      f"the kernel's struct is {expected} bytes")
    if len(blob) < expected:
        return None, f"gpu_metrics {version_text(version)} truncated: {len(blob)} of {expected} bytes"
    if len(blob) != expected or type(blob) is not bytes:
        blob = bytes(blob[:expected])
    return GpuMetrics(version, blob), None


THROTTLE_BITS: tuple[tuple[int, str], ...] = (
    (0, "ppt0"), (1, "ppt1"), (2, "ppt2"), (3, "ppt3"), (4, "spl"), (5, "fppt"), (6, "sppt"),
    (7, "sppt_apu"), (16, "tdc_gfx"), (17, "tdc_soc"), (18, "tdc_mem"), (19, "tdc_vdd"), (20, "tdc_cvip"),
    (21, "edc_cpu"), (22, "edc_gfx"), (23, "apcc"), (32, "temp_gpu"), (33, "temp_core"), (34, "temp_mem"),
    (35, "temp_edge"), (36, "temp_hotspot"), (37, "temp_soc"), (38, "temp_vr_gfx"), (39, "temp_vr_soc"),
    (40, "temp_vr_mem0"), (41, "temp_vr_mem1"), (42, "temp_liquid0"), (43, "temp_liquid1"), (44, "vrhot0"),
    (45, "vrhot1"), (46, "prochot_cpu"), (47, "prochot_gfx"), (56, "ppm"), (57, "fit"),
)
"""``indep_throttle_status`` bits: SMU_THROTTLER_*_BIT of drivers/gpu/drm/amd/pm/swsmu/inc/amdgpu_smu.h."""


_KNOWN_BITS = frozenset(bit for bit, _ in THROTTLE_BITS)


def throttle_names(mask: int) -> tuple[str, ...]:
    """The ASIC-independent throttlers set in ``mask``; unknown bits as ``bit_N``."""
    if not mask:
        return ()
    found = _NAMES_SEEN.get(mask)
    if found is None:
        names = [name for bit, name in THROTTLE_BITS if mask >> bit & 1]
        names += [f"bit_{bit}" for bit in range(64) if mask >> bit & 1 and bit not in _KNOWN_BITS]
        found = tuple(names)
        if len(_NAMES_SEEN) < 256:
            _NAMES_SEEN[mask] = found
    return found


_NAMES_SEEN: dict[int, tuple[str, ...]] = {}
