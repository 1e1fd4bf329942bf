"""What a viewer accepts from an agent or a file: plausible numbers and printable text.

Every decoded :class:`~gpulens.core.model.HostSample` passes
:func:`check_sample` (both doors of the one sample decoder in ``ipc.serialize``,
``sample_from_msgpack`` and ``sample_from_dict``, end in it, and so does
this host's own sampler, ``collectors.sampler``, whose names are other
users' processes'), so no widget, table or log ever sees what a hostile or
broken agent or process made up:

- A number that is NaN, ±inf, or outside its field's plausible range
  (:func:`~gpulens.core.sample_fields.bound_of`: percentages -1..110,
  ratios -0.01..1.1, bytes and byte rates 0..1e18, watts 0..1e6, °C
  -274..1000, MHz 0..1e6, counters 0..1e18, unix times 0..1e11, pids
  0..2^22) becomes None (n/a), with the
  reason in the owner's ``unavailable`` map: the GPU's for a GPU field
  (keyed by the field's path inside the GPU, e.g. ``power_w``), the host's
  otherwise (keyed by the dotted path, e.g. ``cpu.total_percent``).
- Where the field cannot be None (an interface's rate, a job's start time or
  pid, a GPU's index), the list entry holding it is dropped, with the reason
  under the entry's path (``network.interfaces[2]``); a bad item of a list of
  numbers (per-core %, XID events, ancestors) drops that list or item the
  same way. A bad sample ``time`` rejects the whole sample (SchemaError):
  a sample cannot be placed without it.
- Every string (host, GPU and interface names, job command lines, users,
  reasons) loses its control characters: C0, DEL, C1, whole ESC sequences
  (CSI, OSC, DCS...) and bidirectional overrides (:func:`clean_text`).

At most :data:`MAX_NOTES` reasons are added per owner; the rest are counted
in one more. Checking a clean sample allocates nothing (straight-line code
generated from each field's kind and range, :mod:`gpulens.core.sample_fields`);
only a sample with something to fix takes the slower reflective repair.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, TypeVar

from gpulens.core.errors import SchemaError
from gpulens.core.model import CpuSample, GpuSample, HostSample
from gpulens.core.sample_fields import SPECS, FieldSpec, field_specs

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_D = TypeVar("_D", bound="DataclassInstance")

MAX_NOTES = 16
"""Reasons added to one ``unavailable`` map per sample; more are summarised in one."""

# -- text ---------------------------------------------------------------------

_ESC_SEQ = (
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"  # CSI (7- or 8-bit): params, intermediates, final
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"  # OSC, DCS, SOS, PM,
    # APC up to BEL or ST
    r"|\x1b[ -/]*[0-~]?"  # any other escape (and a lone ESC)
)
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
# Tab (09) and line feed (0a) are left to the caller's choice; everything else below 0x20 goes.
_STRIP = re.compile(f"{_ESC_SEQ}|[\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f{_BIDI}]")
_SPACE = re.compile(r"[\t\n\r]")


def clean_text(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` without terminal control: ESC sequences, C0, DEL, C1 and bidi overrides removed.

    Tabs and line breaks become spaces, or stay (``\\n`` and ``\\t`` only;
    ``\\r`` is removed) with ``keep_newlines`` for multi-line text such as
    a stack dump. Printable text is returned as is (the same object).
    """
    if text.isprintable():
        return text
    if keep_newlines:
        return _STRIP.sub("", text)
    return _STRIP.sub("", _SPACE.sub(" ", text))


