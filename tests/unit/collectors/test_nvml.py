"""The NVML GPU collector against the fake NVML test double (tests/fakes/fake_nvml.py),
plus one check of the real pynvml on this machine (no GPU, no driver)."""

from __future__ import annotations

import json
import re
import sys

import pynvml
import pytest

from gpulens.collectors.nvml.collector import GpuReading, NvmlCollector
from gpulens.collectors.nvml.query import NOT_SUPPORTED
from gpulens.core.model import GpuSample
from gpulens.ipc.serialize import from_dict, to_dict
from tests.fakes.fake_nvml import FakeNvml, make_fake_nvml
from tests.fakes.fake_nvml_types import constants, error_classes
from tests.paths import ROOT

LINKS, RX_KIB_S, TX_KIB_S = 18, 1000, 2000


def _open(fake: FakeNvml, advance: float = 1.0) -> tuple[NvmlCollector, GpuReading]:
    collector = NvmlCollector(fake, clock=fake.clock)  # type: ignore[arg-type]
    fake.advance(advance)
    return collector, collector.read()


def _counted(fake: FakeNvml, fn: str) -> list[int]:
    calls = [0]
    real = getattr(fake, fn)

    def wrapper(*args: object) -> object:
        calls[0] += 1
        return real(*args)

    setattr(fake, fn, wrapper)
    return calls


# --- the double is faithful to pynvml, and the collector uses real names ----------


def test_fake_constants_and_errors_match_installed_pynvml() -> None:
    for name, value in constants().items():
        assert getattr(pynvml, name) == value, name
    for name, cls in error_classes().items():
        real = getattr(pynvml, name)
        assert real().value == cls().value, name
        assert type(pynvml.NVMLError(cls().value)) is real
        assert isinstance(FakeNvml([]).NVMLError(cls().value), cls)


def test_collector_calls_only_functions_pynvml_has() -> None:
    source = "".join(p.read_text() for p in (ROOT / "collectors" / "nvml").glob("*.py"))
    # Every name the collector looks up: quoted (Query calls, getattr) or nvml.<attr>.
    names = set(re.findall(r'"((?:nvml|NVML_|c_nvml)\w+)"', source))
    names |= set(re.findall(r"\bnvml\.((?:nvml|NVML|c_nvml)\w+)", source))
    names -= {field for field, _ in pynvml.c_nvmlFieldValue_t._fields_}  # a field value's own (attrgetter)
    assert len(names) > 30
    missing = sorted(n for n in names if not hasattr(pynvml, n))
    assert missing == []
    fake = make_fake_nvml(1)
    # The batched read (fastread.py) calls C symbols that pynvml's function lookup resolves in the library it
    # loaded: the fake has no library, so those are checked against the C stand-in's exports instead.
    c_only = set(re.findall(r'"(nvml\w+)"', (ROOT / "collectors" / "nvml" / "fastread.py").read_text()))
    c_only -= set(re.findall(r'"(nvml\w+)"', "".join(
        p.read_text() for p in (ROOT / "collectors" / "nvml").glob("*.py") if p.name != "fastread.py")))
    assert {"nvmlEventSetWait_v2", "nvmlDeviceGetComputeRunningProcesses_v3"} <= c_only
    standin = (ROOT / "tests" / "fakes" / "libnvml_standin.c").read_text()
    assert sorted(n for n in c_only if not re.search(rf"\bint {n}\(", standin)) == []
    # nvmlLib is the library the real binding loaded (collectors/nvml/fieldvalues.py): the fake has none
    assert sorted(n for n in names - {"nvmlLib"} - c_only if n.startswith("nvml") and not hasattr(fake, n)) == []
    assert "nvmlLib" in names


# --- success -------------------------------------------------------------------------


