"""The sample codec: one typed decoder for a HostSample, plain data on the way out.

``to_dict`` / ``sample_to_dict`` turn model objects into JSON/msgpack-ready
builtins (docs/sample-schema.md). There is one way in, with two doors:

- :func:`sample_from_msgpack` decodes a packed sample map (a stream frame's
  ``sample``, each of a history frame's ``samples``) straight into the
  frozen dataclasses with msgspec;
- :func:`sample_from_dict` converts plain data (``gpulens sample --json``,
  a recording's records) with ``msgspec.convert``, the same typed
  validation from Python objects instead of bytes.

Both check every field's type against the model, ignore unknown keys (a
newer agent may send more), apply the model's size bounds (``MAX_ITEMS``
items per list or map, ``MAX_TEXT_LEN`` characters per string, refused
from the declared length before anything is built) and end in
:func:`~gpulens.core.sanitize.check_sample`: NaN, infinities and
implausible numbers become None (n/a) with a reason, control characters
leave every string. A mismatch raises :class:`~gpulens.core.errors.SchemaError`
whose ``path`` is msgspec's (``$.gpus[3].power_w`` is reported as
``gpus[3].power_w``, the form check_sample's reasons use).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, overload

import msgspec

from gpulens.core.errors import SchemaError
from gpulens.core.model import HostSample
from gpulens.core.sanitize import check_sample
from gpulens.ipc.errors import ProtocolError, ProtocolProblem

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T")

_DECODER = msgspec.msgpack.Decoder(HostSample)


# -- out ------------------------------------------------------------------------


@overload
def to_dict(obj: DataclassInstance) -> dict[str, Any]: ...
@overload
def to_dict(obj: object) -> object: ...
def to_dict(obj: object) -> object:
    """Convert a model object (or builtins holding them) to plain builtins."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (tuple, list)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, Mapping):
        return {str(k): to_dict(v) for k, v in obj.items()}
    return obj


def sample_to_dict(sample: HostSample) -> dict[str, Any]:
    """The documented JSON/msgpack form of a host sample (docs/sample-schema.md)."""
    return to_dict(sample)


# -- in -------------------------------------------------------------------------


def sample_from_msgpack(raw: bytes | memoryview | msgspec.Raw) -> HostSample:
    """Decode one packed sample map into a checked :class:`HostSample`.

    Raises:
        SchemaError: the map does not fit the model (the path names the field),
            a list, map or string is over the model's bounds, or the sample's
            time is not plausible.
        ProtocolError: the bytes are not msgpack, or nest too deeply.
    """
    try:
        sample: HostSample = _DECODER.decode(raw)
    except msgspec.ValidationError as err:
        raise schema_error(err, "sample") from None
    except msgspec.DecodeError as err:
        raise ProtocolError(f"frame is not valid msgpack: {err}", problem=ProtocolProblem.NOT_MSGPACK) from None
    except RecursionError:
        raise ProtocolError("frame is not valid msgpack: nested too deeply", problem=ProtocolProblem.NOT_MSGPACK) from None
    return check_sample(sample)


def sample_from_dict(data: object) -> HostSample:
    """Validate plain data as a host sample, implausible values made n/a (``sanitize``).

    Raises:
        SchemaError: a field is missing or mistyped, or the sample's time is not plausible.
    """
    return check_sample(from_dict(HostSample, data))


def from_dict(cls: type[T], data: object) -> T:
    """Rebuild a model object of type ``cls`` from plain data (no plausibility check).

    Raises:
        SchemaError: a field is missing or has the wrong type; ``path`` names it.
    """
    try:
        return msgspec.convert(data, cls)
    except msgspec.ValidationError as err:
        raise schema_error(err, cls.__name__) from None


# -- msgspec's errors in the words of SchemaError ----------------------------------

_WHERE = re.compile(r"^(?P<what>.*?)(?: - at `key` in `(?P<key_in>[^`]*)`| - at `(?P<at>[^`]*)`)?$", re.DOTALL)
_EXPECTED = re.compile(r"^Expected `(?P<types>[^`]*)`(?:, got `(?P<got>[^`]*)`| of length (?P<op>[<>]=) (?P<n>\d+))?$")
_MISSING = re.compile(r"^Object missing required field `(?P<field>[^`]*)`$")
_WORDS = {
    "float": "a number",
    "int": "an integer",
    "str": "a string",
    "bool": "true or false",
    "array": "a list",
    "object": "a map",
    "bytes": "bytes",
    "null": "null",
    "None": "null",
    "ext": "an extension type",
}
_GOT = {**_WORDS, "bool": "a boolean"}
_UNITS = {"array": "items", "object": "entries", "str": "characters"}


class _Shown(str):
    """What was received, described (msgspec names the type, not the value)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return str(self)


def _path(where: str, root: str) -> str:
    """msgspec's ``$.gpus[3].power_w`` as ``gpus[3].power_w`` (``$`` alone is ``root``)."""
    if where in ("", "$"):
        return root
    return where[2:] if where.startswith("$.") else where.removeprefix("$")


def schema_error(err: msgspec.ValidationError, root: str) -> SchemaError:
    """The SchemaError for a msgspec validation error; its path is msgspec's, without ``$.``."""
    m = _WHERE.match(str(err))
    assert m is not None  # the pattern matches any text
    what = m["what"]
    if m["key_in"] is not None:
        path = _path(m["key_in"], root) + ".<key>"
    else:
        path = _path(m["at"] or "", root)
    missing = _MISSING.match(what)
    if missing is not None:
        name = missing["field"]
        return SchemaError(name if path == root else f"{path}.{name}", "a value (required field missing)", None)
    expected = _EXPECTED.match(what)
    if expected is not None:
        types = [t for t in expected["types"].split(" | ") if t != "null"]
        if expected["n"] is not None:
            unit = _UNITS.get(types[0] if types else "", "items")
            bound = "at most" if expected["op"] == "<=" else "at least"
            return SchemaError(path, f"{bound} {expected['n']} {unit}", _Shown("more" if bound == "at most" else "fewer"))
        words = " or ".join(_WORDS.get(t, f"`{t}`") for t in types) or "null"
        got = expected["got"] or ""
        return SchemaError(path, words, _Shown(_GOT.get(got, got or "something else")))
    return SchemaError(path, "valid data", _Shown(what[:1].lower() + what[1:]))


__all__ = ["from_dict", "sample_from_dict", "sample_from_msgpack", "sample_to_dict", "schema_error", "to_dict"]
