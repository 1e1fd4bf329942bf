"""The fields of the sample model as :mod:`gpulens.core.sanitize` checks them: each one's kind and plausible range.

A field's kind comes from the model's own type hints (:func:`field_specs`):
a number, a string, a bool, a nested model object or a tuple of them, a
tuple of numbers or strings, a map of strings or of numbers. Its plausible
range (:func:`bound_of`) is set by name: an explicit entry for the fields
whose name says nothing (a sample's ``time``, a pid, a GPU's index), else
its unit suffix (percentages -1..110, ratios -0.01..1.1, bytes and byte
rates 0..1e18, watts 0..1e6, °C -274..1000, MHz 0..1e6, counters 0..1e18).
A model field of a type with no rule here fails as sanitize loads, naming it, so a
new field is never left unchecked.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, Union

from gpulens.core.model import (
    CpuSample,
    GpuProcess,
    GpuSample,
    HostSample,
    IbPort,
    JobInfo,
    Workload,
)

PERCENT = (-1.0, 110.0)
RATIO = (-0.01, 1.1)
BYTES = (0.0, 1e18)
COUNT = (0.0, 1e18)
WATTS = (0.0, 1e6)
CELSIUS = (-274.0, 1000.0)
MHZ = (0.0, 1e6)
UNIX_TIME = (0.0, 1e11)
PID = (0.0, float(1 << 22))
ANY = (-1e18, 1e18)

_EXPLICIT: dict[tuple[type, str], tuple[float, float]] = {
    (HostSample, "time"): UNIX_TIME,
    (JobInfo, "start_time"): UNIX_TIME,
    (JobInfo, "pid"): PID,
    (JobInfo, "ancestors"): PID,
    (JobInfo, "cpu_percent"): (0.0, 1e7),  # top's %CPU: up to 100 per core
    (GpuProcess, "pid"): PID,
    (Workload, "ns_pid"): PID,
    (GpuSample, "index"): (0.0, 65535.0),
    (GpuSample, "xid_events"): (0.0, float(1 << 32)),
    (IbPort, "port"): (0.0, 65535.0),
    (CpuSample, "load_avg_1m"): (0.0, 1e7),
    (CpuSample, "count"): (0.0, 1e7),
    (GpuSample, "energy_joules"): (0.0, 1e15),  # a counter (issue 12): joules since the driver loaded
}
_SUFFIXES: tuple[tuple[str, tuple[float, float]], ...] = (
    ("_percent", PERCENT),
    ("_ratio", RATIO),
    ("_bytes_per_s", BYTES),
    ("_bytes", BYTES),
    ("_w", WATTS),
    ("_c", CELSIUS),
    ("_mhz", MHZ),
    ("ecc_corrected", COUNT),
    ("ecc_uncorrected", COUNT),
    ("symbol_errors", COUNT),
    ("link_downed", COUNT),
)


def bound_of(cls: type, name: str) -> tuple[float, float]:
    """The plausible (low, high) of numeric field ``name`` of model class ``cls``, inclusive."""
    explicit = _EXPLICIT.get((cls, name))
    if explicit is not None:
        return explicit
    for suffix, bound in _SUFFIXES:
        if name.endswith(suffix):
            return bound
    return ANY


@dataclasses.dataclass(frozen=True, slots=True)
class FieldSpec:
    """One field of a model class: its name, kind, whether it may be None, and its plausible range."""

    name: str
    kind: str
    """num, str, bool, any, obj, objs, nums, strs, strmap, nummap"""
    optional: bool
    lo: float
    hi: float
    cls: type | None = None
    """The model class of an ``obj`` or ``objs`` field."""


SPECS: dict[type, tuple[FieldSpec, ...]] = {}
"""The specs of every model class :func:`field_specs` has been asked for (and the classes they hold)."""


def field_specs(cls: type) -> tuple[FieldSpec, ...]:
    """The fields of model class ``cls``, worked out once (with those of the classes it holds) and kept in SPECS.

    Raises:
        TypeError: a field of a type with no rule here (a new kind of field).
    """
    spec = SPECS.get(cls)
    if spec is None:
        spec = SPECS[cls] = _fields(cls)
        for f in spec:
            if f.cls is not None:
                field_specs(f.cls)
    return spec


def _fields(cls: type) -> tuple[FieldSpec, ...]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        tp, optional = hints[f.name], False
        if typing.get_origin(tp) in (Union, types.UnionType):
            members = [a for a in typing.get_args(tp) if a is not type(None)]
            optional, tp = True, members[0]
            if len(members) != 1:
                raise TypeError(f"sanitize: {cls.__name__}.{f.name} has a union it does not know")
        lo, hi = bound_of(cls, f.name)
        kind, sub = _kind_of(tp)
        if not kind:
            raise TypeError(f"sanitize: {cls.__name__}.{f.name}: no rule for {tp!r}")
        out.append(FieldSpec(f.name, kind, optional, lo, hi, sub))
    return tuple(out)


def _kind_of(tp: object) -> tuple[str, type | None]:
    """A field type's kind (see :class:`FieldSpec`) and its dataclass, if any; ("", None): no rule for it."""
    if tp is bool:
        return "bool", None
    if tp in (int, float):
        return "num", None
    if tp is str:
        return "str", None
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return "obj", tp
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is tuple:
        return _tuple_kind(args)
    if origin in (Mapping, dict):
        return _mapping_kind(args)
    return "", None


def _tuple_kind(args: tuple[Any, ...]) -> tuple[str, type | None]:
    """``tuple[X, ...]``: objs of a dataclass, nums or strs."""
    if isinstance(args[0], type) and dataclasses.is_dataclass(args[0]):
        return "objs", args[0]
    if args[0] in (int, float):
        return "nums", None
    if args[0] is str:
        return "strs", None
    return "", None


def _mapping_kind(args: tuple[Any, ...]) -> tuple[str, type | None]:
    """``Mapping[str, X]``: strmap or nummap."""
    if args == (str, str):
        return "strmap", None
    if args[0] is str and args[1] in (int, float):
        return "nummap", None
    return "", None


__all__ = ["ANY", "BYTES", "CELSIUS", "COUNT", "MHZ", "PERCENT", "PID", "RATIO", "SPECS", "UNIX_TIME", "WATTS",
           "FieldSpec", "bound_of", "field_specs"]
