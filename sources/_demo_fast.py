"""Build frozen, slotted dataclass instances from every field's value, in field order.

The demo makes ~130 :class:`~gpulens.core.model.GpuSample` (28 fields) and ~90
:class:`~gpulens.core.model.JobInfo` a second. A frozen dataclass's generated
``__init__`` sets each field through ``object.__setattr__`` (~150 ns a field
here). :func:`fast_builder` instead fills a plain slotted twin of the class,
whose ``__init__`` stores each slot directly (~15 ns), then makes the object a
``cls`` by assigning ``__class__``: Python allows that between classes with the
same slots, and the object is then exactly what ``cls(*values)`` makes (equal,
same ``repr``; the demo's tests check each kind it builds). Only for classes
whose ``__init__`` does nothing else — every field in ``__init__``, no
``__post_init__`` — and :func:`fast_builder` refuses others.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

_T = TypeVar("_T")


def field_names(cls: type[Any]) -> tuple[str, ...]:
    """The fields of dataclass ``cls`` in ``__init__`` order."""
    return tuple(f.name for f in dataclasses.fields(cls))


def fast_builder(cls: type[_T]) -> Callable[..., _T]:
    """A function that makes a ``cls`` from all its field values, positionally and in order.

    Unlike ``cls(...)`` it has no defaults: pass every field (:func:`field_names`).
    Raises TypeError if ``cls`` is not a slotted dataclass made by its fields alone.
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls.__name__} is not a dataclass")
    fields = dataclasses.fields(cls)
    if hasattr(cls, "__post_init__") or not all(f.init for f in fields):
        raise TypeError(f"{cls.__name__}.__init__ does more than set its fields")
    names = tuple(f.name for f in fields)
    if cls.__bases__ != (object,) or tuple(getattr(cls, "__slots__", ())) != names:
        raise TypeError(f"{cls.__name__}'s slots are not its fields")
    twin: Any = dataclasses.make_dataclass(f"_{cls.__name__}Twin", names, slots=True,
                                           eq=False, repr=False, match_args=False)
    probe = twin(*[None] * len(names))
    probe.__class__ = cls  # raises TypeError here, not later, if the layouts differ

    def build(*values: object) -> _T:
        obj = twin(*values)
        obj.__class__ = cls
        made: _T = obj
        return made

    build.__doc__ = f"A {cls.__name__} from its {len(names)} field values, in order."
    return build


def round1(x: float) -> float:
    """``round(x, 1)``: the same float, for less (round's decimal conversion costs ~0.3 us).

    ``round`` rounds the exact value of ``x * 10`` to an integer ``n`` and returns the
    float nearest ``n / 10``, which is what ``n / 10`` is (IEEE division rounds
    correctly). ``x * 10.0`` is off the exact product by at most half an ulp (< 1e-10
    below 1e6), so where it lies more than 1e-9 from a half-integer, its nearest
    integer is ``n``; near a tie, for 0, negatives and large values, ``round`` decides.
    """
    y = x * 10.0
    if 0.0 < y < 1e6:
        n = round(y)
        if -0.499999999 < y - n < 0.499999999:
            return n / 10
    return round(x, 1)
