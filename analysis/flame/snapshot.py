"""PyTorch CUDA memory snapshots (``torch.cuda.memory._dump_snapshot`` pickles).

A snapshot holds only dicts, lists, tuples, strings and numbers, so anything
else is hostile. Before unpickling, :func:`scan_pickle` walks the opcodes
(without building anything) and refuses every opcode that names a class or
calls anything, memo indexes that jump ahead (the C unpickler would allocate
a memo array that large: 11 bytes could ask for gigabytes), and more than
``max_objects`` containers or memo entries (``--max-events``). Only then does
the C unpickler run, with an unpickler that still refuses every class.
Blocks may share frame lists (torch caches them), so walking them is
bounded too: at most one block or event per byte of the file (plus 100,000)
and 64 frames per byte (plus 1,000,000), which real snapshots never approach.

Views:
* ``live``: blocks in state ``active_allocated`` at dump time, by the
  frames of their allocation (bytes).
* ``allocated``: every ``alloc`` event in ``device_traces`` (the
  allocation history), by frames (bytes allocated over the recording).
"""

from __future__ import annotations

import io
import pickle
import pickletools
import re
from typing import Any, NoReturn

from gpulens.analysis.flame.errors import FlameFormatError, FlameProblem, Where
from gpulens.analysis.flame.model import Profile, build_from_stacks
from gpulens.core.limits import DEFAULT_MAX_EVENTS, too_many

MAX_SNAPSHOT_BYTES = 1 << 30
FRAMES_PER_BYTE = 64
# Frames of the capture machinery and of the caching allocator itself: every
# allocation passes through them, so they would hide the caller that allocated.
_CAPTURE = re.compile(
    r"^(torch::unwind::|torch::CapturedTraceback::gather|torch::cuda::\(anonymous namespace\)::gather"
    r"|c10::cuda::CUDACachingAllocator::)"
)
_PROCESS_START = {"_start", "__libc_start_main", "__libc_start_call_main", "__libc_start_main_alias_2"}

# Opcode byte -> how the scanner reads its argument: >= 0 that many bytes; -1 up to a
# newline; -2/-3/-4/-5 a 1/4 (signed)/4/8-byte little-endian length, then that many bytes
# (pickletools' ``n``); below -5 an opcode handled on its own (memo writes, STOP, refused).
_BINPUT, _LONG_BINPUT, _PUT, _STOP_OP, _REFUSE = -6, -7, -8, -9, -10
_ARG: list[int] = [_REFUSE] * 256
_OP_NAME: dict[int, str] = {}
for _op in pickletools.opcodes:
    _ARG[ord(_op.code)] = 0 if _op.arg is None else _op.arg.n
    _OP_NAME[ord(_op.code)] = _op.name
_LEN_BYTES = {-2: 1, -3: 4, -4: 4, -5: 8}
_REFUSED = {
    "GLOBAL": "a class or function", "STACK_GLOBAL": "a class or function", "INST": "an instance of a class",
    "OBJ": "an instance of a class", "NEWOBJ": "an instance of a class", "NEWOBJ_EX": "an instance of a class",
    "REDUCE": "a call", "BUILD": "object state", "EXT1": "a registered extension", "EXT2": "a registered extension",
    "EXT4": "a registered extension", "PERSID": "a persistent id", "BINPERSID": "a persistent id",
    "NEXT_BUFFER": "an out-of-band buffer", "READONLY_BUFFER": "an out-of-band buffer",
}
_SPECIAL = {"BINPUT": _BINPUT, "LONG_BINPUT": _LONG_BINPUT, "PUT": _PUT, "STOP": _STOP_OP}
for _code, _name in _OP_NAME.items():
    if _name in _REFUSED:
        _ARG[_code] = _REFUSE
    elif _name in _SPECIAL:
        _ARG[_code] = _SPECIAL[_name]
