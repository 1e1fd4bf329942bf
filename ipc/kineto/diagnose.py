"""Why a process cannot be traced on demand, read from the process itself."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

from gpulens.core.procfs import PROC, loads_torch, may_trace, proc_environ, proc_uid
from gpulens.ipc.kineto.endpoint import SOCKET_DIR_ENV
from gpulens.ipc.kineto.liveness import parent_pid
from gpulens.ipc.kineto.registry import PollingProcess
from gpulens.ipc.kineto.untraceable import (
    DESCENDANTS_SHOWN,
    Untraceable,
    UntraceableKind,
    descendants_poll,
)


def diagnose_pid(
    pid: int,
    *,
    polling: bool,
    serving_dir: str | None,
    requester_uid: int,
    proc: Path = PROC,
    pollers: Sequence[PollingProcess] = (),
) -> Untraceable | None:
    """None when ``pid`` can be traced; otherwise why not (``str()`` of it: one line with the fix).

    ``serving_dir`` is the socket directory gpulens serves (None = abstract
    name). Checks, in order: the process exists, belongs to the requester
    (or the requester is root), sets ``KINETO_USE_DAEMON``, uses the same
    ``KINETO_IPC_SOCKET_DIR``, has PyTorch loaded, may create its client
    socket in that directory (a program of another uid needs it writable and
    searchable by others, e.g. 1733), and polls. ``pollers`` (the registry's
    live entries) name what to trace instead: polling descendants of a pid
    that polls nothing itself (a torchrun parent, a shell wrapper), or the
    polling parent of a worker forked after PyTorch initialised (it never
    polls: libkineto's poll thread is not copied by ``fork``).
    """
    uid = proc_uid(pid, proc)
    if uid is None:
        return Untraceable(UntraceableKind.GONE, pid)
    if not may_trace(requester_uid, uid):
        return Untraceable(UntraceableKind.OTHER_USER, pid, uid=uid)
    if polling:
        return None
    descendants = [p.pid for p in pollers if pid in p.ancestors]
    if descendants:
        return descendants_poll(pid, descendants, DESCENDANTS_SHOWN)
    forked_from = _forked_from_poller(pid, pollers, proc)
    if forked_from is not None:
        return Untraceable(UntraceableKind.FORKED_AFTER_INIT, pid, parent=forked_from)
    env = proc_environ(pid, proc)
    if env is None:
        return Untraceable(UntraceableKind.ENVIRON_UNREADABLE, pid)
    if env.get("KINETO_USE_DAEMON", "") in ("", "0"):
        return Untraceable(UntraceableKind.NO_DAEMON_ENV, pid)
    theirs = env.get(SOCKET_DIR_ENV, "") or None
    if theirs != serving_dir:
        return Untraceable(UntraceableKind.SOCKET_DIR_MISMATCH, pid, theirs=theirs, serving=serving_dir)
    torch = loads_torch(pid, proc)
    if torch is False:
        return Untraceable(UntraceableKind.NO_TORCH, pid)
    closed = _socket_dir_closed_to(pid, serving_dir, uid)
    if closed is not None:
        return closed
    return Untraceable(UntraceableKind.NOT_POLLED_YET, pid)


def _socket_dir_closed_to(pid: int, serving_dir: str | None, uid: int) -> Untraceable | None:
    """Why a program of ``uid`` cannot create its client socket in ``serving_dir`` (None: it can)."""
    if serving_dir is None:
        return None
    try:
        st = os.stat(serving_dir)
    except OSError:
        return None
    if uid in (0, st.st_uid):
        return None
    others, group = stat.S_IWOTH | stat.S_IXOTH, stat.S_IWGRP | stat.S_IXGRP
    if st.st_mode & others == others or st.st_mode & group == group:  # group: benefit of the doubt
        return None
    return Untraceable(UntraceableKind.SOCKET_DIR_CLOSED, pid, uid=uid, serving=serving_dir,
                       mode=stat.S_IMODE(st.st_mode))


def _forked_from_poller(pid: int, pollers: Sequence[PollingProcess], proc: Path) -> int | None:
    """The polling parent of ``pid`` when ``pid`` is a plain fork of it (same command line, no exec)."""
    parent = parent_pid(pid, proc)
    if parent is None or not any(p.pid == parent for p in pollers):
        return None
    try:
        mine = (proc / str(pid) / "cmdline").read_bytes()
        theirs = (proc / str(parent) / "cmdline").read_bytes()
    except OSError:
        return None
    return parent if mine and mine == theirs else None
