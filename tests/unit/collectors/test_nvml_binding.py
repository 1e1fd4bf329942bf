"""The NVML collector through the real binding: nvidia-ml-py's ``pynvml`` over a C stand-in of
libnvidia-ml.so.1 (tests/fakes/libnvml_standin.c, a TEST DOUBLE of the driver's library).

The Python fake (tests/fakes/fake_nvml.py) mimics pynvml; here pynvml's own ctypes wrappers,
structures and error classes run, so what they do (the two-call process lists, the
``_v3``/``_v2`` names, ``NVMLError`` subclasses by code, the GPM request structure) is checked,
and so is the raw field-value path (collectors/nvml/fieldvalues.py) that only the real binding
takes.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from gpulens.collectors.nvml import batch
from gpulens.collectors.nvml.collector import NvmlCollector
from gpulens.collectors.nvml.fastread import BatchedRead
from gpulens.collectors.nvml.fieldvalues import RECORD, RawFieldValues
from gpulens.collectors.sampler import Sampler
from gpulens.core.model import GpuSample
from tests.fakes.libnvml_standin import Standin, fresh_copy, standin_pynvml
from tests.fakes.own_tree import own_tree_pattern

GIB = 1 << 30
LINKS = 18
NOT_SUPPORTED, GPU_IS_LOST = 3, 15


_BATCHED = [True]
"""Whether this test's collectors read through the call batch (collectors/nvml/fastread.py)."""


@pytest.fixture(params=["batched", "pynvml"])
def nvml(built: Path, tmp_path: Path, request: pytest.FixtureRequest,
         monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[ModuleType, Standin]]:
    """The stand-in under pynvml; each test runs twice: GPUs read through the call batch, and
    through pynvml's wrappers alone (the path without the batch library)."""
    _BATCHED[0] = request.param == "batched"
    if _BATCHED[0]:
        loaded = batch.load()
        if isinstance(loaded, str):
            pytest.skip(loaded)
    else:
        monkeypatch.setattr(BatchedRead, "make", classmethod(lambda cls, device, cap=0: None))
    with standin_pynvml(fresh_copy(built, tmp_path)) as bound:
        yield bound


def _opened(pynvml: ModuleType, standin: Standin) -> NvmlCollector:
    """A collector whose clock the stand-in's counters follow: rates are exact."""
    standin.advance(0.0)  # from now on the counters follow standin.now, not CLOCK_MONOTONIC
    collector = NvmlCollector(pynvml, clock=standin.clock)
    assert [d._fast is not None for d in collector._devices] == [_BATCHED[0]] * 8
    return collector


def _read_after(collector: NvmlCollector, standin: Standin, seconds: float = 2.0) -> tuple[GpuSample, ...]:
    standin.advance(seconds)
    reading = collector.read()
    assert reading.unavailable == {}
    return reading.gpus


def test_every_field_of_eight_gpus_through_the_real_binding(nvml: tuple[ModuleType, Standin]) -> None:
    pynvml, standin = nvml
    standin.add_process(5, 4242, 3 * GIB, sm=55, mem=20)
    standin.inject_xid(6, 79)
    with _opened(pynvml, standin) as collector:
        gpus = _read_after(collector, standin)
    assert [g.index for g in gpus] == list(range(8))
    for i, g in enumerate(gpus):
        assert g.name == "TEST DOUBLE H100 (libnvml stand-in)"
        assert g.uuid == f"GPU-5a11d000-0000-4000-8000-{i:012d}"
        assert (g.utilization_percent, g.memory_utilization_percent) == (10 + i, 20 + i)
        assert (g.mem_used_bytes, g.mem_total_bytes) == ((i + 1) * GIB, 80 * GIB)
        assert (g.power_w, g.power_limit_w, g.temperature_c) == (100 + i, 700.0, 40 + i)
        assert (g.sm_clock_mhz, g.mem_clock_mhz) == (1980, 2619)
        assert (g.pcie_rx_bytes_per_s, g.pcie_tx_bytes_per_s) == ((1000 + i) * 1024.0, (2000 + i) * 1024.0)
        assert (g.ecc_corrected, g.ecc_uncorrected, g.throttle_reasons) == (0, 0, ())
        # 18 links moving 64 x (i+1) KiB/s each way, from the counters' difference over 2 s
        assert g.nvlink_rx_bytes_per_s == g.nvlink_tx_bytes_per_s == LINKS * 64 * (i + 1) * 1024
        assert g.sm_activity_percent == pytest.approx(2 + i / 10)  # GPM metric id + i/10
        assert g.tensor_active_percent == pytest.approx(5 + i / 10)
        assert g.energy_joules == pytest.approx(standin.now * (100 + i), rel=1e-6)  # mW x s since "load"
        assert g.unavailable == {}
    assert [g.xid_events for g in gpus] == [(), (), (), (), (), (), (79,), ()]
    procs = gpus[5].processes
    assert [(p.pid, p.used_memory_bytes, p.sm_util_percent, p.mem_util_percent) for p in procs] == [
        (4242, 3 * GIB, 55.0, 20.0)]
    assert all(g.processes == () for g in gpus if g.index != 5)