_CONTAINERS = [ord(op.code) for op in pickletools.opcodes if op.name in {
    "EMPTY_LIST", "LIST", "EMPTY_TUPLE", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "EMPTY_DICT", "DICT",
    "EMPTY_SET", "FROZENSET"}]
"""Opcodes that build a container: the costliest objects per byte of pickle (about 60 bytes
of memory for one byte of opcode); a leaf costs at most its own bytes plus a small header."""
_MEMOIZE = pickle.MEMOIZE[0]


_PICKLE_ERRORS = (pickle.UnpicklingError, EOFError, ValueError, TypeError, LookupError, AttributeError,
                  ArithmeticError, MemoryError, RecursionError)
"""What the C unpickler raises for opcodes that passed the scan but not the load (UnicodeDecodeError is a
ValueError, a missing memo key a LookupError, a too-large count an OverflowError)."""


class _NoClassesUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> NoReturn:
        raise FlameFormatError(
            f"memory snapshot refers to {module}.{name}; snapshots hold only plain data, refusing to load",
            problem=FlameProblem.UNSAFE,
        )


def _refusal(data: bytes, op: int, i: int) -> FlameFormatError:
    name = _OP_NAME.get(op)
    if name is None:
        return FlameFormatError(f"not a readable pickle: unknown opcode {op:#04x} at byte {i - 1}",
                                problem=FlameProblem.UNSUPPORTED, at=f"byte {i - 1}")
    if name in ("GLOBAL", "INST"):  # two text lines: module and name
        module, _, rest = data[i : i + 512].partition(b"\n")
        name = rest.partition(b"\n")[0].decode("utf-8", "replace")
        return FlameFormatError(
            f"memory snapshot refers to {module.decode('utf-8', 'replace')}.{name}; "
            "snapshots hold only plain data, refusing to load", problem=FlameProblem.UNSAFE,
        )
    return FlameFormatError(
        f"memory snapshot uses pickle opcode {name} ({_REFUSED[name]}); "
        "snapshots hold only plain data, refusing to load", problem=FlameProblem.UNSAFE,
    )


def scan_pickle(data: bytes, source: str = "input", max_objects: int = DEFAULT_MAX_EVENTS) -> int:
    """Check a pickle's opcodes before anything is unpickled; returns the number of containers it builds.

    Reads only: nothing is built, so the scan costs no memory. Raises
    FlameFormatError for a refused opcode (classes, calls, buffers), a memo
    index beyond the next free one, more than ``max_objects`` containers or
    memo entries, or data that ends before its STOP opcode.
    """
    arg, lens = _ARG, _LEN_BYTES
    counts = [0] * 256
    n, i, puts = len(data), 0, 0
    find, from_bytes = data.find, int.from_bytes
    while i < n:
        op = data[i]
        i += 1
        counts[op] += 1
        k = arg[op]
        if k == 0:
            continue
        if k > 0:
            i += k
            continue
        if k == -1:
            j = find(b"\n", i)
            if j < 0:
                break
            i = j + 1
            continue
        if k >= -5:
            width = lens[k]
            length = from_bytes(data[i : i + width], "little", signed=k == -3)
            if length < 0:
                raise FlameFormatError(f"{source}: not a readable pickle: negative length at byte {i}", at=f"byte {i}")
            i += width + length
            continue
        if k == _STOP_OP:
            break
        if k == _REFUSE:
            raise _refusal(data, op, i)
        # A memo write with an explicit index: the C unpickler sizes its memo array by the
        # index, so an index far ahead costs gigabytes. Picklers number entries in order.
        start = i
        if k == _PUT:
            j = find(b"\n", i)
            if j < 0:
                break
            i = j + 1
            index = int(data[start:j])
        else:
            i += 1 if k == _BINPUT else 4
            index = from_bytes(data[start:i], "little")
        memo = puts + counts[_MEMOIZE]
        if index > memo:
            raise FlameFormatError(
                f"{source}: not a readable pickle: memo index {index} jumps past the next free entry "
                f"{memo} (a memo-growth bomb); refusing to load", problem=FlameProblem.UNSAFE,
            )
        puts += index == memo
    else:
        i = n + 1
    if i > n or data[i - 1] != pickle.STOP[0]:
        raise FlameFormatError(f"{source}: not a readable pickle: it ends before its STOP opcode (truncated)", problem=FlameProblem.TRUNCATED)
    containers = sum(counts[op] for op in _CONTAINERS)
    if containers > max_objects:
        raise FlameFormatError(too_many(source, "containers (dicts, lists, tuples) in a memory snapshot",
                                        max_objects), problem=FlameProblem.TOO_LARGE)
    if puts + counts[_MEMOIZE] > max_objects:
        raise FlameFormatError(too_many(source, "memo entries in a memory snapshot", max_objects), problem=FlameProblem.TOO_LARGE)
    return containers


