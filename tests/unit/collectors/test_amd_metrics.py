"""gpu_metrics decoding against the independently packed fixtures, and malformed sysfs values fuzzed:
every one becomes n/a with a reason, never an exception."""

from __future__ import annotations

import importlib.util
import struct
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpulens.collectors.amd import gpu_metrics as gm
from gpulens.collectors.amd.collector import AmdCollector
from gpulens.collectors.amd.fdinfo import parse_fdinfo
from gpulens.collectors.amd.sysfs import parse_dpm, parse_pcie_bw, parse_ras
from tests.fakes.amd_tree import AMD_DATA, AmdTree


def _gen() -> Any:
    spec = importlib.util.spec_from_file_location("make_gpu_metrics", AMD_DATA / "make_gpu_metrics.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


GEN = _gen()


def test_struct_sizes_match_the_packed_tables() -> None:
    assert gm.SIZES == {(1, 3): 120, (1, 4): 288, (1, 5): 360, (1, 6): 384}
    for fmt, version in ((GEN.V1_3, (1, 3)), (GEN.V1_4, (1, 4)), (GEN.V1_5, (1, 5)), (GEN.V1_6, (1, 6))):
        assert struct.calcsize(fmt) == gm.SIZES[version]


def test_committed_fixtures_are_what_the_generator_makes() -> None:
    for rel, make in GEN.FILES.items():
        assert (AMD_DATA / rel).read_bytes() == make(), rel


def test_v1_3_fields() -> None:
    m, why = gm.decode(GEN.v1_3(hotspot=77, indep_throttle=(1 << 36) | (1 << 0)))
    assert why is None and m is not None and m.version == (1, 3)
    assert m.get("temperature_hotspot") == 77 and m.get("average_gfx_activity") == 87
    assert m.get("temperature_vrgfx") is None  # 0xFFFF: not provided
    assert gm.throttle_names(m.get("indep_throttle_status") or 0) == ("ppt0", "temp_hotspot")


def test_v1_4_v1_5_and_v1_6_fields() -> None:
    for blob, version in ((GEN.v1_4(), (1, 4)), (GEN.v1_5(), (1, 5)), (GEN.v1_6(), (1, 6))):
        m, why = gm.decode(blob)
        assert why is None and m is not None and m.version == version
        assert m.get("energy_accumulator") == 123_456_789_012
        assert m.get("curr_socket_power") == 548 and m.get("temperature_hotspot") == 61
        assert m.total("xgmi_read_data_acc") == sum(GEN.XGMI_READ)
        assert m.get("current_uclk") == 1300 and m.values("current_gfxclk") == (1420,) * 8


def test_the_v1_4_fixture_in_a_tree_gives_energy(tmp_path: Path) -> None:
    t = AmdTree(tmp_path, "mi300x")
    t.set("card1", "gpu_metrics", (AMD_DATA / "gpu_metrics/mi300x-v1_4.bin").read_bytes())
    with AmdCollector(tmp_path, use_amdsmi=False) as c:
        g = c.read().gpus[0]
    assert g.energy_joules is not None and g.energy_joules > 0


def test_other_versions_truncation_and_size_mismatch_say_why() -> None:
    assert "v1.7" in (gm.decode(struct.pack("<HBB", 400, 1, 7) + bytes(396))[1] or "")
    assert "v2.2" in (gm.decode(struct.pack("<HBB", 100, 2, 2) + bytes(96))[1] or "")
    assert "truncated" in (gm.decode(GEN.v1_5()[:200])[1] or "")
    assert "structure_size" in (gm.decode(struct.pack("<H", 100) + GEN.v1_3()[2:])[1] or "")
    assert "header" in (gm.decode(b"\x01")[1] or "")


@given(st.binary(max_size=400))
def test_decode_never_raises(blob: bytes) -> None:
    m, why = gm.decode(blob)
    assert (m is None) != (why is None)


@given(st.text(max_size=80))
def test_text_parsers_never_raise(text: str) -> None:
    for value, why in (parse_dpm(text, "pp_dpm_sclk"), parse_ras(text, "umc_err_count"),
                       parse_pcie_bw(text)):
        assert (value is None) != (why is None)
    parse_fdinfo(text)


MALFORMED = st.one_of(
    st.just(""), st.just("-5\n"), st.just(str(1 << 70)), st.just("abc"), st.just("\x00\xff"),
    st.just("1.5"), st.just("0x10"), st.text(max_size=20), st.binary(max_size=20).map(lambda b: b.decode("latin-1")),
)
FILES = ("gpu_busy_percent", "mem_busy_percent", "mem_info_vram_used", "mem_info_vram_total", "pp_dpm_sclk",
         "pp_dpm_mclk", "pcie_bw", "ras/umc_err_count", "hwmon/hwmon3/power1_average", "hwmon/hwmon3/power1_cap",
         "hwmon/hwmon3/temp2_input", "hwmon/hwmon3/temp1_input", "unique_id", "device", "vendor")
FIELD_OF = {
    "gpu_busy_percent": "utilization_percent", "mem_busy_percent": "memory_utilization_percent",
    "mem_info_vram_used": "mem_used_bytes", "mem_info_vram_total": "mem_total_bytes",
    "pcie_bw": "pcie_rx_bytes_per_s", "ras/umc_err_count": "ecc_corrected",
    "hwmon/hwmon3/power1_average": "power_w", "hwmon/hwmon3/power1_cap": "power_limit_w",
}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(FILES), MALFORMED, st.one_of(st.binary(max_size=400), st.sampled_from([b"", b"\x00" * 3])))
def test_malformed_files_are_na_with_a_reason(tmp_path_factory: Any, name: str, text: str, metrics: bytes) -> None:
    root = tmp_path_factory.mktemp("amd")
    t = AmdTree(root, "mi210")
    t.set("card0", name, text.encode("utf-8", "surrogateescape"))
    t.set("card0", "gpu_metrics", metrics)
    with AmdCollector(root, use_amdsmi=False, pcie_background=False) as c:
        reading = c.read()
    if name in ("device", "vendor") and not reading.gpus:
        assert reading.unavailable["gpus"]
        return
    (g,) = reading.gpus
    for attr, why_key in (("energy_joules", "energy_joules"), ("throttle_reasons", "throttle_reasons")):
        if not getattr(g, attr):
            assert g.unavailable[why_key]
    field = FIELD_OF.get(name)
    if field is not None and getattr(g, field) is None:
        assert g.unavailable[field]
    for key, value in vars_of(g).items():
        if value is None and key in FIELD_OF.values():
            assert g.unavailable.get(key), key


def vars_of(g: Any) -> dict[str, Any]:
    return {k: getattr(g, k) for k in g.__slots__}
