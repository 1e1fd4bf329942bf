"""GPM, XID events, clock event reasons, per-process figures and the collector's
life cycle, against the fake NVML test double; and the real pynvml here."""

from __future__ import annotations

import os

import pynvml
import pytest

from gpulens.collectors.nvml.collector import GpuReading, NvmlCollector
from gpulens.collectors.nvml.gpm import GPM_FIELDS, NO_GPM
from gpulens.collectors.nvml.query import NOT_SUPPORTED, decode_clock_reasons
from tests.fakes.fake_nvml import FakeNvml, make_fake_nvml


def _open(fake: FakeNvml, advance: float = 1.0) -> tuple[NvmlCollector, GpuReading]:
    collector = NvmlCollector(fake, clock=fake.clock)  # type: ignore[arg-type]
    fake.advance(advance)
    return collector, collector.read()


# --- GPM -----------------------------------------------------------------------------------


def test_gpm_on_reads_four_metrics_every_read() -> None:
    fake = make_fake_nvml(2, gpm=True)
    collector, first = _open(fake)
    assert first.gpus[0].sm_activity_percent == 71.5
    fake.gpus[1].gpm[2] = 12.5  # NVML_GPM_METRIC_SM_UTIL
    fake.advance(1.0)
    second = collector.read()
    assert second.gpus[1].sm_activity_percent == 12.5
    assert second.gpus[1].sm_occupancy_percent == 33.0
    assert second.gpus[1].dram_bw_util_percent == 41.25
    assert second.gpus[1].tensor_active_percent == 22.5  # NVML_GPM_METRIC_ANY_TENSOR_UTIL
    assert fake.gpm_samples_live == 4  # two per GPU, reused
    collector.close()
    assert fake.gpm_samples_live == 0


def test_gpm_off_is_none_with_reason() -> None:
    fake = make_fake_nvml(2, gpm=False, name="NVIDIA A100-SXM4-80GB")
    _, reading = _open(fake)
    for g in reading.gpus:
        assert (g.sm_activity_percent, g.sm_occupancy_percent, g.dram_bw_util_percent,
                g.tensor_active_percent) == (None, None, None, None)
        assert all(g.unavailable[f] == NO_GPM for f in GPM_FIELDS)
        assert g.utilization_percent == 87.0  # the rest still read
    assert fake.gpm_samples_live == 0


def test_gpm_mixed_gpus_and_one_failing_metric() -> None:
    fake = make_fake_nvml(3)
    fake.set_gpm(False, gpu=0)
    fake.gpus[2].gpm_errors[3] = NOT_SUPPORTED  # NVML_GPM_METRIC_SM_OCCUPANCY
    _, reading = _open(fake)
    assert reading.gpus[0].sm_activity_percent is None
    assert reading.gpus[1].sm_occupancy_percent == 33.0
    g = reading.gpus[2]
    assert g.sm_occupancy_percent is None and g.sm_activity_percent == 71.5
    assert "not supported" in g.unavailable["sm_occupancy_percent"]
    assert set(g.unavailable) == {"sm_occupancy_percent"}


def test_energy_counter_in_joules_or_none_with_the_drivers_reason() -> None:
    fake = make_fake_nvml(2)
    fake.gpus[0].energy_mj = 5_000_250
    fake.fail("nvmlDeviceGetTotalEnergyConsumption", NOT_SUPPORTED, gpu=1)  # pre-Volta GPUs
    _, reading = _open(fake)
    assert reading.gpus[0].energy_joules == 5000.25
    assert "energy_joules" not in reading.gpus[0].unavailable
    assert reading.gpus[1].energy_joules is None
    assert "not supported" in reading.gpus[1].unavailable["energy_joules"]
    assert reading.gpus[1].power_w is not None  # the rest still read


def test_gpm_query_missing_from_old_driver() -> None:
    fake = make_fake_nvml(1)
    fake.fail("nvmlGpmQueryDeviceSupport", fake.NVMLError_FunctionNotFound)
    _, reading = _open(fake)
    assert reading.gpus[0].dram_bw_util_percent is None
    assert "driver too old" in reading.gpus[0].unavailable["dram_bw_util_percent"]


