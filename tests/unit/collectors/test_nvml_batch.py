"""The NVML call batch: C (collectors/nvml/nvbatch.c) and the batched GPU read over it.

The batched read (collectors/nvml/fastread.py) must give what pynvml's path gives: every test
here reads the same C stand-in of libnvidia-ml.so.1 (tests/fakes/libnvml_standin.c, a TEST
DOUBLE) through both, at the same stand-in time, and compares whole GpuSamples, for the usual
answers and for the unusual ones (a field that fails for good or once, a lost GPU, links that do
not answer, GPM that fails, more processes than the batch holds, queued XIDs). The C part is
checked on its own with Python callbacks as the "NVML functions".
"""

from __future__ import annotations

import ctypes
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from gpulens.collectors.nvml import batch, fastread
from gpulens.collectors.nvml.batch import NOT_CALLED, Call, CallBatch
from gpulens.collectors.nvml.collector import NvmlCollector
from gpulens.collectors.nvml.fastread import BindingTypes
from gpulens.collectors.nvml.query import GpuLost, Query
from gpulens.core.model import GpuProcess, GpuSample
from tests.fakes.libnvml_standin import Standin, compiler, fresh_copy, standin_pynvml

GIB = 1 << 30
ROOT = Path(__file__).resolve().parents[3]
NOT_SUPPORTED, UNKNOWN, GPU_IS_LOST = 3, 999, 15


@pytest.fixture(scope="module")
def runner() -> object:
    loaded = batch.load()
    if isinstance(loaded, str):
        if compiler():  # the install had a compiler: the batch must have been built and load
            pytest.fail(f"a C compiler is here ({' '.join(compiler())}) but {loaded}")
        pytest.skip(loaded)
    return loaded


@pytest.fixture
def nvml(built: Path, tmp_path: Path, runner: object) -> Iterator[tuple[ModuleType, Standin]]:
    with standin_pynvml(fresh_copy(built, tmp_path)) as bound:
        yield bound


def _pair(pynvml: ModuleType, standin: Standin) -> tuple[NvmlCollector, NvmlCollector]:
    """(batched, pynvml's path alone) over the same stand-in, whose counters follow its own clock."""
    standin.advance(0.0)
    batched = NvmlCollector(pynvml, clock=standin.clock)
    plain = NvmlCollector(pynvml, clock=standin.clock)
    assert all(d._fast is not None for d in batched._devices)
    for device in plain._devices:
        device._fast = None
    return batched, plain


def _same(batched: NvmlCollector, plain: NvmlCollector, standin: Standin, reads: int = 3) -> list[GpuSample]:
    """Read both ``reads`` times at the same stand-in times; every GPU's sample is equal; the last ones."""
    gpus: tuple[GpuSample, ...] = ()
    for _ in range(reads):
        standin.advance(1.0)
        a, b = batched.read(), plain.read()
        assert a == b
        # the reasons in the same order too (they are written out in it: JSON, the agent's stream)
        assert [list(g.unavailable) for g in a.gpus] == [list(g.unavailable) for g in b.gpus]
        gpus = a.gpus
    return list(gpus)