def test_reads_every_field_of_eight_gpus() -> None:
    fake = make_fake_nvml(8)
    collector, reading = _open(fake)
    assert reading.unavailable == {}
    assert [g.index for g in reading.gpus] == list(range(8))
    g = reading.gpus[3]
    assert g.name == "NVIDIA H100 80GB HBM3"
    assert g.uuid == "GPU-fa4e0000-0000-0000-0000-000000000003"
    assert (g.utilization_percent, g.memory_utilization_percent) == (87.0, 45.0)
    assert (g.mem_used_bytes, g.mem_total_bytes) == (60 << 30, 80 << 30)
    assert g.power_w == pytest.approx(512.345)
    assert g.power_limit_w == 700.0
    assert g.temperature_c == 61.0
    assert (g.sm_clock_mhz, g.mem_clock_mhz) == (1980, 2619)
    assert (g.pcie_rx_bytes_per_s, g.pcie_tx_bytes_per_s) == (1200 * 1024, 800 * 1024)
    assert g.nvlink_rx_bytes_per_s == pytest.approx(LINKS * RX_KIB_S * 1024)
    assert g.nvlink_tx_bytes_per_s == pytest.approx(LINKS * TX_KIB_S * 1024)
    assert (g.ecc_corrected, g.ecc_uncorrected) == (3, 0)
    assert g.throttle_reasons == ("sw_power_cap",)
    assert (g.sm_activity_percent, g.sm_occupancy_percent, g.dram_bw_util_percent) == (
        71.5, 33.0, 41.25)
    assert g.xid_events == () and g.processes == ()
    assert g.unavailable == {}
    collector.close()


def test_sample_survives_serialization() -> None:
    fake = make_fake_nvml(2)
    fake.add_process(0, 77, 1 << 30, sm_util=5, mem_util=1)
    _, reading = _open(fake)
    for gpu in reading.gpus:
        plain = json.loads(json.dumps(to_dict(gpu)))
        assert from_dict(GpuSample, plain) == gpu


# --- rates between reads ---------------------------------------------------------------


def test_nvlink_rate_follows_counters_between_reads() -> None:
    fake = make_fake_nvml(1)
    collector, _ = _open(fake)
    fake.gpus[0].nvlink_rx_kib_per_s = 4000
    fake.advance(0.5)
    g = collector.read().gpus[0]
    assert g.nvlink_rx_bytes_per_s == pytest.approx(LINKS * 4000 * 1024)
    assert g.nvlink_tx_bytes_per_s == pytest.approx(LINKS * TX_KIB_S * 1024)
    fake.gpus[0].nvlink_rx_kib = [0] * LINKS  # driver reload: counters restart
    fake.advance(0.1)
    g = collector.read().gpus[0]
    assert g.nvlink_rx_bytes_per_s is None
    assert "backwards" in g.unavailable["nvlink_rx_bytes_per_s"]
    fake.advance(1.0)
    assert collector.read().gpus[0].nvlink_rx_bytes_per_s == pytest.approx(LINKS * 4000 * 1024)


def test_nvlink_absent_or_per_link_error_is_none_with_reason() -> None:
    fake = make_fake_nvml(2)
    fake.gpus[0].nvlink_links = 0
    fake.gpus[1].field_errors[pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX] = NOT_SUPPORTED
    _, reading = _open(fake)
    a, b = reading.gpus
    assert a.nvlink_rx_bytes_per_s is None and a.nvlink_tx_bytes_per_s is None
    assert a.unavailable["nvlink_tx_bytes_per_s"] == "this GPU has no NVLink links"
    assert b.nvlink_rx_bytes_per_s is None
    assert "not supported" in b.unavailable["nvlink_rx_bytes_per_s"]
    assert b.nvlink_tx_bytes_per_s == pytest.approx(LINKS * TX_KIB_S * 1024)


def test_hostile_link_count_is_bounded() -> None:
    fake = make_fake_nvml(1)
    fake.gpus[0].nvlink_links = 5000
    fake.gpus[0].nvlink_rx_kib = [0] * 5000
    fake.gpus[0].nvlink_tx_kib = [0] * 5000
    _, reading = _open(fake)
    assert reading.gpus[0].nvlink_rx_bytes_per_s == pytest.approx(64 * RX_KIB_S * 1024)


# --- errors the collector handles --------------------------------------------------------


def test_not_supported_field_is_none_with_reason_and_not_asked_again() -> None:
    fake = make_fake_nvml(2)
    fake.fail("nvmlDeviceGetPowerUsage", fake.NVMLError_NotSupported)
    calls = _counted(fake, "nvmlDeviceGetPowerUsage")
    collector, reading = _open(fake)
    for g in reading.gpus:
        assert g.power_w is None
        assert "NVML_ERROR_NOT_SUPPORTED" in g.unavailable["power_w"]
        assert g.power_limit_w == 700.0 and g.utilization_percent == 87.0
        assert set(g.unavailable) == {"power_w"}
    again = collector.read()
    assert calls[0] == 2  # once per GPU, at the first read only
    assert again.gpus[1].unavailable["power_w"] == reading.gpus[1].unavailable["power_w"]


