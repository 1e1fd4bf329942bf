"""MIG through the NVML collector (collectors/nvml/mig.py) against the fake NVML test double:
the MIG devices' UUIDs of a GPU in MIG mode, listed at open and again when the mode changes, and
NVML errors in the MIG calls never breaking the sample."""

from __future__ import annotations

import pytest

from gpulens.collectors.nvml.collector import GpuReading, NvmlCollector
from gpulens.collectors.nvml.mig import MAX_MIG_DEVICES, RELIST_S, MigDevice
from gpulens.core.model import GpuSample
from gpulens.ipc.serialize import from_dict, to_dict
from tests.fakes.fake_nvml import FakeMig, FakeNvml, make_fake_nvml

GIB = 1 << 30
GPU1 = "GPU-fa4e0000-0000-0000-0000-000000000001"
MIGS = [f"MIG-fa4e0001-0000-4000-8000-{slot:012d}" for slot in range(4)]


def _node() -> FakeNvml:
    """GPU 0: MIG capable, off; GPU 1: MIG on, devices in slots 0, 1 and 3 (slot 2 empty);
    GPU 2: MIG off, on after the next reset; GPU 3: no MIG at all (NotSupported)."""
    fake = make_fake_nvml(4)
    migs = fake.set_mig(1, 4)
    fake.gpus[1].mig_slots[2] = None
    migs[1].compute_instance = 1
    fake.gpus[2].mig_mode = (0, 1)
    fake.gpus[3].mig_mode = None
    return fake


def _read(fake: FakeNvml) -> tuple[NvmlCollector, GpuReading]:
    collector = NvmlCollector(fake, clock=fake.clock)  # type: ignore[arg-type]
    return collector, _again(collector, fake)


def _again(collector: NvmlCollector, fake: FakeNvml) -> GpuReading:
    fake.advance(1.0)  # time passes between reads, as in life
    return collector.read()


def _counted(fake: FakeNvml, fn: str) -> list[int]:
    calls = [0]
    real = getattr(fake, fn)

    def wrapper(*args: object) -> object:
        calls[0] += 1
        return real(*args)

    setattr(fake, fn, wrapper)
    return calls


def _uuids(reading: GpuReading) -> list[str]:
    return sorted(reading.mig_parents)


def test_the_mig_devices_of_a_gpu_in_mig_mode_are_read() -> None:
    collector, reading = _read(_node())
    assert reading.mig_parents == {MIGS[0]: GPU1, MIGS[1]: GPU1, MIGS[3]: GPU1}
    g0, g1, g2, g3 = reading.gpus
    assert g1.unavailable == {"mig": (
        f"MIG mode on: 3 MIG devices: {MIGS[0]} (GPU instance 7, compute instance 0, 9.8 GiB), "
        f"{MIGS[1]} (GPU instance 8, compute instance 1, 9.8 GiB), "
        f"{MIGS[3]} (GPU instance 10, compute instance 0, 9.8 GiB)")}
    assert g2.unavailable == {"mig": "MIG mode off; on after the next GPU reset (pending)"}
    assert g0.unavailable == {} and g3.unavailable == {}  # MIG off, or no MIG: nothing to say
    # the GPU's own figures are read as ever
    assert g1.uuid == GPU1 and g1.mem_total_bytes == 80 * GIB and g1.power_w is not None
    assert collector._devices[1].mig_devices[1] == MigDevice(MIGS[1], 1, 8, 1, 10 * GIB - (256 << 20))
    collector.close()


def test_mig_on_with_a_reset_pending_and_with_no_devices_is_said() -> None:
    fake = make_fake_nvml(2)
    fake.set_mig(0, 1, pending=0)
    fake.set_mig(1, 0)
    _, reading = _read(fake)
    assert reading.gpus[0].unavailable["mig"] == (
        "MIG mode on: 1 MIG device: MIG-fa4e0000-0000-4000-8000-000000000000 (GPU instance 7, compute instance 0, "
        "9.8 GiB); off after the next GPU reset (pending)")
    assert reading.gpus[1].unavailable["mig"] == "MIG mode on: no MIG devices"
    assert reading.mig_parents == {"MIG-fa4e0000-0000-4000-8000-000000000000": reading.gpus[0].uuid}