def load_snapshot_bytes(data: bytes, source: str = "input", *, max_objects: int = DEFAULT_MAX_EVENTS) -> dict[str, Any]:
    """Unpickle a snapshot without allowing any class, function or global.

    The opcodes are checked first (:func:`scan_pickle`), so memory stays
    proportional to the file. Raises FlameFormatError for oversized,
    truncated, hostile or non-dict data, or more than ``max_objects``
    containers or memo entries.
    """
    if len(data) > MAX_SNAPSHOT_BYTES:
        raise FlameFormatError(f"{source}: {len(data)} bytes is over the {MAX_SNAPSHOT_BYTES}-byte limit", problem=FlameProblem.TOO_LARGE)
    try:
        scan_pickle(data, source, max_objects)
        doc = _NoClassesUnpickler(io.BytesIO(data)).load()
    except FlameFormatError as err:
        text = str(err)
        raise FlameFormatError(text if text.startswith(f"{source}: ") else f"{source}: {text}",
                               problem=err.problem, at=err.at) from None
    except _PICKLE_ERRORS as err:
        raise FlameFormatError(f"{source}: not a readable pickle: {type(err).__name__}: {err}",
                               problem=FlameProblem.UNSUPPORTED) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("segments"), list):
        raise FlameFormatError(f"{source}: not a memory snapshot (expected a dict with a 'segments' list)",
                               problem=FlameProblem.UNSUPPORTED)
    return doc


def _frame_text(frame: object, where: Where, k: int) -> str:
    """Frame ``k`` of the stack at ``where`` as text (its place is made only for the error)."""
    if not isinstance(frame, dict) or not isinstance(frame.get("name"), str):
        raise where.then(f".frames[{k}]").error("expected {name, filename, line}")
    name: str = frame["name"]
    file, line = frame.get("filename"), frame.get("line")
    if isinstance(file, str) and file and file != "??":
        return f"{name} ({file}:{line})" if isinstance(line, int) and line > 0 else f"{name} ({file})"
    return name


def snapshot_stack(frames: object, where: Where) -> list[str]:
    """Frames of one allocation, root first.

    Snapshots list frames innermost first: the native stack (down to
    ``_start``) and then, when C++ and Python were both captured, the rest
    of the Python stack. The Python tail goes below the native part, and
    the native process-start frames before the interpreter loop are dropped.
    """
    if not isinstance(frames, list):
        raise where.then(": frames").error("expected a list")
    texts = [_frame_text(f, where, k) for k, f in enumerate(frames)]
    names = [f["name"] for f in frames]
    start = next((k for k, n in enumerate(names) if n in _PROCESS_START), None)
    if start is not None:
        native, tail = texts[:start], texts[start + 1 :]
        tail = [t for t, n in zip(tail, names[start + 1 :], strict=False) if n not in _PROCESS_START]
        # Keep native frames from the first interpreter loop inwards.
        first_eval = max((k for k, n in enumerate(names[:start]) if "EvalFrame" in n), default=len(native) - 1)
        native = native[: first_eval + 1]
        texts = native + tail
        names = names[: len(native)] + ["" for _ in tail]
    stack = [t for t, n in zip(texts, names, strict=False) if not _CAPTURE.match(n)]
    stack.reverse()
    return stack


