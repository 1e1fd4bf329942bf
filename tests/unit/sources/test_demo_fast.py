"""The demo's fast paths: objects built without ``__init__`` and ``round(x, 1)`` without decimals."""

from __future__ import annotations

import dataclasses
import math
import random
from typing import Any

import pytest

from gpulens.core import model as m
from gpulens.sources._demo_fast import fast_builder, field_names, round1


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
                                 m.NetworkSample, m.StorageSample, m.CacheSample, m.HostSample])
def test_built_objects_are_the_constructors_objects(cls: type[Any]) -> None:
    build = fast_builder(cls)
    rng = random.Random(cls.__name__)
    for _ in range(20):
        values = _values(cls, rng)
        got, want = build(*values), cls(*values)
        assert type(got) is cls and got == want and repr(got) == repr(want)
        assert [getattr(got, n) for n in field_names(cls)] == list(values)
        with pytest.raises(dataclasses.FrozenInstanceError):
            got.__setattr__(field_names(cls)[0], None)  # still frozen
        assert not hasattr(got, "__dict__")


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


def test_round1_is_round_to_one_decimal() -> None:
    rng = random.Random(5)
    specials = [0.0, -0.0, 0.05, 0.15, 0.25, 0.35, 2.675, 0.45, 1e-300, 99999.95, 99999.99,
                1e5, 1e6, 1e7, 123456789.25, -1.25, -0.04, math.inf, -math.inf, 5e-324,
                0.04999999999999999, 0.05000000000000001, 72.0]
    xs = specials + [rng.random() * 10 ** rng.randrange(-3, 8) for _ in range(200_000)]
    # values one ulp either side of every tie below 1000, and ties themselves
    for k in range(0, 10_000):
        tie = (k + 0.5) / 10
        xs += [tie, math.nextafter(tie, 0.0), math.nextafter(tie, math.inf), k / 10]
    for x in xs:
        got, want = round1(x), round(x, 1)
        assert repr(got) == repr(want), x
    assert math.isnan(round1(math.nan))
