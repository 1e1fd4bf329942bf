"""JSON values as JavaScript sees them: the trace-event importer names things the way speedscope does.

speedscope (a JavaScript app) builds a trace event's frame name as
``name + " " + JSON.stringify(args)``, compares names with ``===``, turns
pids into text with template strings and numbers with ``Number()``. These
helpers give the same text from the values :func:`json.loads` returns:
``1.0`` prints ``1``, ``1e-7`` prints ``1e-7``, integer-like object keys come
first (JavaScript's own key order), a name of ``0`` or ``""`` is falsy.
"""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal
from typing import Any, TypeGuard

_JS_DECIMAL = re.compile(r"[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|Infinity)")
_SURROGATE = re.compile("[\ud800-\udfff]")
_INDEX_MAX = 2**32 - 2  # the largest array-index key


def number_text(x: float) -> str:
    """``String(x)`` for a JavaScript number (ECMAScript Number::toString, shortest round trip)."""
    if isinstance(x, int):
        if abs(x) < 2**53:
            return str(x)
        x = float(x)  # JSON.parse rounds big integers to doubles
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "0"
    if x.is_integer() and abs(x) < 2**53:  # exact: every digit is needed
        return str(int(x))
    text = repr(x)
    if "e" not in text and not x.is_integer():  # 1e-4 to 1e16: both print the shortest digits plainly
        return text
    sign = "-" if x < 0 else ""
    _, digit_tuple, exponent = Decimal(repr(abs(x))).normalize().as_tuple()
    digits = "".join(map(str, digit_tuple))
    k, n = len(digits), int(exponent) + len(digits)
    if k <= n <= 21:
        return sign + digits + "0" * (n - k)
    if 0 < n <= 21:
        return f"{sign}{digits[:n]}.{digits[n:]}"
    if -6 < n <= 0:
        return f"{sign}0.{'0' * -n}{digits}"
    e = n - 1
    mantissa = digits if k == 1 else f"{digits[0]}.{digits[1:]}"
    return f"{sign}{mantissa}e{'+' if e >= 0 else '-'}{abs(e)}"


def is_number(v: object) -> TypeGuard[int | float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def to_text(v: object) -> str:
    """``String(v)`` / `` `${v}` `` of a JSON value (``None`` is ``null``)."""
    if isinstance(v, str):
        return v
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if is_number(v):
        return number_text(v)
    if isinstance(v, list):
        return _list_text(v)
    return "[object Object]"


def _list_text(v: list[Any]) -> str:
    # Array.prototype.join: items by ",", null as "", nested arrays joined too (without recursion: any depth).
    out: list[str] = []
    stack: list[tuple[list[Any], int]] = [(v, 0)]
    while stack:
        items, i = stack.pop()
        if i < len(items):
            if i:
                out.append(",")
            stack.append((items, i + 1))
            item = items[i]
            if isinstance(item, list):
                stack.append((item, 0))
            elif item is not None:
                out.append(to_text(item))
    return "".join(out)


def template(v: object) -> str:
    """`` `${v}` `` of a field that may be :data:`MISSING` (``undefined``)."""
    return "undefined" if v is MISSING else to_text(v)


def truthy(v: object) -> bool:
    """JavaScript truthiness (objects and arrays, even empty, are true; NaN is false)."""
    if isinstance(v, (dict, list)):
        return True
    if isinstance(v, float) and math.isnan(v):
        return False
    return bool(v)


def to_number(v: object) -> float:
    """``Number(v)``: numbers as they are, numeric strings parsed, ``null`` 0, anything else NaN."""
    if isinstance(v, bool):
        return 1.0 if v else 0.0
    if is_number(v):
        return float(v)
    if v is None:
        return 0.0
    if isinstance(v, str):
        s = v.strip()
        if not s:
            return 0.0
        if _JS_DECIMAL.fullmatch(s):
            return float(s.replace("Infinity", "inf"))
        if re.fullmatch(r"0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+", s):
            return float(int(s, 0))
    return math.nan


def _key_order(obj: dict[str, Any]) -> list[str]:
    # JavaScript objects list array-index keys ("0", "7") first, in numeric order, then the rest as inserted.
    index = [k for k in obj if k.isdigit() and k.isascii() and (k == "0" or k[0] != "0") and int(k) <= _INDEX_MAX]
    if not index:
        return list(obj)
    rest = [k for k in obj if k not in set(index)]
    return sorted(index, key=int) + rest


def _string(s: str) -> str:
    if s.isprintable() and '"' not in s and "\\" not in s:  # nothing to escape (control characters are not printable)
        return f'"{s}"'
    text = json.dumps(s, ensure_ascii=False)
    # JSON.stringify escapes lone surrogates; json.dumps(ensure_ascii=False) would keep them raw.
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text) if _SURROGATE.search(text) else text


def _scalar(v: object) -> str:
    if isinstance(v, str):
        return _string(v)
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if is_number(v):
        return number_text(v)
    raise TypeError(f"not a JSON value: {type(v).__name__}")


class _Text(str):
    """Text already laid out (a bracket, a comma, a key): :func:`stringify`'s stack tells it from a string value."""

    __slots__ = ()


def stringify(v: object) -> str:
    """``JSON.stringify(v)`` of a value :func:`json.loads` made (NaN and infinities print ``null``).

    Without recursion, so arguments nested as deep as the JSON reader allows print too.
    """
    if not isinstance(v, (dict, list)):
        return _scalar(v)
    out: list[str] = []
    stack: list[Any] = [v]
    while stack:
        item = stack.pop()
        if type(item) is _Text:
            out.append(item)
        elif isinstance(item, list):
            out.append("[")
            stack.append(_Text("]"))
            for i in range(len(item) - 1, -1, -1):
                stack.append(item[i])
                if i:
                    stack.append(_Text(","))
        elif isinstance(item, dict):
            out.append("{")
            stack.append(_Text("}"))
            keys = _key_order(item)
            for i in range(len(keys) - 1, -1, -1):
                stack.append(item[keys[i]])
                stack.append(_Text(("," if i else "") + _string(keys[i]) + ":"))
        else:
            out.append(_scalar(item))
    return "".join(out)


def identity(v: object, unique: int) -> tuple[Any, ...]:
    """A hashable token equal for two values exactly when JavaScript's ``===`` says so.

    Objects and arrays are never ``===`` to another one: ``unique`` (e.g. the
    event's index) tells them apart. ``None`` is ``null``; pass a missing field
    as the ``MISSING`` sentinel.
    """
    if v is MISSING:
        return ("undefined",)
    if isinstance(v, str):
        return ("s", v)
    if isinstance(v, bool):
        return ("b", v)
    if is_number(v):
        f = float(v)
        return ("nan", unique) if math.isnan(f) else ("n", f)
    if v is None:
        return ("null",)
    return ("o", unique)


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False  # undefined is falsy


MISSING: Any = _Missing()
"""A field the event does not have (JavaScript's ``undefined``)."""