def clean_data(value: object, *, depth: int = 0, max_depth: int = 64) -> object:
    """A copy of plain data (a request's result) with every string cleaned, newlines kept.

    Raises:
        SchemaError: nested deeper than ``max_depth``.
    """
    if isinstance(value, str):
        return clean_text(value, keep_newlines=True)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if depth >= max_depth and isinstance(value, dict | list | tuple):
        raise SchemaError("result", f"at most {max_depth} levels of nesting", "deeper data")
    if isinstance(value, dict):
        return {clean_data(k, depth=depth + 1): clean_data(v, depth=depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean_data(v, depth=depth + 1) for v in value]
    return value


# -- fast check: generated, allocation-free ------------------------------------

_CHECKS: dict[type, Callable[[Any], bool]] = {}


def _checker(cls: type) -> Callable[[Any], bool]:
    """``ok(obj)``: True when nothing in ``obj`` needs fixing (straight-line code per class)."""
    fn = _CHECKS.get(cls)
    if fn is not None:
        return fn
    ns: dict[str, Any] = {}
    lines = ["def ok(o):"]
    for f in field_specs(cls):
        a = f"o.{f.name}"
        lo, hi = repr(f.lo), repr(f.hi)
        if f.kind == "num":
            none_ok = "v is not None and " if f.optional else ""
            lines += [f"    v = {a}", f"    if {none_ok}not ({lo} <= v <= {hi}): return False"]
        elif f.kind == "str":
            none_ok = f"{a} is not None and " if f.optional else ""
            lines.append(f"    if {none_ok}not {a}.isprintable(): return False")
        elif f.kind == "obj":
            ns[f"c_{f.name}"] = _checker(f.cls)  # type: ignore[arg-type]
            none_ok = f"{a} is not None and " if f.optional else ""
            lines.append(f"    if {none_ok}not c_{f.name}({a}): return False")
        elif f.kind == "objs":
            ns[f"c_{f.name}"] = _checker(f.cls)  # type: ignore[arg-type]
            lines += [f"    for x in {a}:", f"        if not c_{f.name}(x): return False"]
        elif f.kind == "nums":
            lines += [f"    for x in {a}:", f"        if not ({lo} <= x <= {hi}): return False"]
        elif f.kind == "strs":
            lines += [f"    for x in {a}:", "        if not x.isprintable(): return False"]
        elif f.kind == "strmap":
            lines += [f"    for k, x in {a}.items():", "        if not (k.isprintable() and x.isprintable()): return False"]
        elif f.kind == "nummap":
            lines += [
                f"    for k, x in {a}.items():",
                f"        if not (k.isprintable() and {lo} <= x <= {hi}): return False",
            ]
    lines.append("    return True")
    # ``cls`` comes from the model module; the code is built from its own type hints only.
    exec("\n".join(lines), ns)
    made: Callable[[Any], bool] = ns["ok"]
    _CHECKS[cls] = made
    return made


# -- repair: only for a sample with something to fix ----------------------------


class _Drop(Exception):
    """A required number of this object is bad: drop the object from its list."""

    def __init__(self, value: object, path: str, lo: float, hi: float) -> None:
        self.value, self.path, self.lo, self.hi = value, path, lo, hi
        self.why = _why(value, path, lo, hi).replace("; shown as n/a", "")


class _Notes:
    """Reasons for one ``unavailable`` map, capped at MAX_NOTES."""

    def __init__(self) -> None:
        self.items: dict[str, str] = {}
        self.more = 0

    def add(self, key: str, why: str) -> None:
        if len(self.items) < MAX_NOTES:
            self.items[key] = why
        else:
            self.more += 1

    def merged(self, existing: Mapping[str, str]) -> dict[str, str]:
        out = {clean_text(k): clean_text(v) for k, v in existing.items()}
        out.update(self.items)
        if self.more:
            out["implausible values"] = f"{self.more} more implausible values received; shown as n/a"
        return out


def _why(value: object, path: str, lo: float, hi: float) -> str:
    shown = repr(value)[:40]
    if isinstance(value, float) and not math.isfinite(value):
        return f"received a non-finite value ({shown}) for {path}; shown as n/a"
    return f"received an implausible value ({shown}) for {path} (expected {lo:g} to {hi:g}); shown as n/a"


def _plausible(v: float, lo: float, hi: float) -> bool:
    return bool(lo <= v <= hi)


def _repair(obj: _D, cls: type, path: str, rel: str, notes: _Notes) -> _D:
    """``obj`` with every bad value fixed; raises _Drop when a required number is bad."""
    own = notes
    if cls is GpuSample:  # a GPU's reasons go in its own map, keyed inside the GPU
        own, rel = _Notes(), ""
    changes: dict[str, object] = {}
    for f in SPECS[cls]:
        v = getattr(obj, f.name)
        full = f"{path}.{f.name}" if path else f.name
        key = f"{rel}.{f.name}" if rel else f.name
        fix = _FIXES.get(f.kind)
        new = _SAME if fix is None else fix(cls, f, v, full, key, own)
        if new is not _SAME:
            changes[f.name] = new
    if isinstance(obj, GpuSample | HostSample) and (own.items or own.more or not _checker_strmap(obj.unavailable)):
        changes["unavailable"] = own.merged(obj.unavailable)
    return dataclasses.replace(obj, **changes) if changes else obj


_SAME: Final = object()
"""What a fixer returns for a value that needs no change."""


def _fix_num(cls: type, f: FieldSpec, v: float | None, full: str, key: str, own: _Notes) -> object:
    """An implausible number: None (with the reason), or _Drop when the field cannot be None."""
    if v is None or _plausible(v, f.lo, f.hi):
        return _SAME
    if not f.optional:
        raise _Drop(v, full, f.lo, f.hi)
    own.add(key, _why(v, full, f.lo, f.hi))
    return None


def _fix_str(cls: type, f: FieldSpec, v: str | None, full: str, key: str, own: _Notes) -> object:
    s = v if v is None else clean_text(v)
    return _SAME if s is v else s


def _fix_obj(cls: type, f: FieldSpec, v: DataclassInstance | None, full: str, key: str, own: _Notes) -> object:
    new = v if v is None else _repair(v, f.cls, full, key, own)  # type: ignore[arg-type]
    return _SAME if new is v else new


def _fix_objs(cls: type, f: FieldSpec, v: tuple[DataclassInstance, ...], full: str, key: str, own: _Notes) -> object:
    """Each object repaired; one with a bad required number dropped, with the reason."""
    items = []
    for i, x in enumerate(v):
        item_full, item_key = f"{full}[{i}]", f"{key}[{i}]"
        try:
            items.append(_repair(x, f.cls, item_full, item_key, own))  # type: ignore[arg-type]
        except _Drop as drop:
            own.add(item_key, f"{item_full} dropped: {drop.why}")
    if len(items) != len(v) or any(a is not b for a, b in zip(items, v, strict=False)):
        return tuple(items)
    return _SAME


def _fix_nums(cls: type, f: FieldSpec, v: tuple[float, ...], full: str, key: str, own: _Notes) -> object:
    """Implausible items dropped; for per-core values (positional), the whole list."""
    bad = [x for x in v if not _plausible(x, f.lo, f.hi)]
    if not bad:
        return _SAME
    if cls is CpuSample:  # per-core values are positional: one bad core voids the list
        own.add(key, _why(bad[0], full, f.lo, f.hi).replace("shown as n/a", "per-core values dropped"))
        return ()
    own.add(key, _why(bad[0], full, f.lo, f.hi).replace("shown as n/a", "dropped"))
    return tuple(x for x in v if _plausible(x, f.lo, f.hi))


def _fix_strs(cls: type, f: FieldSpec, v: tuple[str, ...], full: str, key: str, own: _Notes) -> object:
    cleaned = tuple(clean_text(x) for x in v)
    return cleaned if any(a is not b for a, b in zip(cleaned, v, strict=True)) else _SAME


def _fix_strmap(cls: type, f: FieldSpec, v: Mapping[str, str], full: str, key: str, own: _Notes) -> object:
    if f.name == "unavailable":
        return _SAME  # merged by _repair, with this object's own reasons
    return {clean_text(k): clean_text(x) for k, x in v.items()}


def _fix_nummap(cls: type, f: FieldSpec, v: Mapping[str, float], full: str, key: str, own: _Notes) -> object:
    """Implausible entries dropped, with the reason; keys cleaned."""
    kept = {}
    for k, x in v.items():
        if _plausible(x, f.lo, f.hi):
            kept[clean_text(k)] = x
        else:
            own.add(f"{key}.{clean_text(k)}", _why(x, f"{full}.{clean_text(k)}", f.lo, f.hi)
                    .replace("shown as n/a", "dropped"))
    return kept if kept != v else _SAME


_FIXES: dict[str, Callable[[type, FieldSpec, Any, str, str, _Notes], object]] = {
    "num": _fix_num, "str": _fix_str, "obj": _fix_obj, "objs": _fix_objs, "nums": _fix_nums,
    "strs": _fix_strs, "strmap": _fix_strmap, "nummap": _fix_nummap,
}
"""The repair of each kind of field (bool and any need none): the new value, or _SAME."""


def _checker_strmap(m: Mapping[str, str]) -> bool:
    return all(k.isprintable() and v.isprintable() for k, v in m.items())


field_specs(HostSample)
_host_ok = _checker(HostSample)


def check_sample(sample: HostSample) -> HostSample:
    """``sample`` as is when everything in it is plausible; else a fixed copy (see the module doc).

    Raises:
        SchemaError: the sample's ``time`` is not a plausible unix time.
    """
    if _host_ok(sample):
        return sample
    try:
        fixed: HostSample = _repair(sample, HostSample, "", "", _Notes())
    except _Drop as drop:  # a required number outside any list (the sample's time)
        raise SchemaError(drop.path, f"a finite number from {drop.lo:g} to {drop.hi:g}", drop.value) from None
    return fixed


__all__ = ["check_sample", "clean_data", "clean_text"]