def test_gpm_first_sample_failure_recovers() -> None:
    fake = make_fake_nvml(1)
    fake.fail("nvmlGpmSampleGet", fake.NVMLError_Unknown)
    collector = NvmlCollector(fake, clock=fake.clock)  # type: ignore[arg-type]
    fake.clear_failures()
    first = collector.read().gpus[0]
    assert first.sm_activity_percent is None
    assert "first GPM sample" in first.unavailable["sm_activity_percent"]
    fake.advance(1.0)
    assert collector.read().gpus[0].sm_activity_percent == 71.5


# --- XID events -------------------------------------------------------------------------


def test_xid_events_collected_between_reads_per_gpu() -> None:
    fake = make_fake_nvml(3)
    collector = NvmlCollector(fake, clock=fake.clock)  # type: ignore[arg-type]
    fake.inject_xid(1, 79)
    fake.inject_xid(1, 48)
    fake.inject_xid(2, 13)
    reading = collector.read()
    assert [g.xid_events for g in reading.gpus] == [(), (79, 48), (13,)]
    assert [g.xid_events for g in collector.read().gpus] == [(), (), ()]


def test_xid_flood_is_bounded_per_read() -> None:
    fake = make_fake_nvml(1)
    collector = NvmlCollector(fake, clock=fake.clock)  # type: ignore[arg-type]
    for _ in range(100):
        fake.inject_xid(0, 31)
    assert len(collector.read().gpus[0].xid_events) == 64
    assert len(collector.read().gpus[0].xid_events) == 36


def test_xid_registration_refused() -> None:
    fake = make_fake_nvml(2)
    fake.fail("nvmlDeviceRegisterEvents", fake.NVMLError_NotSupported, gpu=0)
    collector, reading = _open(fake)
    assert reading.gpus[0].xid_events == ()
    assert "not supported" in reading.gpus[0].unavailable["xid_events"]
    assert "xid_events" not in reading.gpus[1].unavailable
    assert fake.event_sets[0].freed  # the refused set was not leaked
    assert "xid_events" in collector.read().gpus[0].unavailable  # said every read


# --- clock event (throttle) reasons ----------------------------------------------------------


def test_decode_clock_reasons() -> None:
    assert decode_clock_reasons(0) == ()
    mask = pynvml.nvmlClocksEventReasonGpuIdle | pynvml.nvmlClocksEventReasonHwThermalSlowdown
    assert decode_clock_reasons(mask) == ("gpu_idle", "hw_thermal_slowdown")
    assert decode_clock_reasons(0x1FF) == (
        "gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown", "sync_boost",
        "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
        "display_clock_setting")
    assert decode_clock_reasons(0x4 | 0x800) == ("sw_power_cap", "other_0x800")


def test_clock_reasons_fall_back_to_throttle_call_on_older_pynvml() -> None:
    fake = make_fake_nvml(1)
    fake.gpus[0].clock_reasons = 0x8 | 0x20
    fake.remove("nvmlDeviceGetCurrentClocksEventReasons")
    _, reading = _open(fake)
    assert reading.gpus[0].throttle_reasons == ("hw_slowdown", "sw_thermal_slowdown")
    assert reading.gpus[0].unavailable == {}


# --- processes -------------------------------------------------------------------------------


def test_processes_memory_and_utilization_since_last_read() -> None:
    fake = make_fake_nvml(2)
    fake.add_process(0, 300, 3 << 30, sm_util=60, mem_util=25)
    fake.add_process(0, 100, 1 << 30, sm_util=10, mem_util=5)
    fake.add_process(0, 200, 512 << 20, graphics=True)  # no utilization samples
    collector, reading = _open(fake)
    procs = reading.gpus[0].processes
    assert [p.pid for p in procs] == [100, 200, 300]
    assert [p.used_memory_bytes for p in procs] == [1 << 30, 512 << 20, 3 << 30]
    assert [p.sm_util_percent for p in procs] == [10.0, None, 60.0]
    assert [p.mem_util_percent for p in procs] == [5.0, None, 25.0]
    assert "processes.sm_util_percent" in reading.gpus[0].unavailable
    assert reading.gpus[1].processes == () and reading.gpus[1].unavailable == {}
    # No new NVML sample since the last read: utilization unknown, memory still read.
    again = collector.read().gpus[0].processes
    assert [p.sm_util_percent for p in again] == [None, None, None]
    assert [p.used_memory_bytes for p in again] == [1 << 30, 512 << 20, 3 << 30]
    fake.gpus[0].processes[0].sm_util = 90
    fake.advance(1.0)
    assert collector.read().gpus[0].processes[2].sm_util_percent == 90.0


