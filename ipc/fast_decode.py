"""A fast path for ``serialize.sample_from_dict`` on the viewer's hot path.

A viewer of 1,000 hosts validates 1,000 samples a second; the generic,
reflective ``from_dict`` costs about 250 µs per 8-GPU sample. Here one
straight-line function per model class is generated from the same type
hints. It accepts only exactly-typed plain data (what msgpack produces);
on *anything* else it hands the whole sample to the reference
``from_dict``, which returns the same object or raises the same
:class:`SchemaError` naming the field. So the fast path can only be
faster, never more lenient (tests/test_stream_codec.py checks equality).

Faster still, :func:`sample_from_msgpack` decodes a sample's packed bytes
straight into the model with msgspec (types checked in C, unknown keys
ignored); anything msgspec refuses is declined, and the caller then takes
the path above, which gives the exact SchemaError.

All three paths end in the same :func:`~gpulens.core.sanitize.check_sample`,
so NaN, infinities, implausible numbers and control characters are handled
identically whichever path decoded the sample.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Union

import msgspec

from gpulens.core.errors import SchemaError
from gpulens.core.model import HostSample
from gpulens.core.sanitize import check_sample
from gpulens.ipc.serialize import MAX_SEQUENCE, sample_from_dict


class _Slow(Exception):
    """Not plainly valid: let the reference decoder decide."""


def _float(v: Any) -> float:
    t = type(v)
    if t is float:
        return float(v)
    if t is int:
        return float(v)
    raise _Slow


def _int(v: Any) -> int:
    if type(v) is not int:
        raise _Slow
    return v


def _str(v: Any) -> str:
    if type(v) is not str:
        raise _Slow
    return v


def _bool(v: Any) -> bool:
    if type(v) is not bool:
        raise _Slow
    return v


_SCALARS: dict[Any, Callable[[Any], Any]] = {float: _float, int: _int, str: _str, bool: _bool}
_built: dict[type, Callable[[Any], Any]] = {}


def _converter(tp: Any) -> Callable[[Any], Any]:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) != 1 or len(typing.get_args(tp)) != 2:
            raise TypeError(f"fast path does not handle {tp!r}")
        inner = _converter(args[0])
        return lambda v: None if v is None else inner(v)
    if tp in _SCALARS:
        return _SCALARS[tp]
    if tp is Any:
        return lambda v: v
    if origin is tuple:
        item = _converter(typing.get_args(tp)[0])

        def conv_tuple(v: Any) -> tuple[Any, ...]:
            if type(v) is not list or len(v) > MAX_SEQUENCE:
                raise _Slow
            return tuple([item(x) for x in v])

        return conv_tuple
    if origin in (Mapping, dict, typing.Mapping, typing.Dict):  # noqa: UP006
        kc, vc = (_converter(a) for a in typing.get_args(tp))

        def conv_map(v: Any) -> dict[Any, Any]:
            if type(v) is not dict or len(v) > MAX_SEQUENCE:
                raise _Slow
            return {kc(k): vc(x) for k, x in v.items()}

        return conv_map
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if getattr(tp, "__post_init__", None) is not None or "__slots__" not in tp.__dict__:
            raise TypeError(f"fast path needs a slotted dataclass without __post_init__: {tp!r}")
        return _dataclass(tp)
    raise TypeError(f"fast path does not handle {tp!r}")


def _inline(tp: Any, name: str, ns: dict[str, Any]) -> list[str]:
    """Statements that check/convert ``v`` in place (scalars inline: no call)."""
    optional = False
    if typing.get_origin(tp) in (Union, types.UnionType):
        args = typing.get_args(tp)
        if len(args) == 2 and type(None) in args:
            optional = True
            tp = next(a for a in args if a is not type(None))
    none_ok = "v is not None and " if optional else ""
    if tp is float:
        return [
            "t = type(v)",
            "if t is float: pass",
            "elif t is int: v = float(v)",
            *(["elif v is not None: raise _Slow"] if optional else ["else: raise _Slow"]),
        ]
    if tp in (int, str, bool):
        ns[f"{name}_t"] = tp
        return [f"if {none_ok}type(v) is not {name}_t: raise _Slow"]
    ns[name] = _converter(tp if not optional else tp | None)
    return [f"v = {name}(v)"]


def _dataclass(cls: type) -> Callable[[Any], Any]:
    if cls in _built:
        return _built[cls]
    hints = typing.get_type_hints(cls)
    ns: dict[str, Any] = {"_Slow": _Slow, "cls": cls, "_new": object.__new__}
    # Frozen dataclass __init__ sets each field through object.__setattr__;
    # the slot descriptors' own __set__ does the same job several times faster.
    lines = ["def decode(d):", "    if type(d) is not dict: raise _Slow", "    o = _new(cls)"]
    for f in dataclasses.fields(cls):
        ns[f"s_{f.name}"] = cls.__dict__[f.name].__set__
        lines.append(f"    if {f.name!r} in d:")
        lines.append(f"        v = d[{f.name!r}]")
        lines.extend("        " + line for line in _inline(hints[f.name], f"c_{f.name}", ns))
        lines.append(f"        s_{f.name}(o, v)")
        if f.default is not dataclasses.MISSING:
            ns[f"d_{f.name}"] = f.default
            lines.append(f"    else: s_{f.name}(o, d_{f.name})")
        elif f.default_factory is not dataclasses.MISSING:
            ns[f"f_{f.name}"] = f.default_factory
            lines.append(f"    else: s_{f.name}(o, f_{f.name}())")
        else:
            lines.append("    else: raise _Slow")
    lines.append("    return o")
    exec("\n".join(lines), ns)  # generated from the model's own type hints, no outside input
    fn: Callable[[Any], Any] = ns["decode"]
    _built[cls] = fn
    return fn


_decode_host = _dataclass(HostSample)


def fast_sample_from_dict(data: Any) -> HostSample:
    """Same result as ``serialize.sample_from_dict`` (same SchemaError), faster.

    Raises:
        SchemaError: the data does not fit the model (from the reference decoder).
    """
    try:
        result: HostSample = _decode_host(data)
    except (_Slow, TypeError, ValueError, OverflowError):
        return sample_from_dict(data)
    return check_sample(result)


_HOST_DECODER = msgspec.msgpack.Decoder(HostSample)


def sample_from_msgpack(raw: bytes) -> HostSample | None:
    """Decode one packed sample map straight into a checked :class:`HostSample`.

    Returns None, never raises, when the bytes are not plainly valid (wrong
    type, missing field, not msgpack, too deep, an implausible time): the
    caller must then decode them with ``fast_sample_from_dict``, which raises
    the reference SchemaError. The caller bounds the size of ``raw``;
    containers are not length-checked here (ipc.stream only calls this for
    bodies of at most ``MAX_CONTAINER_LEN`` = ``MAX_SEQUENCE`` bytes).
    """
    try:
        sample: HostSample = _HOST_DECODER.decode(raw)
        return check_sample(sample)
    except (msgspec.DecodeError, RecursionError, SchemaError):
        return None


__all__ = ["fast_sample_from_dict", "sample_from_msgpack"]