def test_listed_at_open_and_again_only_when_the_mode_changes_or_a_while_passed() -> None:
    fake = _node()
    listed = _counted(fake, "nvmlDeviceGetMigDeviceHandleByIndex")
    collector, reading = _read(fake)
    assert listed[0] == 7  # GPU 1's seven slots, once, at open
    for _ in range(5):
        reading = _again(collector, fake)
    assert listed[0] == 7 and _uuids(reading) == [MIGS[0], MIGS[1], MIGS[3]]
    fake.set_mig(0, 2)  # GPU 0 turned to MIG mode (a reset, in life)
    fake.gpus[1].mig_mode = (0, 0)  # GPU 1 out of it
    reading = _again(collector, fake)
    assert listed[0] == 14
    assert reading.mig_parents == {"MIG-fa4e0000-0000-4000-8000-000000000000": reading.gpus[0].uuid,
                                   "MIG-fa4e0000-0000-4000-8000-000000000001": reading.gpus[0].uuid}
    assert "mig" not in reading.gpus[1].unavailable
    # instances created while the mode stays on are seen at the next listing, RELIST_S later
    fake.gpus[0].mig_slots.append(FakeMig(fake.gpus[0], "MIG-new", gpu_instance=9))
    assert "MIG-new" not in _again(collector, fake).mig_parents
    fake.advance(RELIST_S - 2.0)
    reading = _again(collector, fake)
    assert reading.mig_parents["MIG-new"] == reading.gpus[0].uuid and listed[0] == 21
    collector.close()


def test_a_gpu_without_mig_is_not_asked_again_and_says_nothing() -> None:
    fake = make_fake_nvml(2)
    fake.gpus[0].mig_mode = None
    asked = _counted(fake, "nvmlDeviceGetMigMode")
    collector, reading = _read(fake)
    for _ in range(3):
        reading = _again(collector, fake)
    assert asked[0] == 1 + 5  # GPU 0 once (NotSupported), GPU 1 at open and every read
    assert all(g.unavailable == {} for g in reading.gpus) and reading.mig_parents == {}


def test_an_older_pynvml_without_the_mig_calls_says_nothing() -> None:
    fake = _node()
    fake.remove("nvmlDeviceGetMigMode")
    _, reading = _read(fake)
    assert reading.mig_parents == {} and all("mig" not in g.unavailable for g in reading.gpus)
    assert reading.gpus[1].utilization_percent == 87.0


def test_a_generic_error_reading_the_mode_is_said_and_asked_again() -> None:
    fake = _node()
    collector, _ = _read(fake)
    fake.fail("nvmlDeviceGetMigMode", fake.NVMLError_Unknown, gpu=1)
    reading = _again(collector, fake)
    assert reading.gpus[1].unavailable == {"mig": "MIG mode not read: NVML error 999: Unknown Error"}
    assert reading.gpus[1].utilization_percent == 87.0
    assert len(reading.mig_parents) == 3  # the devices as last listed are kept
    fake.clear_failures()
    assert _again(collector, fake).gpus[1].unavailable["mig"].startswith("MIG mode on: 3 MIG devices")


def test_no_permission_for_the_mode_is_said_on_every_read_and_not_asked_again() -> None:
    fake = _node()
    fake.fail("nvmlDeviceGetMigMode", fake.NVMLError_NoPermission, gpu=2)
    asked = _counted(fake, "nvmlDeviceGetMigMode")
    collector, reading = _read(fake)
    why = "MIG mode not read: no permission; needs root or admin rights (NVML_ERROR_NO_PERMISSION)"
    assert reading.gpus[2].unavailable == {"mig": why}
    before = asked[0]
    assert _again(collector, fake).gpus[2].unavailable == {"mig": why}
    assert asked[0] == before + 2  # GPUs 0 and 1 only


def test_errors_listing_the_devices_keep_the_sample_and_are_retried() -> None:
    fake = _node()
    fake.fail("nvmlDeviceGetMigDeviceHandleByIndex", fake.NVMLError_Unknown, gpu=1)
    collector, reading = _read(fake)
    assert reading.mig_parents == {}
    note = reading.gpus[1].unavailable["mig"]
    assert note.startswith("MIG mode on: no MIG devices; 7 MIG devices not read (slot 0: NVML error 999")
    assert reading.gpus[1].temperature_c == 61.0 and reading.gpus[0].unavailable == {}
    fake.clear_failures()
    assert _uuids(_again(collector, fake)) == [MIGS[0], MIGS[1], MIGS[3]]  # a failed listing is tried again