def test_no_permission_on_one_gpu_only() -> None:
    fake = make_fake_nvml(4)
    fake.fail("nvmlDeviceGetTotalEccErrors", fake.NVMLError_NoPermission, gpu=3)
    _, reading = _open(fake)
    assert reading.gpus[3].ecc_corrected is None and reading.gpus[3].ecc_uncorrected is None
    assert "no permission" in reading.gpus[3].unavailable["ecc_corrected"]
    assert "ecc_uncorrected" in reading.gpus[3].unavailable
    assert all(g.ecc_corrected == 3 and g.unavailable == {} for g in reading.gpus[:3])


def test_transient_error_is_retried_next_read() -> None:
    fake = make_fake_nvml(1)
    fake.fail("nvmlDeviceGetTemperature", fake.NVMLError_Unknown)
    collector, reading = _open(fake)
    assert reading.gpus[0].temperature_c is None
    assert reading.gpus[0].unavailable["temperature_c"].startswith("NVML error 999")
    fake.clear_failures()
    g = collector.read().gpus[0]
    assert g.temperature_c == 61.0 and "temperature_c" not in g.unavailable


def test_gpu_lost_while_running_others_still_read() -> None:
    fake = make_fake_nvml(4)
    collector, _ = _open(fake)
    fake.lose_gpu(2)
    fake.advance(1.0)
    reading = collector.read()
    lost = reading.gpus[2]
    assert lost.name == "NVIDIA H100 80GB HBM3" and lost.uuid.endswith("000000000002")
    assert "NVML_ERROR_GPU_IS_LOST" in lost.unavailable["gpu"]
    assert lost.utilization_percent is None and lost.power_w is None
    assert all(reading.gpus[i].utilization_percent == 87.0 for i in (0, 1, 3))
    assert collector.read().gpus[2].unavailable == lost.unavailable
    collector.close()
    assert fake.gpm_samples_live == 0


def test_gpu_lost_at_open_is_reported() -> None:
    fake = make_fake_nvml(3)
    fake.fail("nvmlDeviceGetHandleByIndex", fake.NVMLError_GpuIsLost, gpu=1)
    _, reading = _open(fake)
    assert len(reading.gpus) == 3
    assert reading.gpus[1].uuid == "" and "lost" in reading.gpus[1].unavailable["gpu"]
    assert reading.gpus[2].utilization_percent == 87.0


def test_gpu_lost_while_draining_events() -> None:
    fake = make_fake_nvml(2)
    collector, _ = _open(fake)
    fake.fail("nvmlEventSetWait", fake.NVMLError_GpuIsLost)
    reading = collector.read()
    assert all("lost" in g.unavailable["gpu"] for g in reading.gpus)


@pytest.mark.parametrize(
    ("init_error", "words"),
    [
        ("LibraryNotFound", "libnvidia-ml.so.1 not found"),
        ("DriverNotLoaded", "driver not loaded"),
        ("NoPermission", "no permission"),
        ("Unknown", "NVML error 999"),
    ],
)
def test_init_failure_gives_no_gpus_and_the_reason(init_error: str, words: str) -> None:
    fake = make_fake_nvml(8, init_error=error_classes()[f"NVMLError_{init_error}"])
    collector = NvmlCollector(fake)  # type: ignore[arg-type]
    reading = collector.read()
    assert reading.gpus == ()
    assert words in reading.unavailable["gpus"]
    collector.close()
    assert fake.shutdown_count == 0  # never initialised, so never shut down


def test_pynvml_not_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    reading = NvmlCollector().read()
    assert reading.gpus == ()
    assert "pynvml is not importable" in reading.unavailable["gpus"]


def test_no_gpu_and_count_failure() -> None:
    reading = NvmlCollector(make_fake_nvml(0)).read()  # type: ignore[arg-type]
    assert reading == GpuReading((), {"gpus": "NVML found no NVIDIA GPU on this machine"})
    fake = make_fake_nvml(2)
    fake.fail("nvmlDeviceGetCount", fake.NVMLError_DriverNotLoaded)
    reading = NvmlCollector(fake).read()  # type: ignore[arg-type]
    assert reading.gpus == () and "cannot count GPUs" in reading.unavailable["gpus"]


def test_unexpected_exception_in_one_gpu_is_contained() -> None:
    fake = make_fake_nvml(3)
    collector, _ = _open(fake)
    fake.fail("nvmlDeviceGetUtilizationRates", ZeroDivisionError, gpu=0)
    reading = collector.read()
    assert "internal error" in reading.gpus[0].unavailable["gpu"]
    assert "ZeroDivisionError" in reading.gpus[0].unavailable["gpu"]
    assert reading.gpus[1].utilization_percent == 87.0


