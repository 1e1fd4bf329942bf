"""Does a finished trace show optimizer steps? (Kineto counts iterations by them.)

PyTorch wraps every ``Optimizer.step`` in a ``user_annotation`` named
``Optimizer.step#<Class>.step`` (torch/optim/optimizer.py,
``profile_hook_step``); with ``KINETO_USE_DAEMON`` set, the same call
advances Kineto's iteration counter. A trace without one such name came
from a program that did not step in the window, so an iterations request
it answered was Kineto's duration fallback. The file is scanned as bytes
from the checked descriptor (no JSON parse, no link followed), stopping at
the first match or after ``MAX_SCAN_BYTES``.

:func:`shows_memory_events` scans the same way for ``"[memory]"``, the
instant events of ``profile_memory`` (torch 2.13's on-demand profiler records
none: its global profiler state is not the thread-local reporter c10's
allocators tell of allocations).
"""

from __future__ import annotations

import os

from gpulens.core.safefs import UnsafePath
from gpulens.ipc.kineto.outputs import open_trace_file

STEP_MARK = b"Optimizer.step#"
MEMORY_MARK = b'"[memory]"'
MAX_SCAN_BYTES = 1 << 30
CHUNK_BYTES = 1 << 20


def shows_optimizer_steps(path: str, owner_uid: int | None) -> bool | None:
    """True when the trace holds an ``Optimizer.step#`` annotation, False when it holds none.

    None: the file cannot be read (refused, gone) or is larger than what is scanned.
    """
    return _holds(path, owner_uid, STEP_MARK)


def shows_memory_events(path: str, owner_uid: int | None) -> bool | None:
    """True when the trace holds a ``[memory]`` event, False when it holds none (None: cannot tell)."""
    return _holds(path, owner_uid, MEMORY_MARK)


def _holds(path: str, owner_uid: int | None, mark: bytes) -> bool | None:
    try:
        fd = open_trace_file(path, owner_uid)
    except (UnsafePath, OSError):
        return None
    try:
        tail = b""
        seen = 0
        while seen < MAX_SCAN_BYTES:
            chunk = os.read(fd, CHUNK_BYTES)
            if not chunk:
                return False
            if mark in tail + chunk:
                return True
            tail = chunk[-len(mark) :]
            seen += len(chunk)
        return None
    except OSError:
        return None
    finally:
        os.close(fd)
