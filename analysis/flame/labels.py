"""Frame text -> function name, file, line and the label users read.

Labels follow the conventions of Azure's GPU profiling flame graphs:

=========================  ==============================================
``Foo > bar``              method ``bar`` of class ``Foo`` (Python qualname)
``Foo > __init__``         the constructor of ``Foo``
``bar``                    a module-level function
``<interpreter trampoline>``  CPython dispatch (``_PyEval_EvalFrameDefault`` ...)
``0x7f151...``             native code without symbols, shown as the address
=========================  ==============================================

Recognised frame texts: py-spy's ``name (file.py:12)``, Kineto's
``file.py(12): name``, and anything else kept as written (perf, Java, C++).
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

TRAMPOLINE = "<interpreter trampoline>"

_PYSPY = re.compile(r"^(?P<name>.+?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")
_KINETO = re.compile(r"^(?P<file>[^()]+)\((?P<line>\d+)\): (?P<name>.+)$")
_ADDRESS = re.compile(r"^(0x)?[0-9a-fA-F]{6,}$")
# CPython's evaluation loop and call machinery: frames a reader can skip.
_TRAMPOLINE = re.compile(
    r"^(_?PyEval_\w*|_?PyObject_(Vectorcall|Call|MakeTpCall|FastCall)\w*|_?PyFunction_Vectorcall"
    r"|_?PyVectorcall_\w+|PyVectorcall_Call|method_vectorcall\w*|cfunction_(vectorcall|call)\w*"
    r"|slot_tp_\w+|vectorcall_\w+|_Py_call_\w+|PyRun_\w+|_PyRun_\w+|pymain_\w+|Py_RunMain|Py_BytesMain"
    r"|<interpreter trampoline>)$"
)
_QUALNAME = re.compile(r"^[A-Za-z_][\w<>]*(\.[A-Za-z_<][\w<>]*)+$")


@dataclass(frozen=True, slots=True)
class FrameInfo:
    """One frame as parsed from its text.

    ``name`` is the function as written in the input (what ``--json``
    prints); ``label`` is what the flame graph shows; ``module`` picks the
    colour (package for Python files, namespace for C++, else a kind).
    """

    text: str
    name: str
    file: str | None
    line: int | None
    label: str
    module: str


def _python_label(name: str) -> str:
    if _QUALNAME.match(name):
        owner, _, method = name.rpartition(".")
        return f"{owner} > {method}"
    return name


def _module_of_file(path: str) -> str:
    parts = [p for p in re.split(r"[\\/]", path) if p]
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            i = parts.index(marker)
            if i + 1 < len(parts):
                return parts[i + 1].removesuffix(".py")
    if len(parts) >= 2 and parts[0] in ("torch", "vllm", "transformers", "triton", "numpy"):
        return parts[0]
    return parts[-1].removesuffix(".py") if parts else "?"


def _native_module(name: str) -> str:
    if name.endswith("_[k]"):
        return "[kernel]"
    if name.endswith("_[j]"):
        return "[jit]"
    if "::" in name:
        return name.split("::", 1)[0].lstrip("~")
    if "/" in name:
        return name.split("/", 1)[0]
    return "[native]"


def parse_frame(text: str) -> FrameInfo:
    """Split a frame's text into name, file and line and build its label."""
    if _TRAMPOLINE.match(text):
        return FrameInfo(text, text, None, None, TRAMPOLINE, "[python]")
    m = _PYSPY.match(text) or _KINETO.match(text)
    if m is not None:
        name, file, line = m.group("name"), m.group("file"), m.group("line")
        if _TRAMPOLINE.match(name):
            return FrameInfo(text, name, file, int(line) if line else None, TRAMPOLINE, "[python]")
        is_python = file.endswith((".py", ".pyx")) or file.startswith("<")
        label = _python_label(name) if is_python else name
        module = _module_of_file(file) if is_python else _native_module(name)
        return FrameInfo(text, name, file, int(line) if line else None, label, module)
    if _ADDRESS.match(text):
        return FrameInfo(text, text, None, None, text if text.startswith("0x") else "0x" + text, "[native]")
    return FrameInfo(text, text, None, None, text, _native_module(text))


def colour_index(module: str, n: int) -> int:
    """A stable palette slot for a module (crc32: the same across runs)."""
    return zlib.crc32(module.encode("utf-8", "replace")) % n


def format_value(value: float, unit: str) -> str:
    """A value for people: ``1.5 GiB``, ``230 ms``, ``1,234`` samples."""
    if unit == "bytes":
        v = float(value)
        for suffix in ("B", "KiB", "MiB", "GiB", "TiB"):
            if abs(v) < 1024 or suffix == "TiB":
                return f"{v:.0f} {suffix}" if suffix == "B" else f"{v:.1f} {suffix}"
            v /= 1024
    if unit == "seconds":
        v = float(value)
        if abs(v) >= 1:
            return f"{v:.2f} s"
        if abs(v) >= 1e-3:
            return f"{v * 1e3:.1f} ms"
        return f"{v * 1e6:.0f} µs"
    return f"{value:,.0f}" if value == int(value) else f"{value:,.2f}"