def _asked_of_pynvml(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every field asked through pynvml's path from now on (Query's calls), recorded."""
    asked: list[object] = []
    real_call, real_short = Query.call, Query.__call__

    def call(self: Query, fields: object, *args: object, **kwargs: object) -> object:
        asked.append(fields)
        return real_call(self, fields, *args, **kwargs)  # type: ignore[arg-type]

    def short(self: Query, fields: object, *args: object) -> object:
        asked.append(fields)
        return real_short(self, fields, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(Query, "call", call)
    monkeypatch.setattr(Query, "__call__", short)
    return asked


def _counted(monkeypatch: pytest.MonkeyPatch, cls: type, name: str) -> list[object]:
    """Each call of ``cls.name`` from now on, recorded (its instance)."""
    calls: list[object] = []
    real = getattr(cls, name)

    def spy(self: object, *args: object, **kwargs: object) -> object:
        calls.append(self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(cls, name, spy)
    return calls


# --- the C part ----------------------------------------------------------------------------

_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p)


def test_the_batch_makes_each_call_in_order_with_its_arguments(runner: object) -> None:
    seen: list[tuple[int | None, int]] = []

    def answer(a0: int | None, i1: int, out: int | None) -> int:
        seen.append((a0, i1))
        if out:
            ctypes.c_uint.from_address(out).value = 7000 + i1
        return 0 if i1 < 3 else i1

    fn = _FN(answer)
    address = ctypes.cast(fn, ctypes.c_void_p).value or 0
    calls = [Call(address, batch.PIO, 0x1000 + k, out=4, i1=k) for k in range(5)]
    calls[1] = dataclasses.replace(calls[1], after=0)  # made: call 0 answered 0
    calls[4] = dataclasses.replace(calls[4], after=3)  # not made: call 3 answered 3
    b = CallBatch(runner, calls)
    b.set_on(2, False)
    codes = b.run()
    assert codes == [0, 0, NOT_CALLED, 3, NOT_CALLED]
    assert seen == [(0x1000, 0), (0x1001, 1), (0x1003, 3)]
    assert [ctypes.c_uint.from_buffer(b.arena, b.offsets[k][0]).value for k in (0, 1, 3)] == [7000, 7001, 7003]
    b.set_on(2, True)
    b.set_i1(2, 1)
    assert b.run()[2] == 0 and seen[-2] == (0x1002, 1)


def test_a_lost_gpu_ends_the_batch_and_an_unknown_shape_is_not_called(runner: object) -> None:
    made: list[int] = []

    def answer(a0: int | None, i1: int, out: int | None) -> int:
        made.append(i1)
        return GPU_IS_LOST if i1 == 1 else 0

    fn = _FN(answer)
    address = ctypes.cast(fn, ctypes.c_void_p).value or 0
    calls = [Call(address, batch.PIO, 1, i1=k) for k in range(3)]
    assert CallBatch(runner, calls).run() == [0, GPU_IS_LOST, NOT_CALLED]
    assert made == [0, 1]
    assert CallBatch(runner, [Call(address, 99, 1)]).run() == [-2]  # GL_BAD_SHAPE
    assert CallBatch(runner, [Call(0, batch.PIO, 1)]).run() == [NOT_CALLED]  # no function: left to pynvml
    assert made == [0, 1]


def test_a_count_is_set_to_the_capacity_before_each_list_call(runner: object) -> None:
    caps: list[int] = []
    fn_type = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)

    def listing(a0: int | None, count: int | None, out: int | None) -> int:
        assert count is not None
        caps.append(ctypes.c_uint.from_address(count).value)
        ctypes.c_uint.from_address(count).value = 2  # as NVML: the count it wrote
        return 0

    fn = fn_type(listing)
    address = ctypes.cast(fn, ctypes.c_void_p).value or 0
    b = CallBatch(runner, [Call(address, batch.PCO, 1, out=24 * 5, out2=4, cap=5)])
    assert b.run() == [0] and b.run() == [0]
    assert caps == [5, 5]


def test_without_the_library_gpus_are_read_through_pynvml_alone(
        nvml: tuple[ModuleType, Standin], monkeypatch: pytest.MonkeyPatch) -> None:
    pynvml, _ = nvml
    monkeypatch.setattr(batch, "load", lambda: "the NVML call batch was not built")
    with NvmlCollector(pynvml) as collector:
        assert [d._fast for d in collector._devices] == [None] * 8
        assert collector.read().gpus[2].utilization_percent == 12.0


def test_a_binding_with_other_structures_or_no_library_is_not_batched(nvml: tuple[ModuleType, Standin]) -> None:
    pynvml, _ = nvml
    assert BindingTypes.of(pynvml) is not None

    class Wide(ctypes.Structure):  # nvml.h's utilization is two unsigned ints
        _fields_ = (("gpu", ctypes.c_ulonglong), ("memory", ctypes.c_ulonglong))

    names = ("c_nvmlUtilization_t", "c_nvmlMemory_t", "c_nvmlEventData_t", "c_nvmlProcessInfo_v3_t",
             "c_nvmlProcessUtilizationSample_t")
    same = SimpleNamespace(**{n: getattr(pynvml, n) for n in names})
    assert BindingTypes.of(same) is not None  # type: ignore[arg-type]
    assert BindingTypes.of(SimpleNamespace(**{**vars(same), "c_nvmlUtilization_t": Wide})) is None  # type: ignore[arg-type]
    assert BindingTypes.of(SimpleNamespace(**{**vars(same), "c_nvmlEventData_t": None})) is None  # type: ignore[arg-type]
    from tests.fakes.fake_nvml import make_fake_nvml

    with NvmlCollector(make_fake_nvml(2)) as collector:  # type: ignore[arg-type]  # the Python fake: no library
        assert [d._fast for d in collector._devices] == [None, None]


# --- the batched read gives what pynvml's path gives ----------------------------------------


def test_the_usual_read_is_the_same_both_ways(nvml: tuple[ModuleType, Standin],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    pynvml, standin = nvml
    standin.add_process(1, 4242, 3 * GIB, sm=55, mem=20)
    standin.add_process(1, 4343, 1 * GIB, sm=5, mem=2)
    standin.add_process(6, 77, 5 * GIB, sm=90, mem=60)
    batched, plain = _pair(pynvml, standin)
    gpus = _same(batched, plain, standin)
    asked = _asked_of_pynvml(monkeypatch)
    full_reads = _counted(monkeypatch, fastread.BatchedRead, "read")
    standin.advance(1.0)
    before = standin.calls()
    assert batched.read().gpus[1].processes == gpus[1].processes
    # every part answered in the batch: nothing asked through pynvml; one call per part (no two-call lists)
    assert asked == []
    assert full_reads == []  # every GPU's answers were the usual ones: read by BatchedRead.steady
    assert standin.calls() - before == 8 * 21
    assert [(p.pid, p.used_memory_bytes, p.sm_util_percent) for p in gpus[1].processes] == [
        (4242, 3 * GIB, 55.0), (4343, GIB, 5.0)]
    assert gpus[6].processes == (GpuProcess(77, 5 * GIB, 90.0, 60.0),)
    assert all(g.unavailable == {} for g in gpus)
    assert gpus[4].nvlink_rx_bytes_per_s == 18 * 64 * 5 * 1024
    assert gpus[3].sm_activity_percent == pytest.approx(2.3)
    assert gpus[3].dram_bw_util_percent == pytest.approx(1.0)  # the stand-in's: seconds between the samples


def test_fields_that_fail_once_or_for_good_are_said_the_same_way(nvml: tuple[ModuleType, Standin]) -> None:
    pynvml, standin = nvml
    batched, plain = _pair(pynvml, standin)
    standin.fail("nvmlDeviceGetPowerUsage", NOT_SUPPORTED, gpu=2)
    standin.fail("nvmlDeviceGetTemperature", UNKNOWN, gpu=3)
    standin.fail("nvmlDeviceGetComputeRunningProcesses_v3", NOT_SUPPORTED, gpu=4)
    standin.fail("nvmlDeviceGetMigMode", UNKNOWN, gpu=5)
    standin.fail("nvmlGpmMetricsGet", UNKNOWN, gpu=6)
    standin.answering_links(7, 0)
    gpus = _same(batched, plain, standin)
    assert gpus[2].power_w is None and "NOT_SUPPORTED" in gpus[2].unavailable["power_w"]
    assert gpus[3].temperature_c is None and "999" in gpus[3].unavailable["temperature_c"]
    assert "NOT_SUPPORTED" in gpus[4].unavailable["processes"]
    assert "MIG mode not read" in gpus[5].unavailable["mig"]
    assert gpus[6].sm_activity_percent is None and "sm_activity_percent" in gpus[6].unavailable
    assert gpus[7].nvlink_rx_bytes_per_s is None
    for name, gpu in (("nvmlDeviceGetTemperature", 3), ("nvmlDeviceGetMigMode", 5), ("nvmlGpmMetricsGet", 6)):
        standin.fail(name, 0, gpu=gpu)  # answers again: only what failed for good is left
    standin.advance(1.0)
    before = standin.calls()
    plain.read()
    pynvml_calls = standin.calls() - before
    before = standin.calls()
    again = batched.read()
    assert standin.calls() - before == pynvml_calls  # the same calls: what failed for good is not asked again
    assert again.gpus[3].temperature_c == 43.0 and "temperature_c" not in again.gpus[3].unavailable
    assert [d._fast is not None for d in batched._devices] == [True] * 8


def test_a_lost_gpu_is_lost_both_ways_and_the_others_are_read(nvml: tuple[ModuleType, Standin]) -> None:
    pynvml, standin = nvml
    batched, plain = _pair(pynvml, standin)
    standin.fail("nvmlDeviceGetClockInfo", GPU_IS_LOST, gpu=1)
    gpus = _same(batched, plain, standin, reads=2)
    assert "GPU is lost" in gpus[1].unavailable["gpu"] and gpus[1].utilization_percent is None
    assert gpus[0].utilization_percent == 10.0 and gpus[2].utilization_percent == 12.0


def test_more_processes_than_the_batch_holds_lay_it_out_again(
        nvml: tuple[ModuleType, Standin], monkeypatch: pytest.MonkeyPatch) -> None:
    pynvml, standin = nvml
    monkeypatch.setattr(fastread, "FIRST_CAP", 2)
    for pid in range(100, 105):
        standin.add_process(0, pid, pid * 1000, sm=pid - 100, mem=1)
    batched, plain = _pair(pynvml, standin)
    fast = batched._devices[0]._fast
    assert fast is not None and fast.cap == 2
    gpus = _same(batched, plain, standin)
    assert [p.pid for p in gpus[0].processes] == list(range(100, 105))
    assert [p.sm_util_percent for p in gpus[0].processes] == [0.0, 1.0, 2.0, 3.0, 4.0]
    grown = batched._devices[0]._fast
    assert grown is not None and grown.cap >= 5


def test_queued_xids_are_drained_the_same_way(nvml: tuple[ModuleType, Standin]) -> None:
    pynvml, standin = nvml
    batched, plain = _pair(pynvml, standin)
    for xid in (13, 31, 79):
        standin.inject_xid(2, xid)
    standin.advance(1.0)
    assert batched.read().gpus[2].xid_events == (13, 31, 79)  # the first in the batch, the rest through pynvml
    for xid in (13, 31, 79):
        standin.inject_xid(2, xid)
    assert plain.read().gpus[2].xid_events == (13, 31, 79)
    assert batched.read().gpus[2].xid_events == ()


def test_a_gpu_lost_late_in_the_batch_is_lost_both_ways(nvml: tuple[ModuleType, Standin]) -> None:
    pynvml, standin = nvml
    batched, plain = _pair(pynvml, standin)
    standin.fail("nvmlDeviceGetMigMode", GPU_IS_LOST, gpu=3)
    standin.fail("nvmlGpmSampleGet", GPU_IS_LOST, gpu=4)
    gpus = _same(batched, plain, standin, reads=2)
    for lost in (3, 4):
        assert "GPU is lost" in gpus[lost].unavailable["gpu"] and gpus[lost].power_w is None
    assert [d.batched for d in batched._devices] == [True, True, True, False, False, True, True, True]


def test_memory_nvml_cannot_give_is_none_both_ways(nvml: tuple[ModuleType, Standin]) -> None:
    pynvml, standin = nvml
    standin.add_process(2, 555, (1 << 64) - 1, sm=10, mem=1)  # NVML_VALUE_NOT_AVAILABLE_ulonglong
    batched, plain = _pair(pynvml, standin)
    gpus = _same(batched, plain, standin)
    assert gpus[2].processes == (GpuProcess(555, None, 10.0, 1.0),)
    assert "NVML gives no per-process memory" in gpus[2].unavailable["processes.used_memory_bytes"]


def test_gpm_that_fails_for_good_is_not_asked_again(nvml: tuple[ModuleType, Standin],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    pynvml, standin = nvml
    batched, plain = _pair(pynvml, standin)
    standin.fail("nvmlGpmSampleGet", NOT_SUPPORTED, gpu=5)
    gpus = _same(batched, plain, standin)
    assert gpus[5].sm_activity_percent is None and "NOT_SUPPORTED" in gpus[5].unavailable["sm_activity_percent"]
    counts = []
    for collector in (plain, batched):
        standin.advance(1.0)
        before = standin.calls()
        collector.read()
        counts.append(standin.calls() - before)
    assert counts[1] == counts[0]  # no processes: both make one call a part, and neither asks GPM again
    fast = batched._devices[5]._fast
    assert fast is not None and not batched._devices[5]._gpm.batchable()  # type: ignore[union-attr]
    standin.advance(1.0)  # read at one time again (above, each at its own): rates from here on compare
    batched.read(), plain.read()
    full = _counted(monkeypatch, fastread.BatchedRead, "read")
    standin.add_process(5, 4242, (1 << 64) - 1)  # memory n/a: its note and GPM's, in pynvml's path's order (_same)
    _same(batched, plain, standin, reads=2)
    assert full == []  # GPM off for good, the rest usual: the steady read still takes GPU 5


def test_at_most_64_events_are_taken_a_read_both_ways(nvml: tuple[ModuleType, Standin],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    pynvml, standin = nvml
    batched, plain = _pair(pynvml, standin)
    waits = [0]

    def endless(events: object, timeout: int) -> object:  # a queue that never empties, through pynvml
        waits[0] += 1
        return SimpleNamespace(eventType=0x8, eventData=7)

    monkeypatch.setattr(pynvml, "nvmlEventSetWait", endless)
    standin.inject_xid(0, 6)  # the batch takes this one from the stand-in
    standin.advance(1.0)
    got = batched.read().gpus[0].xid_events
    assert got == (6,) + (7,) * 63 and waits[0] == 63
    waits[0] = 0
    assert plain.read().gpus[0].xid_events == (7,) * 64 and waits[0] == 8 * 64  # every GPU asks pynvml


def test_a_fault_in_the_batched_read_falls_back_to_pynvml_for_that_gpu(
        nvml: tuple[ModuleType, Standin], monkeypatch: pytest.MonkeyPatch) -> None:
    pynvml, standin = nvml
    batched, plain = _pair(pynvml, standin)
    broken = batched._devices[6]._fast
    assert broken is not None

    def boom(codes: object, counts: object) -> object:
        raise RuntimeError("a bug in the batched read")

    monkeypatch.setattr(broken, "_processes", boom)
    standin.advance(1.0)
    plain.read()
    first = batched.read().gpus[6]  # read again through pynvml (a rate over the part already read is lost)
    assert first.utilization_percent == 16.0 and "gpu" not in first.unavailable
    assert [d.batched for d in batched._devices] == [True] * 6 + [False, True]
    _same(batched, plain, standin, reads=2)  # then as pynvml's path reads it


def test_a_fault_or_a_lost_gpu_in_the_steady_read_is_that_gpus_alone(
        nvml: tuple[ModuleType, Standin], monkeypatch: pytest.MonkeyPatch) -> None:
    pynvml, standin = nvml
    standin.add_process(5, 4242, GIB, sm=50, mem=5)
    batched, plain = _pair(pynvml, standin)
    _same(batched, plain, standin, reads=2)
    steady = _counted(monkeypatch, fastread.BatchedRead, "steady")
    full = _counted(monkeypatch, fastread.BatchedRead, "read")
    broken, lost = batched._devices[6]._fast, batched._devices[2]._nvlink
    assert broken is not None and lost is not None

    def boom() -> object:
        raise RuntimeError("a bug in the steady read")

    real_read = type(lost).read

    def gone(self: object, answered: bool | None = None) -> object:
        if self is lost:
            raise GpuLost("GPU is lost (test)")
        return real_read(self, answered)  # type: ignore[arg-type]

    monkeypatch.setattr(broken, "steady", boom)
    monkeypatch.setattr(type(lost), "read", gone)
    standin.advance(1.0)
    plain.read()
    gpus = batched.read().gpus
    assert gpus[2].unavailable == {"gpu": "GPU is lost (test)"} and batched._devices[2].lost
    assert gpus[6].utilization_percent == 16.0 and "gpu" not in gpus[6].unavailable  # read again through pynvml
    assert [d.batched for d in batched._devices] == [True, True, False, True, True, True, False, True]
    # GPUs 0-5 read steady (GPU 2 found lost there); GPU 6's fault ends the steady reads: GPU 7 is read in full
    assert len(steady) == 6 and [r._device.index for r in full] == [7]  # type: ignore[attr-defined]
    assert gpus[5].processes == (GpuProcess(4242, GIB, 50.0, 5.0),)
    standin.advance(1.0)
    a, b = batched.read().gpus, plain.read().gpus
    assert [g for i, g in enumerate(a) if i != 2] == [g for i, g in enumerate(b) if i != 2]


def test_a_mig_mode_change_is_read_in_full(nvml: tuple[ModuleType, Standin], monkeypatch: pytest.MonkeyPatch) -> None:
    pynvml, standin = nvml
    batched, plain = _pair(pynvml, standin)
    _same(batched, plain, standin, reads=2)
    full = _counted(monkeypatch, fastread.BatchedRead, "read")
    standin.set_mig_mode(4, 0, 1)  # enabling: pending until the GPU is reset
    gpus = _same(batched, plain, standin, reads=1)
    assert [r._device.index for r in full] == [4] and "mig" in gpus[4].unavailable  # type: ignore[attr-defined]


def test_the_gpu_smoke_step_passes_over_the_stand_in_and_fails_on_a_difference(
        nvml: tuple[ModuleType, Standin], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """scripts/gpu_batch_smoke.py (run on a real GPU by scripts/gpu_smoke.sh) checked here over the stand-in."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_batch_smoke", ROOT / "scripts" / "gpu_batch_smoke.py")
    assert spec is not None and spec.loader is not None
    smoke = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(smoke)
    monkeypatch.setattr(smoke, "PAUSE_S", 0.01)
    _, standin = nvml
    standin.add_process(0, 4242, GIB, sm=50, mem=5)
    assert smoke.main() == 0
    assert "GPUs read through the call batch: 8 of 8" in capsys.readouterr().out
    monkeypatch.setattr(fastread.Records, "read", lambda self, view, at, count: [])  # a batch that loses them
    assert smoke.main() == 1
    assert "GPU BATCH SMOKE FAILED: gpu0 processes" in capsys.readouterr().out


def test_every_gpu_is_read_in_one_crossing_laid_out_again_when_a_gpu_drops_out(
        nvml: tuple[ModuleType, Standin], monkeypatch: pytest.MonkeyPatch) -> None:
    pynvml, standin = nvml
    batched, plain = _pair(pynvml, standin)
    own_runs = [0]
    real_run = CallBatch.run

    def counted(self: CallBatch) -> list[int]:
        own_runs[0] += 1
        return real_run(self)

    monkeypatch.setattr(CallBatch, "run", counted)
    _same(batched, plain, standin, reads=2)
    assert own_runs[0] == 0  # every GPU's batch ran in the collector's one crossing
    first = batched._many
    assert first is not None
    standin.fail("nvmlDeviceGetPowerUsage", GPU_IS_LOST, gpu=2)
    gpus = _same(batched, plain, standin, reads=2)
    assert "GPU is lost" in gpus[2].unavailable["gpu"] and gpus[3].power_w == 103.0
    assert batched._many is not first and batched._many_key[2] is None  # laid out again without GPU 2
    assert own_runs[0] == 0
