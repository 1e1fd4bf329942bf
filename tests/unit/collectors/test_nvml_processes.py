"""GpuDevice.merge_processes: its one-process shortcut gives what the general merge gives.

The general merge runs when the same process is listed twice (compute and graphics, as NVML lists
a process that does both); that cannot change the answer, so each case is read both ways.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gpulens.collectors.nvml.device import NOT_AVAILABLE, GpuDevice
from gpulens.collectors.nvml.query import Query


def _device(since: int) -> GpuDevice:
    device = object.__new__(GpuDevice)
    device._q = Query(SimpleNamespace(NVMLError=RuntimeError))  # type: ignore[arg-type]  # notes only
    device._util_since_us = since
    return device


def _merged(device: GpuDevice, compute: list[Any], graphics: list[Any], ok: bool,
            samples: list[Any]) -> tuple[object, dict[str, str], int]:
    got = device.merge_processes(compute, graphics, ok, samples)
    return got, device._q.reasons, device._util_since_us


MEMORY = st.one_of(st.none(), st.just(NOT_AVAILABLE), st.integers(0, 1 << 40))


@given(st.integers(1, 1 << 22), MEMORY, st.booleans(), st.integers(0, 1 << 40),
       st.one_of(st.none(), st.tuples(st.booleans(), st.integers(0, 1 << 40), st.integers(0, 100),
                                      st.integers(0, 100))))
def test_one_process_is_merged_as_the_general_merge_does(
        pid: int, memory: int | None, ok: bool, since: int, sample: tuple[bool, int, int, int] | None) -> None:
    samples = [] if sample is None else [(pid if sample[0] else pid + 1, *sample[1:])]
    one = (pid, memory)
    shortcut = _merged(_device(since), [one], [], ok, samples)
    general = _merged(_device(since), [one], [one], ok, samples)
    assert shortcut == general


def test_what_the_one_process_reads() -> None:
    device = _device(100)
    (process,) = device.merge_processes([(7, 5 << 30)], (), True, [(7, 250, 40, 3)])
    assert (process.pid, process.used_memory_bytes, process.sm_util_percent, process.mem_util_percent) == (
        7, 5 << 30, 40.0, 3.0)
    assert device._util_since_us == 250 and device._q.reasons == {}
    (process,) = device.merge_processes([(7, NOT_AVAILABLE)], (), True, [(8, 90, 1, 1)])
    assert process.used_memory_bytes is None and process.sm_util_percent is None
    assert set(device._q.reasons) == {"processes.used_memory_bytes", "processes.sm_util_percent",
                                      "processes.mem_util_percent"}
    assert device._util_since_us == 250  # an older sample does not move it back