def test_process_in_both_lists_counted_once_and_missing_memory() -> None:
    fake = make_fake_nvml(1)
    fake.add_process(0, 7, None)
    fake.add_process(0, 7, 4096, graphics=True)
    fake.add_process(0, 8, None)
    _, reading = _open(fake)
    procs = reading.gpus[0].processes
    assert [(p.pid, p.used_memory_bytes) for p in procs] == [(7, 4096), (8, None)]
    assert "processes.used_memory_bytes" in reading.gpus[0].unavailable


def test_process_queries_refused() -> None:
    fake = make_fake_nvml(1)
    fake.fail("nvmlDeviceGetComputeRunningProcesses", fake.NVMLError_NoPermission)
    fake.fail("nvmlDeviceGetProcessUtilization", fake.NVMLError_NotSupported)
    _, reading = _open(fake)
    g = reading.gpus[0]
    assert g.processes == ()
    assert "no permission" in g.unavailable["processes"]
    assert "not supported" in g.unavailable["processes.sm_util_percent"]


# --- life cycle and the real library -------------------------------------------------------


def test_close_shuts_nvml_down_once_and_frees_everything() -> None:
    fake = make_fake_nvml(4)
    collector, _ = _open(fake)
    assert fake.init_count == 1
    collector.close()
    collector.close()
    assert (fake.init_count, fake.shutdown_count, fake.gpm_samples_live) == (0, 1, 0)
    assert all(es.freed for es in fake.event_sets)
    after = collector.read()
    assert after.gpus == () and after.unavailable["gpus"] == "NVML collector closed"


def test_context_manager_closes() -> None:
    fake = make_fake_nvml(1)
    with NvmlCollector(fake) as collector:  # type: ignore[arg-type]
        assert len(collector.read().gpus) == 1
    assert fake.shutdown_count == 1


@pytest.mark.skipif(os.path.exists("/dev/nvidiactl"), reason="this machine has an NVIDIA driver")
def test_real_pynvml_without_gpu_gives_empty_list_and_reason() -> None:
    collector = NvmlCollector()
    reading = collector.read()
    collector.close()
    assert reading.gpus == ()
    assert reading.unavailable["gpus"].startswith("NVML init failed")
    assert "NVML_ERROR_LIBRARY_NOT_FOUND" in reading.unavailable["gpus"] or (
        "NVML_ERROR_DRIVER_NOT_LOADED" in reading.unavailable["gpus"])


@pytest.mark.skipif(not os.path.exists("/dev/nvidiactl"), reason="no NVIDIA driver on this machine")
def test_real_gpus_are_read() -> None:
    with NvmlCollector() as collector:
        reading = collector.read()
    assert reading.unavailable == {} and reading.gpus
    for g in reading.gpus:
        assert g.uuid.startswith(("GPU-", "MIG-")) and g.name
        assert g.mem_total_bytes and g.mem_total_bytes > 0
        assert g.utilization_percent is not None or "utilization_percent" in g.unavailable


def test_process_lists_fall_back_to_v2_calls_on_older_drivers() -> None:
    fake = make_fake_nvml(1)
    fake.add_process(0, 11, 1 << 20)
    fake.add_process(0, 12, 2 << 20, graphics=True)
    fake.fail("nvmlDeviceGetComputeRunningProcesses", fake.NVMLLibraryMismatchError)
    fake.fail("nvmlDeviceGetGraphicsRunningProcesses", fake.NVMLError_FunctionNotFound)
    collector, reading = _open(fake)
    assert [p.pid for p in reading.gpus[0].processes] == [11, 12]
    assert "processes" not in reading.gpus[0].unavailable
    fake.fail("nvmlDeviceGetComputeRunningProcesses_v2", fake.NVMLError_FunctionNotFound)
    g = collector.read().gpus[0]
    assert [p.pid for p in g.processes] == [12]
    assert "driver too old" in g.unavailable["processes"]