def test_one_unreadable_mig_device_is_left_out_with_the_reason() -> None:
    fake = _node()
    broken = fake.gpus[1].mig_slots[1]
    assert broken is not None
    broken.error = fake.NVMLError_Unknown
    _, reading = _read(fake)
    assert _uuids(reading) == [MIGS[0], MIGS[3]]
    assert reading.gpus[1].unavailable["mig"].endswith(
        "; 1 MIG device not read (slot 1 UUID: NVML error 999: Unknown Error)")


def test_the_optional_figures_of_a_mig_device_may_be_missing() -> None:
    fake = _node()
    fake.fail("nvmlDeviceGetGpuInstanceId", fake.NVMLError_NotSupported)
    fake.fail("nvmlDeviceGetMemoryInfo", fake.NVMLError_Unknown, gpu=1)  # the GPU's own memory too
    fake.remove("nvmlDeviceGetComputeInstanceId")
    _, reading = _read(fake)
    g1 = reading.gpus[1]
    assert _uuids(reading) == [MIGS[0], MIGS[1], MIGS[3]]
    assert g1.unavailable["mig"] == f"MIG mode on: 3 MIG devices: {MIGS[0]}, {MIGS[1]}, {MIGS[3]}"
    assert g1.mem_total_bytes is None and "mem_total_bytes" in g1.unavailable


def test_a_gpu_lost_in_a_mig_call_is_reported_and_the_others_read() -> None:
    fake = _node()
    collector, _ = _read(fake)
    fake.fail("nvmlDeviceGetMigMode", fake.NVMLError_GpuIsLost, gpu=1)
    reading = _again(collector, fake)
    assert reading.gpus[1].unavailable == {
        "gpu": "GPU is lost: fell off the bus or needs a reset (NVML_ERROR_GPU_IS_LOST)"}
    assert [g.utilization_percent for g in reading.gpus] == [87.0, None, 87.0, 87.0]


def test_a_gpu_lost_while_listing_at_open_is_reported() -> None:
    fake = _node()
    fake.fail("nvmlDeviceGetMaxMigDeviceCount", fake.NVMLError_GpuIsLost, gpu=1)
    _, reading = _read(fake)
    assert "GPU is lost" in reading.gpus[1].unavailable["gpu"]
    assert reading.gpus[0].unavailable == {} and reading.mig_parents == {}


def test_a_hostile_slot_count_is_bounded() -> None:
    fake = _node()
    fake.gpus[1].mig_max = 1_000_000
    listed = _counted(fake, "nvmlDeviceGetMigDeviceHandleByIndex")
    _, reading = _read(fake)
    assert listed[0] == MAX_MIG_DEVICES and len(reading.mig_parents) == 3


def test_odd_mode_answers_and_count_errors_are_reasons(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _node()
    fake.fail("nvmlDeviceGetMaxMigDeviceCount", fake.NVMLError_Unknown, gpu=1)
    monkeypatch.setattr(fake, "nvmlDeviceGetMigMode", lambda h: [1, 1] if h.index == 1 else [0])
    _, reading = _read(fake)
    assert reading.gpus[0].unavailable == {"mig": "MIG mode not read: unexpected answer (ValueError)"}
    assert reading.gpus[1].unavailable == {
        "mig": "MIG mode on: no MIG devices; MIG devices not listed: NVML error 999: Unknown Error"}


def test_the_mig_note_survives_serialization() -> None:
    _, reading = _read(_node())
    for gpu in reading.gpus:
        assert from_dict(GpuSample, to_dict(gpu)) == gpu


def test_an_unexpected_exception_in_the_mig_path_keeps_the_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _node()

    def broken(h: object) -> object:
        raise RuntimeError("boom")

    monkeypatch.setattr(fake, "nvmlDeviceGetMigMode", broken)
    _, reading = _read(fake)
    assert reading.gpus[1].unavailable == {"mig": "MIG layout not read: internal error: RuntimeError: boom"}
    assert [g.utilization_percent for g in reading.gpus] == [87.0] * 4