def test_older_pynvml_without_a_function() -> None:
    fake = make_fake_nvml(1)
    fake.remove("nvmlDeviceGetPcieThroughput")
    _, reading = _open(fake)
    assert reading.gpus[0].pcie_rx_bytes_per_s is None
    assert "upgrade nvidia-ml-py" in reading.gpus[0].unavailable["pcie_tx_bytes_per_s"]


def test_unreadable_name_keeps_its_reason_on_every_read() -> None:
    fake = make_fake_nvml(1)
    fake.fail("nvmlDeviceGetName", fake.NVMLError_NoPermission)
    collector, reading = _open(fake)
    assert reading.gpus[0].name == "" and "no permission" in reading.gpus[0].unavailable["name"]
    assert "name" in collector.read().gpus[0].unavailable
    assert reading.gpus[0].power_w == pytest.approx(512.345)


def test_unexpected_exception_while_opening_a_gpu_is_contained() -> None:
    fake = make_fake_nvml(2)
    fake.fail("nvmlEventSetCreate", KeyError)
    _, reading = _open(fake)
    assert all("internal error opening GPU: KeyError" in g.unavailable["gpu"] for g in reading.gpus)


# --- a call that answered before: later reads call it straight away ---------------------------


def test_field_that_answered_then_becomes_unsupported_is_not_asked_again() -> None:
    fake = make_fake_nvml(1)
    calls = _counted(fake, "nvmlDeviceGetPowerUsage")
    collector, first = _open(fake)
    assert first.gpus[0].power_w == pytest.approx(512.345)
    fake.fail("nvmlDeviceGetPowerUsage", fake.NVMLError_NotSupported)
    second = collector.read().gpus[0]
    assert second.power_w is None and "NVML_ERROR_NOT_SUPPORTED" in second.unavailable["power_w"]
    third = collector.read().gpus[0]
    assert calls[0] == 2  # the answer, then the permanent error; never again
    assert third.unavailable["power_w"] == second.unavailable["power_w"] and third.power_limit_w == 700.0


def test_call_that_answered_then_is_missing_falls_back_to_the_older_one() -> None:
    fake = make_fake_nvml(1)
    fake.gpus[0].clock_reasons = 0x4
    newer = _counted(fake, "nvmlDeviceGetCurrentClocksEventReasons")
    older = _counted(fake, "nvmlDeviceGetCurrentClocksThrottleReasons")
    collector, first = _open(fake)
    assert first.gpus[0].throttle_reasons == ("sw_power_cap",) and (newer[0], older[0]) == (1, 0)
    fake.fail("nvmlDeviceGetCurrentClocksEventReasons", fake.NVMLError_FunctionNotFound)
    fake.advance(1.0)
    second = collector.read().gpus[0]
    assert second.throttle_reasons == ("sw_power_cap",) and second.unavailable == {}  # the same read
    collector.read()
    assert (newer[0], older[0]) == (2, 2)  # the missing call is not tried again


def test_transient_error_after_answers_is_said_once_and_retried() -> None:
    fake = make_fake_nvml(1)
    collector, first = _open(fake)
    assert first.gpus[0].temperature_c == 61.0
    fake.fail("nvmlDeviceGetTemperature", fake.NVMLError_Unknown)
    assert collector.read().gpus[0].unavailable["temperature_c"].startswith("NVML error 999")
    fake.clear_failures()
    again = collector.read().gpus[0]
    assert again.temperature_c == 61.0 and "temperature_c" not in again.unavailable


def test_one_clock_unsupported_after_answers_leaves_the_other_clock_asked() -> None:
    fake = make_fake_nvml(1)
    collector, _ = _open(fake)
    real = fake.nvmlDeviceGetClockInfo

    def sm_unsupported(h: object, clock_type: int) -> int:
        if clock_type == fake.NVML_CLOCK_SM:
            raise fake.NVMLError_NotSupported()
        return real(h, clock_type)  # type: ignore[arg-type]

    fake.nvmlDeviceGetClockInfo = sm_unsupported  # type: ignore[method-assign]
    for _ in range(2):
        g = collector.read().gpus[0]
        assert g.sm_clock_mhz is None and "NVML_ERROR_NOT_SUPPORTED" in g.unavailable["sm_clock_mhz"]
        assert g.mem_clock_mhz is not None and "mem_clock_mhz" not in g.unavailable
