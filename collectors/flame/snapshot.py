"""PyTorch CUDA memory snapshots (``torch.cuda.memory._dump_snapshot`` pickles).

Read with an unpickler that refuses every class: a snapshot holds only
dicts, lists, tuples, strings and numbers, so anything else is hostile.

Views:
* ``live``: blocks in state ``active_allocated`` at dump time, by the
  frames of their allocation (bytes).
* ``allocated``: every ``alloc`` event in ``device_traces`` (the
  allocation history), by frames (bytes allocated over the recording).
"""

from __future__ import annotations

import io
import pickle
import re
from typing import Any

from .errors import FlameFormatError
from .model import Profile, build_from_stacks

MAX_SNAPSHOT_BYTES = 1 << 30
# Frames of the capture machinery and of the caching allocator itself: every
# allocation passes through them, so they would hide the caller that allocated.
_CAPTURE = re.compile(
    r"^(torch::unwind::|torch::CapturedTraceback::gather|torch::cuda::\(anonymous namespace\)::gather"
    r"|c10::cuda::CUDACachingAllocator::)"
)
_PROCESS_START = {"_start", "__libc_start_main", "__libc_start_call_main", "__libc_start_main_alias_2"}


class _NoClassesUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise FlameFormatError(
            f"memory snapshot refers to {module}.{name}; snapshots hold only plain data, refusing to load"
        )


def load_snapshot_bytes(data: bytes, source: str = "input") -> dict[str, Any]:
    """Unpickle a snapshot without allowing any class, function or global.

    Raises FlameFormatError for oversized, truncated, hostile or non-dict data.
    """
    if len(data) > MAX_SNAPSHOT_BYTES:
        raise FlameFormatError(f"{source}: {len(data)} bytes is over the {MAX_SNAPSHOT_BYTES}-byte limit")
    try:
        doc = _NoClassesUnpickler(io.BytesIO(data)).load()
    except FlameFormatError as err:
        raise FlameFormatError(f"{source}: {err}") from None
    except Exception as err:
        raise FlameFormatError(f"{source}: not a readable pickle: {type(err).__name__}: {err}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("segments"), list):
        raise FlameFormatError(f"{source}: not a memory snapshot (expected a dict with a 'segments' list)")
    return doc


def _frame_text(frame: Any, where: str) -> str:
    if not isinstance(frame, dict) or not isinstance(frame.get("name"), str):
        raise FlameFormatError(f"{where}: expected {{name, filename, line}}")
    name: str = frame["name"]
    file, line = frame.get("filename"), frame.get("line")
    if isinstance(file, str) and file and file != "??":
        return f"{name} ({file}:{line})" if isinstance(line, int) and line > 0 else f"{name} ({file})"
    return name


def snapshot_stack(frames: Any, where: str) -> list[str]:
    """Frames of one allocation, root first.

    Snapshots list frames innermost first: the native stack (down to
    ``_start``) and then, when C++ and Python were both captured, the rest
    of the Python stack. The Python tail goes below the native part, and
    the native process-start frames before the interpreter loop are dropped.
    """
    if not isinstance(frames, list):
        raise FlameFormatError(f"{where}: frames: expected a list")
    texts = [_frame_text(f, f"{where}.frames[{k}]") for k, f in enumerate(frames)]
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


def snapshot_profile(doc: dict[str, Any], view: str = "auto", source: str = "input") -> Profile:
    """Bytes by allocation stack: ``live`` blocks, ``allocated`` history, or ``auto``.

    ``auto`` picks ``live`` when any block is allocated at dump time, else
    ``allocated``. Raises FlameFormatError naming the bad field.
    """
    live: list[tuple[list[str], float]] = []
    for s, seg in enumerate(doc["segments"]):
        where = f"{source}: segments[{s}]"
        if not isinstance(seg, dict) or not isinstance(seg.get("blocks", []), list):
            raise FlameFormatError(f"{where}: expected an object with a 'blocks' list")
        for b, block in enumerate(seg.get("blocks", [])):
            bw = f"{where}.blocks[{b}]"
            if not isinstance(block, dict) or not isinstance(block.get("size"), int):
                raise FlameFormatError(f"{bw}: expected an object with an integer 'size'")
            if block.get("state") == "active_allocated":
                live.append((snapshot_stack(block.get("frames", []), bw), block["size"]))
    history: list[tuple[list[str], float]] = []
    traces = doc.get("device_traces", [])
    if not isinstance(traces, list):
        raise FlameFormatError(f"{source}: device_traces: expected a list")
    for d, trace in enumerate(traces):
        if not isinstance(trace, list):
            raise FlameFormatError(f"{source}: device_traces[{d}]: expected a list")
        for e, ev in enumerate(trace):
            ew = f"{source}: device_traces[{d}][{e}]"
            if not isinstance(ev, dict) or not isinstance(ev.get("size"), int):
                raise FlameFormatError(f"{ew}: expected an object with an integer 'size'")
            if ev.get("action") == "alloc":
                history.append((snapshot_stack(ev.get("frames", []), ew), ev["size"]))
    if view == "auto":
        view = "live" if live else "allocated"
    if view == "live":
        return build_from_stacks(live, "bytes", "GPU memory live at snapshot")
    if view == "allocated":
        return build_from_stacks(history, "bytes", "GPU memory allocated (snapshot history)")
    raise FlameFormatError(f"unknown snapshot view {view!r}; expected live, allocated or auto")
