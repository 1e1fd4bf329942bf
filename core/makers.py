"""Build frozen, slotted dataclass instances from every field's value, in field order.

Hot paths make many frozen model objects: the collector's steady tick a
:class:`~gpulens.core.model.GpuSample` (30 fields) per GPU and a
:class:`~gpulens.core.model.JobInfo` per job, the demo ~130 GpuSamples and ~90
JobInfos a second. A frozen dataclass's generated ``__init__`` sets each field
through ``object.__setattr__`` (~150 ns a field here). :func:`fast_builder`
instead fills a plain slotted twin of the class, whose ``__init__`` stores each
slot directly (~15 ns), then makes the object a ``cls`` by assigning
``__class__``: Python allows that between classes with the same slots, and the
object is then exactly what ``cls(*values)`` makes (equal, same ``repr``;
tests/unit/core/test_makers.py checks each kind built on a hot path). Only for
classes whose ``__init__`` does nothing else — every field in ``__init__``, no
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


def fast_builder(cls: type[_T], order: tuple[str, ...] | None = None) -> Callable[..., _T]:
    """A function that makes a ``cls`` from all its field values, positionally and in order.

    Unlike ``cls(...)`` it has no defaults: pass every field (:func:`field_names`). ``order``: the
    fields' names in the order the caller passes them, checked here, so that a model whose fields
    were added or reordered fails when the caller is imported, not with values in the wrong fields.

    Raises:
        TypeError: ``cls`` is not a slotted dataclass made by its fields alone, or its fields are
            not ``order``.
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls.__name__} is not a dataclass")
    fields = dataclasses.fields(cls)
    if hasattr(cls, "__post_init__") or not all(f.init for f in fields):
        raise TypeError(f"{cls.__name__}.__init__ does more than set its fields")
    names = tuple(f.name for f in fields)
    if cls.__bases__ != (object,) or tuple(getattr(cls, "__slots__", ())) != names:
        raise TypeError(f"{cls.__name__}'s slots are not its fields")
    if order is not None and order != names:
        raise TypeError(f"{cls.__name__}'s fields are {names}, not {order}: update the builder's caller")
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
