"""Makers of frozen slots dataclasses for the collectors' hot path.

A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``
(a global lookup, an attribute lookup and a call per field). On a sampling tick
that builds a GpuSample per GPU (30 fields) and a JobInfo per job, that is a
measurable share of the tick. :func:`positional_maker` gives, for a frozen
dataclass with ``__slots__``, a function taking every field positionally, in
the fields' order, which makes the same frozen object by calling each slot's
descriptor directly, in straight-line code generated once per class from the
class's own field names (no loop, no per-field lookup).

No field default, factory or ``__post_init__`` runs: the caller gives every
field. A class with ``__post_init__``, or without slots, is refused.
tests/unit/core/test_makers.py checks each maker used on the hot path against
the class's own ``__init__``.
"""

from __future__ import annotations

import dataclasses
import keyword
from collections.abc import Callable
from typing import Any, TypeVar

_T = TypeVar("_T")


def positional_maker(cls: type[_T], order: tuple[str, ...]) -> Callable[..., _T]:
    """``make(*values)``: ``cls(*values)`` for a frozen slots dataclass, every field given in order.

    ``order``: the fields' names in the order the caller passes them; a class whose fields are
    other or in another order is refused (a reordered model fails at import, not with swapped values).

    Raises:
        TypeError: ``cls`` is not a frozen dataclass with slots, has a ``__post_init__``, or its fields
            are not ``order``.
    """
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__} is not a frozen dataclass with slots")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} has a __post_init__, which a maker would skip")
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]  # checked: a dataclass
    if tuple(names) != order:
        raise TypeError(f"{cls.__name__}'s fields are {tuple(names)}, not {order}: update the maker's caller")
    if not all(n.isidentifier() and not keyword.iskeyword(n) for n in names):
        raise TypeError(f"{cls.__name__} has a field that is not an identifier")
    args = ", ".join(f"v{i}" for i in range(len(names)))
    body = "".join(f"        p{i}(o, v{i})\n" for i in range(len(names)))
    # The code is built from the dataclass's own field count only: no text from outside reaches it.
    source = (f"def outer(new, cls, {', '.join(f'p{i}' for i in range(len(names)))}):\n"
              f"    def make({args}):\n"
              f"        o = new(cls)\n{body}        return o\n"
              f"    return make\n")
    ns: dict[str, Any] = {}
    exec(source, ns)
    make: Callable[..., _T] = ns["outer"](object.__new__, cls, *(getattr(cls, n).__set__ for n in names))
    make.__name__ = make.__qualname__ = f"make_{cls.__name__}"
    make.__doc__ = f"{cls.__name__}(*values): every field, in order ({', '.join(names)})."
    return make
