"""core.makers: a builder makes the very object the class's own ``__init__`` makes.

Every kind built on a hot path (the collectors' steady tick, the demo) is checked here.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpulens.collectors.proctree import ProcStat, parse_stat
from gpulens.core import model as m
from gpulens.core.makers import fast_builder, field_names


def _values(cls: type[Any], rng: random.Random) -> tuple[object, ...]:
    """A value of a plausible kind for every field of ``cls``, in order."""
    out: list[object] = []
    for f in dataclasses.fields(cls):
        kind = str(f.type)
        if "Items" in kind or "tuple" in kind:
            out.append((rng.randrange(100), rng.randrange(100)))
        elif "Notes" in kind or "Keyed" in kind:
            out.append({f"k{rng.randrange(9)}": rng.randrange(9)})
        elif "Sample" in kind and cls is m.HostSample:
            out.append(getattr(m, kind.split(" ")[0])(1.0, 2.0))
        elif "bool" in kind:
            out.append(rng.random() < 0.5)
        elif "str" in kind or "Text" in kind:
            out.append(f"s{rng.random()}")
        elif "int" in kind:
            out.append(rng.randrange(1 << 40))
        else:
            out.append(rng.random() * 100)
    return tuple(out)


@pytest.mark.parametrize("cls", [m.GpuSample, m.GpuProcess, m.JobInfo, m.CpuSample, m.MemorySample,
                                 m.NetworkSample, m.StorageSample, m.CacheSample, m.HostSample, m.NetInterface,
                                 m.DiskIo])
def test_built_objects_are_the_constructors_objects(cls: type[Any]) -> None:
    build = fast_builder(cls, field_names(cls))
    rng = random.Random(cls.__name__)
    for _ in range(20):
        values = _values(cls, rng)
        got, want = build(*values), cls(*values)
        assert type(got) is cls and got == want and repr(got) == repr(want)
        assert [getattr(got, n) for n in field_names(cls)] == list(values)
        with pytest.raises(dataclasses.FrozenInstanceError):
            got.__setattr__(field_names(cls)[0], None)  # still frozen
        assert not hasattr(got, "__dict__")


def test_a_proc_stat_is_built_as_its_constructor_builds_it() -> None:
    line = b"4242 (a) b) c) S 1 4242 4242 0 -1 4194560 900 0 0 0 17 5 0 0 20 0 1 0 123456 9000 77 x\n"
    got = parse_stat(line)
    assert got == ProcStat("a) b) c", "S", 1, 22, 123456, 77) and type(got) is ProcStat


@given(st.integers(0, 63), st.text(), st.one_of(st.none(), st.floats(allow_nan=False)),
       st.lists(st.integers(0, 255), max_size=5))
def test_every_field_lands_in_its_own_slot(index: int, name: str, util: float | None, xids: list[int]) -> None:
    want = m.GpuSample(index, name, name[::-1], util, xid_events=tuple(xids), unavailable={"ecc": name})
    got = fast_builder(m.GpuSample)(*[getattr(want, n) for n in field_names(m.GpuSample)])
    assert got == want


def test_a_builder_wants_every_field() -> None:
    build = fast_builder(m.GpuProcess)
    with pytest.raises(TypeError):
        build(1, 2, 3.0)  # the fourth field missing: no default is filled in


def test_builder_refuses_classes_whose_init_does_more() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Checked:
        x: int

        def __post_init__(self) -> None:
            assert self.x >= 0

    @dataclasses.dataclass(frozen=True)
    class Unslotted:
        x: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class Derived:
        x: int
        y: int = dataclasses.field(init=False, default=0)

    for cls in (Checked, Unslotted, Derived, int):
        with pytest.raises(TypeError):
            fast_builder(cls)


def test_a_caller_that_names_other_fields_or_another_order_is_refused() -> None:
    names = field_names(m.GpuProcess)
    for order in (names[::-1], names[:-1], (*names, "extra")):
        with pytest.raises(TypeError, match="update the builder's caller"):
            fast_builder(m.GpuProcess, order)
    assert fast_builder(m.GpuProcess, names)(1, None, None, None) == m.GpuProcess(1, None)
