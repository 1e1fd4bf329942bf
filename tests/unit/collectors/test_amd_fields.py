"""The AMD sysfs collector field by field, on fixture trees in the kernel's formats (tests/data/amdgpu/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from gpulens.collectors.amd.collector import AmdCollector
from gpulens.collectors.amd.reader import NO_EQUIVALENT
from gpulens.core.model import GpuSample
from tests.fakes.amd_tree import AMD_DATA, AmdTree, Clock


def read(tree: str | Path, first_index: int = 0) -> tuple[GpuSample, ...]:
    root = tree if isinstance(tree, Path) else AMD_DATA / tree
    with AmdCollector(root, use_amdsmi=False, pcie_background=False) as c:
        return c.read(first_index).gpus


@pytest.fixture
def mi210() -> GpuSample:
    (g,) = read("mi210")
    return g


def test_identity_vendor_name_uuid(mi210: GpuSample) -> None:
    assert mi210.vendor == "amd" and mi210.index == 0
    assert mi210.name == "AMD Instinct MI210"
    assert mi210.uuid == "AMD-7c3dbc1c3b2d2a56"  # unique_id, "%016llx"


def test_utilization_from_busy_percent_files(mi210: GpuSample) -> None:
    assert mi210.utilization_percent == 87.0  # gpu_busy_percent
    assert mi210.memory_utilization_percent == 41.0  # mem_busy_percent


def test_vram_used_and_total(mi210: GpuSample) -> None:
    assert mi210.mem_used_bytes == 12 << 30
    assert mi210.mem_total_bytes == 68702699520


def test_power_average_and_cap_in_microwatts(mi210: GpuSample) -> None:
    assert mi210.power_w == 251.0 and mi210.power_limit_w == 300.0


def test_power_input_when_average_is_absent() -> None:
    (g,) = read("radeon")  # RX 7900 XTX: power1_input only
    assert g.power_w == 48.0 and g.power_limit_w == 303.0


def test_temperature_is_junction_millidegrees(mi210: GpuSample) -> None:
    assert mi210.temperature_c == 58.0  # temp2 "junction", not temp1 "edge" (45)


def test_temperature_falls_back_to_edge(tmp_path: Path) -> None:
    t = AmdTree(tmp_path, "mi210")
    (t.device("card0") / "hwmon/hwmon3/temp2_input").unlink()
    (g,) = read(tmp_path)
    assert g.temperature_c == 45.0


def test_clocks_from_the_starred_dpm_level(mi210: GpuSample) -> None:
    assert mi210.sm_clock_mhz == 1650 and mi210.mem_clock_mhz == 1600


def test_clock_falls_back_to_hwmon_freq(tmp_path: Path) -> None:
    t = AmdTree(tmp_path, "mi210")
    t.set("card0", "pp_dpm_sclk", "0: 500Mhz \n1: 1700Mhz \n")  # no level marked: a reason, then freq1_input
    t.set("card0", "hwmon/hwmon3/freq1_input", "1234000000\n")
    (g,) = read(tmp_path)
    assert g.sm_clock_mhz == 1234


def test_pcie_bw_is_messages_times_payload(mi210: GpuSample) -> None:
    assert mi210.pcie_rx_bytes_per_s == 104857 * 256 and mi210.pcie_tx_bytes_per_s == 52428 * 256


def test_pcie_absent_says_why() -> None:
    (g,) = read("radeon")
    assert g.pcie_rx_bytes_per_s is None and "pcie_bw absent" in g.unavailable["pcie_rx_bytes_per_s"]


def test_ecc_sums_ras_counts(mi210: GpuSample) -> None:
    assert mi210.ecc_corrected == 4 and mi210.ecc_uncorrected == 1  # umc 3 + gfx 1 ce; sdma 1 ue


def test_ecc_without_ras_is_na() -> None:
    (g,) = read("radeon")
    assert g.ecc_corrected is None and "RAS" in g.unavailable["ecc_corrected"]


def test_throttle_from_v1_3_independent_status(mi210: GpuSample) -> None:
    assert mi210.throttle_reasons == ("ppt0",)


def test_energy_only_where_the_unit_is_documented(mi210: GpuSample) -> None:
    assert mi210.energy_joules is None and "v1.3" in mi210.unavailable["energy_joules"]
    g = read("mi300x")[0]
    assert g.energy_joules == pytest.approx(123_456_789_012 / 65536)  # v1.5, 15.259 uJ units


def test_no_equivalent_counters_say_so(mi210: GpuSample) -> None:
    for name in ("sm_activity_percent", "sm_occupancy_percent", "tensor_active_percent"):
        assert getattr(mi210, name) is None and mi210.unavailable[name] == NO_EQUIVALENT
    assert mi210.nvlink_rx_bytes_per_s is None and "XGMI" in mi210.unavailable["nvlink_rx_bytes_per_s"]


def test_xgmi_rate_from_gpu_metrics_v1_5(tmp_path: Path) -> None:
    gen = _generator()
    t = AmdTree(tmp_path, "mi300x")
    clock = Clock()
    with AmdCollector(tmp_path, use_amdsmi=False, pcie_background=False, clock=clock) as c:
        assert "no time passed" in c.read().gpus[0].unavailable["nvlink_rx_bytes_per_s"]
        clock.advance(1.0)
        first = c.read().gpus[0]
        assert first.nvlink_rx_bytes_per_s == 0.0  # primed at open: no traffic since
        clock.advance(2.0)
        more = tuple(v + 2048 for v in gen.XGMI_READ)  # 2 MiB per link more, 8 links
        t.set("card1", "gpu_metrics", gen.v1_5(xgmi_read=more))
        g = c.read().gpus[0]
    assert g.nvlink_rx_bytes_per_s == pytest.approx(8 * 2048 * 1024 / 2.0)
    assert g.nvlink_tx_bytes_per_s == 0.0


def test_mi250x_two_dies_two_gpus_second_die_power_na() -> None:
    a, b = read("mi250x", first_index=4)
    assert (a.index, b.index) == (4, 5) and a.uuid != b.uuid
    assert a.power_w == 402.0
    assert b.power_w is None and "first die" in b.unavailable["power_w"]


def test_mi300x_partitions_are_gpus_with_per_gpu_fields_na() -> None:
    gpus = read("mi300x")
    assert [g.name for g in gpus] == [f"AMD Instinct MI300X [QPX {k}/4]" for k in range(4)]  # card5 unused
    assert gpus[0].temperature_c == 61.0 and gpus[0].power_w == 548.0  # power1_input; no edge sensor
    assert gpus[0].pcie_rx_bytes_per_s is None  # no pcie_bw on MI300
    assert gpus[2].uuid == "AMD-d1a3f5c7e9b01234-p2"
    assert gpus[2].utilization_percent is None
    assert "partition 0 (card1, GPU 0)" in gpus[2].unavailable["utilization_percent"]


def test_unique_id_absent_leaves_uuid_empty_with_reason() -> None:
    (g,) = read("radeon")
    assert g.uuid == "" and "unique_id" in g.unavailable["uuid"]
    assert g.name == "AMD Radeon RX 7900 XT/XTX"


def test_unknown_device_id_is_named_by_hex(tmp_path: Path) -> None:
    t = AmdTree(tmp_path, "mi210")
    t.set("card0", "device", "0x74b5\n")
    assert read(tmp_path)[0].name == "AMD GPU 0x74b5"


def test_other_vendors_and_drivers_are_skipped(tmp_path: Path) -> None:
    t = AmdTree(tmp_path, "mi210")
    t.set("card0", "uevent", "DRIVER=nouveau\nPCI_SLOT_NAME=0000:03:00.0\n")
    with AmdCollector(tmp_path, use_amdsmi=False) as c:
        reading = c.read()
    assert reading.gpus == () and "no amdgpu card" in reading.unavailable["gpus"]


def test_no_drm_at_all(tmp_path: Path) -> None:
    with AmdCollector(tmp_path) as c:
        reading = c.read()
    assert reading.gpus == () and "no DRM cards" in reading.unavailable["gpus"]


def test_root_prefix_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPULENS_SYSFS_ROOT", str(AMD_DATA / "radeon"))
    with AmdCollector(use_amdsmi=False, pcie_background=False) as c:
        assert [g.name for g in c.read().gpus] == ["AMD Radeon RX 7900 XT/XTX"]


def test_background_pcie_reader_feeds_the_sample(tmp_path: Path) -> None:
    AmdTree(tmp_path, "mi210")
    with AmdCollector(tmp_path, use_amdsmi=False) as c:  # the production path: a reader thread
        import time

        deadline = time.monotonic() + 5
        g = c.read().gpus[0]
        while g.pcie_rx_bytes_per_s is None and time.monotonic() < deadline:
            time.sleep(0.01)
            g = c.read().gpus[0]
    assert g.pcie_rx_bytes_per_s == 104857 * 256


def _generator() -> ModuleType:
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_gpu_metrics", AMD_DATA / "make_gpu_metrics.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