class _Walk:
    """Budgets and a stack cache for one walk over a snapshot (blocks share frame lists)."""

    def __init__(self, source: str, file_bytes: int) -> None:
        self.source = source
        self.blocks_left = file_bytes + 100_000
        self.frames_left = FRAMES_PER_BYTE * file_bytes + 1_000_000
        self.stacks: dict[int, list[str]] = {}

    def visit(self) -> None:
        self.blocks_left -= 1
        if self.blocks_left < 0:
            raise FlameFormatError(
                f"{self.source}: lists the same blocks or events far more often than its size allows "
                "(more than one per byte): a reference bomb, refusing to load", problem=FlameProblem.TOO_LARGE,
            )

    def stack(self, frames: object, where: Where) -> list[str]:
        if isinstance(frames, list):
            self.frames_left -= len(frames)
            if self.frames_left < 0:
                raise FlameFormatError(
                    f"{self.source}: its blocks share frame lists far more often than real snapshots "
                    f"(more than {FRAMES_PER_BYTE} frames per byte in all): a reference bomb, refusing to load",
                    problem=FlameProblem.TOO_LARGE,
                )
        # Keyed by identity: the frame lists stay alive in the document for the whole walk.
        cached = self.stacks.get(id(frames))
        if cached is None:
            cached = self.stacks[id(frames)] = snapshot_stack(frames, where)
        return cached


def snapshot_profile(doc: dict[str, Any], view: str = "auto", source: str = "input", *, file_bytes: int = 0) -> Profile:
    """Bytes by allocation stack: ``live`` blocks, ``allocated`` history, or ``auto``.

    ``auto`` picks ``live`` when any block is allocated at dump time, else
    ``allocated``. ``file_bytes`` (the pickle's size) sets the walk's
    budgets (see the module docstring). Raises FlameFormatError naming the
    bad field, or the budget a reference bomb ran into.
    """
    walk = _Walk(source, file_bytes)
    live: list[tuple[list[str], float]] = []
    for s, seg in enumerate(doc["segments"]):
        where = Where(source, f"segments[{s}]")
        walk.visit()
        if not isinstance(seg, dict) or not isinstance(seg.get("blocks", []), list):
            raise where.error("expected an object with a 'blocks' list")
        for b, block in enumerate(seg.get("blocks", [])):
            bw = where.then(f".blocks[{b}]")
            walk.visit()
            if not isinstance(block, dict) or not isinstance(block.get("size"), int):
                raise bw.error("expected an object with an integer 'size'")
            if block.get("state") == "active_allocated":
                live.append((walk.stack(block.get("frames", []), bw), block["size"]))
    history: list[tuple[list[str], float]] = []
    traces = doc.get("device_traces", [])
    if not isinstance(traces, list):
        raise Where(source, "device_traces").error("expected a list")
    for d, trace in enumerate(traces):
        walk.visit()
        if not isinstance(trace, list):
            raise Where(source, f"device_traces[{d}]").error("expected a list")
        for e, ev in enumerate(trace):
            ew = Where(source, f"device_traces[{d}][{e}]")
            walk.visit()
            if not isinstance(ev, dict) or not isinstance(ev.get("size"), int):
                raise ew.error("expected an object with an integer 'size'")
            if ev.get("action") == "alloc":
                history.append((walk.stack(ev.get("frames", []), ew), ev["size"]))
    if view == "auto":
        view = "live" if live else "allocated"
    if view == "live":
        return build_from_stacks(live, "bytes", "GPU memory live at snapshot")
    if view == "allocated":
        return build_from_stacks(history, "bytes", "GPU memory allocated (snapshot history)")
    raise FlameFormatError(f"unknown snapshot view {view!r}; expected live, allocated or auto",
                           problem=FlameProblem.BAD_OPTION)
