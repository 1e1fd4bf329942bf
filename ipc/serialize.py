"""Plain-data conversion of the sample model, with validation on the way in.

``to_dict`` turns a model object into JSON/msgpack-ready builtins.
``from_dict`` rebuilds it and checks every field's type, so bytes from a peer
or a file can never produce a half-valid sample: a mismatch raises
:class:`~gpulens.core.errors.SchemaError` naming the field path.
Unknown keys are ignored (a newer agent may send more). ``sample_from_dict``
then passes the sample through :func:`~gpulens.core.sanitize.check_sample`:
NaN, infinities and implausible numbers become None (n/a) with a reason,
control characters leave every string.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from functools import cache
from typing import Any, TypeVar, Union

from gpulens.core.errors import SchemaError
from gpulens.core.model import HostSample
from gpulens.core.sanitize import check_sample

T = TypeVar("T")

MAX_SEQUENCE = 100_000
"""Longest list accepted for any one field (processes, jobs, cores...)."""


def to_dict(obj: Any) -> Any:
    """Convert a model object (or builtins holding them) to plain builtins."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (tuple, list)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, Mapping):
        return {str(k): to_dict(v) for k, v in obj.items()}
    return obj


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _convert(tp: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None:
            if type(None) in args:
                return None
            raise SchemaError(path, "a value", value)
        non_none = [a for a in args if a is not type(None)]
        errors: list[SchemaError] = []
        for arg in non_none:
            try:
                return _convert(arg, value, path)
            except SchemaError as err:
                errors.append(err)
        raise errors[0]
    if tp is Any:
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SchemaError(path, "a number", value)
        try:
            return float(value)
        except OverflowError:  # an integer beyond float (JSON allows it): check_sample refuses it
            return math.inf if value > 0 else -math.inf
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SchemaError(path, "an integer", value)
        return value
    if tp is str:
        if not isinstance(value, str):
            raise SchemaError(path, "a string", value)
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise SchemaError(path, "true or false", value)
        return value
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise SchemaError(path, "a list", value)
        if len(value) > MAX_SEQUENCE:
            raise SchemaError(path, f"at most {MAX_SEQUENCE} items", f"{len(value)} items")
        (item_tp, _ellipsis) = typing.get_args(tp)
        return tuple(_convert(item_tp, v, f"{path}[{i}]") for i, v in enumerate(value))
    if origin in (Mapping, dict, typing.Mapping, typing.Dict):  # noqa: UP006
        if not isinstance(value, Mapping):
            raise SchemaError(path, "a map", value)
        if len(value) > MAX_SEQUENCE:
            raise SchemaError(path, f"at most {MAX_SEQUENCE} entries", f"{len(value)} entries")
        key_tp, val_tp = typing.get_args(tp)
        return {
            _convert(key_tp, k, f"{path}.<key>"): _convert(val_tp, v, f"{path}.{k}")
            for k, v in value.items()
        }
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _from_dict(tp, value, path)
    raise SchemaError(path, f"a supported type ({tp!r})", value)


def _from_dict(cls: type[T], data: Any, path: str) -> T:
    if not isinstance(data, Mapping):
        raise SchemaError(path or cls.__name__, "a map", data)
    hints = _hints(cls)  # type: ignore[arg-type]
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        sub = f"{path}.{f.name}" if path else f.name
        if f.name in data:
            kwargs[f.name] = _convert(hints[f.name], data[f.name], sub)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise SchemaError(sub, "a value (required field missing)", None)
    return cls(**kwargs)


def from_dict(cls: type[T], data: Any) -> T:
    """Rebuild a model object of type ``cls`` from plain data.

    Raises:
        SchemaError: a field is missing or has the wrong type; the message
            names the dotted path of the field.
    """
    return _from_dict(cls, data, "")


def sample_to_dict(sample: HostSample) -> dict[str, Any]:
    """The documented JSON/msgpack form of a host sample (docs/sample-schema.md)."""
    result: dict[str, Any] = to_dict(sample)
    return result


def sample_from_dict(data: Any) -> HostSample:
    """Validate and rebuild a host sample, implausible values made n/a (``sanitize``).

    Raises:
        SchemaError: a field is missing or mistyped, or the sample's time is not plausible.
    """
    return check_sample(from_dict(HostSample, data))