def test_nvlink_reads_raw_records_with_the_real_binding(nvml: tuple[ModuleType, Standin]) -> None:
    pynvml, _ = nvml
    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(2)
        ids = [(139, link) for link in range(LINKS)] + [(138, link) for link in range(LINKS)]
        raw = RawFieldValues.make(pynvml, handle, ids)
        assert raw is not None
        answer = raw.read()
        assert answer is not None
        codes, values = answer
        assert codes == (0,) * 2 * LINKS
        wrapped = pynvml.nvmlDeviceGetFieldValues(handle, ids)  # the binding's own call, a moment later
        assert [v.nvmlReturn for v in wrapped] == list(codes)
        for mine, theirs in zip(values, wrapped, strict=True):
            assert 0 < mine <= theirs.value.ullVal < mine + 64 * 3 * 30  # at most 30 s of 64 x 3 KiB/s later
        assert RECORD.size == 40
    finally:
        pynvml.nvmlShutdown()


def test_the_python_fake_takes_the_bindings_own_call() -> None:
    from tests.fakes.fake_nvml import make_fake_nvml

    fake = make_fake_nvml(1)
    fake.nvmlInit()
    assert RawFieldValues.make(fake, fake.nvmlDeviceGetHandleByIndex(0), [(139, 0)]) is None


def test_links_that_do_not_answer_are_left_out_and_none_answering_is_a_reason(
        nvml: tuple[ModuleType, Standin]) -> None:
    pynvml, standin = nvml
    standin.answering_links(1, 6)  # GPU 1: 6 of 18 links answer
    standin.answering_links(3, 0)  # GPU 3: none
    with _opened(pynvml, standin) as collector:
        standin.advance(2.0)
        reading = collector.read()
    g1, g3 = reading.gpus[1], reading.gpus[3]
    assert g1.nvlink_rx_bytes_per_s == 6 * 64 * 2 * 1024
    assert "nvlink_rx_bytes_per_s" not in g1.unavailable
    assert g3.nvlink_rx_bytes_per_s is None and g3.nvlink_tx_bytes_per_s is None
    assert "NVML_ERROR_NOT_SUPPORTED" in g3.unavailable["nvlink_rx_bytes_per_s"]
    assert g3.utilization_percent == 13.0


def test_a_failing_field_call_goes_through_the_binding_and_a_lost_gpu_is_said(
        nvml: tuple[ModuleType, Standin]) -> None:
    pynvml, standin = nvml
    with _opened(pynvml, standin) as collector:
        standin.fail("nvmlDeviceGetFieldValues", GPU_IS_LOST, gpu=2)
        standin.fail("nvmlDeviceGetPowerUsage", NOT_SUPPORTED, gpu=4)
        standin.advance(1.0)
        first = collector.read()
        calls = standin.calls()
        second = collector.read()
        calls_second = standin.calls() - calls
        third_calls = standin.calls()
        collector.read()
        calls_third = standin.calls() - third_calls
    lost = first.gpus[2]
    assert lost.utilization_percent is None
    assert "GPU is lost" in lost.unavailable["gpu"]  # pynvml's NVMLError_GpuIsLost, turned into GpuLost
    assert second.gpus[2].unavailable["gpu"] == lost.unavailable["gpu"]
    g4 = first.gpus[4]
    assert g4.power_w is None and "NVML_ERROR_NOT_SUPPORTED" in g4.unavailable["power_w"]
    assert g4.utilization_percent == 14.0
    assert second.gpus[4].unavailable["power_w"] == g4.unavailable["power_w"]  # said again, not asked again
    assert calls_second == calls_third  # reads after the first make the same calls: nothing retried


