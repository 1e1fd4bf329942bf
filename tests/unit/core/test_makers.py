"""core.makers: a maker builds the very object the class's own ``__init__`` builds."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpulens.core.makers import positional_maker
from gpulens.core.model import GpuProcess, GpuSample, JobInfo, Workload


def _names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def _maker(cls: type) -> Any:
    return positional_maker(cls, _names(cls))


def _values(obj: object) -> list[Any]:
    return [getattr(obj, f.name) for f in dataclasses.fields(obj)]  # type: ignore[arg-type]


SAMPLES = [
    GpuSample(3, "H100", "GPU-x", 50.0, power_w=300.0, processes=(GpuProcess(1, 2),),
              unavailable={"ecc_corrected": "no"}, xid_events=(13, 79), throttle_reasons=("sw_power_cap",)),
    GpuSample(0, "", ""),
    GpuProcess(7, None, 1.0, None),
    JobInfo(pid=42, tree_id="slurmstepd/python", cmdline="python train.py", user="ana", start_time=1.7e9,
            cpu_percent=None, rss_bytes=1 << 30, gpu_mem_bytes={"0": 5}, job_key="4242",
            ancestors=(1, 77), workload=Workload(slurm_job="4242")),
]


@pytest.mark.parametrize("obj", SAMPLES, ids=lambda o: type(o).__name__)
def test_a_maker_makes_what_the_init_makes(obj: object) -> None:
    cls = type(obj)
    made = _maker(cls)(*_values(obj))
    assert made == obj and type(made) is cls
    first = dataclasses.fields(made)[0].name  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(made, first, 1)


@given(st.integers(0, 63), st.text(), st.one_of(st.none(), st.floats(allow_nan=False)),
       st.lists(st.integers(0, 255), max_size=5))
def test_every_field_lands_in_its_own_slot(index: int, name: str, util: float | None, xids: list[int]) -> None:
    want = GpuSample(index, name, name[::-1], util, xid_events=tuple(xids))
    assert _maker(GpuSample)(*_values(want)) == want


def test_a_maker_wants_every_field() -> None:
    make = _maker(GpuProcess)
    with pytest.raises(TypeError):
        make(1, 2, 3.0)  # the fourth field missing: no default is filled in


def test_what_a_maker_cannot_make_is_refused() -> None:
    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        a: int

    @dataclasses.dataclass(slots=True)
    class NotFrozen:
        a: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class Checked:
        a: int

        def __post_init__(self) -> None:
            if self.a < 0:
                raise ValueError(self.a)

    for cls in (NoSlots, NotFrozen, Checked, int):
        with pytest.raises(TypeError):
            positional_maker(cls, ("a",))


def test_a_caller_that_names_other_fields_or_another_order_is_refused() -> None:
    names = _names(GpuProcess)
    for order in (names[::-1], names[:-1], (*names, "extra")):
        with pytest.raises(TypeError, match="update the maker's caller"):
            positional_maker(GpuProcess, order)