def test_a_sample_through_the_real_binding_places_gpu_memory_on_the_job(
        nvml: tuple[ModuleType, Standin]) -> None:
    pynvml, standin = nvml
    standin.add_process(3, os.getpid(), 2 * GIB, sm=40, mem=10)
    with Sampler(nvml=pynvml, kubelet=None, amd=None, job_pattern=own_tree_pattern(),
                 exec_events=False) as sampler:
        sample = sampler.sample()
    assert [g.index for g in sample.gpus] == list(range(8))
    assert "gpus" not in sample.unavailable
    (me,) = [j for j in sample.jobs if j.pid == os.getpid()]
    assert me.gpu_mem_bytes == {"3": 2 * GIB}


def test_after_the_stand_in_pynvml_has_its_own_library_again(built: Path, tmp_path: Path) -> None:
    import pynvml

    before = pynvml.nvmlLib
    with standin_pynvml(fresh_copy(built, tmp_path)) as (bound, _), NvmlCollector(bound) as collector:
        assert bound.nvmlLib is not before
        assert len(collector.read().gpus) == 8
    assert pynvml.nvmlLib is before
    with NvmlCollector() as collector:  # pynvml's own dlopen("libnvidia-ml.so.1"): a driver's, or none
        reading = collector.read()
    assert not [g for g in reading.gpus if "TEST DOUBLE" in g.name]
    if not os.path.exists("/dev/nvidiactl"):
        assert reading.gpus == () and reading.unavailable["gpus"].startswith("NVML init failed")


def test_a_binding_whose_field_value_differs_from_nvml_h_takes_its_own_call(
        nvml: tuple[ModuleType, Standin]) -> None:
    pynvml, _ = nvml

    class Shifted(ctypes.Structure):  # 40 bytes, as nvml.h's, but nvmlReturn and the value elsewhere
        _fields_ = (("fieldId", ctypes.c_uint), ("scopeId", ctypes.c_uint), ("nvmlReturn", ctypes.c_uint),
                    ("pad", ctypes.c_uint), ("value", ctypes.c_ulonglong), ("rest", ctypes.c_ulonglong * 2))

    assert ctypes.sizeof(Shifted) == RECORD.size
    same = SimpleNamespace(nvmlLib=pynvml.nvmlLib, c_nvmlFieldValue_t=pynvml.c_nvmlFieldValue_t)
    assert RawFieldValues.make(same, object(), [(139, 0)]) is not None
    shifted = SimpleNamespace(nvmlLib=pynvml.nvmlLib, c_nvmlFieldValue_t=Shifted)
    assert RawFieldValues.make(shifted, object(), [(139, 0)]) is None


def test_field_values_that_fail_for_good_are_not_asked_again(nvml: tuple[ModuleType, Standin]) -> None:
    pynvml, standin = nvml
    with _opened(pynvml, standin) as collector:
        before = standin.calls()
        _read_after(collector, standin)
        healthy = standin.calls() - before
        standin.fail("nvmlDeviceGetFieldValues", NOT_SUPPORTED, gpu=2)
        before = standin.calls()
        standin.advance(1.0)
        first = collector.read()
        failing = standin.calls() - before
        before = standin.calls()
        standin.advance(1.0)
        second = collector.read()
        after = standin.calls() - before
    assert failing == healthy + 1  # the raw call, then pynvml's wrapper for the error
    assert after == healthy - 1  # then neither: the reason is sticky
    for reading in (first, second):
        g2 = reading.gpus[2]
        assert g2.nvlink_rx_bytes_per_s is None
        assert "NVML_ERROR_NOT_SUPPORTED" in g2.unavailable["nvlink_rx_bytes_per_s"]
        assert g2.utilization_percent == 12.0
        assert reading.gpus[3].nvlink_rx_bytes_per_s == LINKS * 64 * 4 * 1024
