"""Why a process cannot be traced on demand, read from the process itself."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

from gpulens.core.procfs import PROC, loads_torch, may_trace, proc_environ, proc_uid
from gpulens.ipc.kineto.endpoint import SOCKET_DIR_ENV, describe_address
from gpulens.ipc.kineto.liveness import parent_pid
from gpulens.ipc.kineto.registry import PollingProcess

DESCENDANTS_SHOWN = 16


def diagnose_pid(
    pid: int,
    *,
    polling: bool,
    serving_dir: str | None,
    requester_uid: int,
    proc: Path = PROC,
    pollers: Sequence[PollingProcess] = (),
) -> str | None:
    """None when ``pid`` can be traced; otherwise one line saying why, with the fix.

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
        return f"process {pid} is gone"
    if not may_trace(requester_uid, uid):
        return f"process {pid} belongs to uid {uid}: only its owner or root can trace it"
    if polling:
        return None
    descendants = [p.pid for p in pollers if pid in p.ancestors]
    if descendants:
        shown = ",".join(map(str, descendants[:DESCENDANTS_SHOWN]))
        more = f" (and {len(descendants) - DESCENDANTS_SHOWN} more)" if len(descendants) > DESCENDANTS_SHOWN else ""
        return (
            f"process {pid} polls nothing itself, but its descendants do: {shown}{more}; trace those "
            f"(gpulens trace --pid {shown}, or --pid {pid} --children)"
        )
    forked_from = _forked_from_poller(pid, pollers, proc)
    if forked_from is not None:
        return (
            f"process {pid} was forked from process {forked_from} after PyTorch initialised: it never polls; "
            f"use the parent (--pid {forked_from}), or the spawn start method"
        )
    env = proc_environ(pid, proc)
    if env is None:
        return f"cannot read /proc/{pid}/environ: run gpulens as the process's owner"
    if env.get("KINETO_USE_DAEMON", "") in ("", "0"):
        return (
            "KINETO_USE_DAEMON is not set in its environment: restart it with "
            "KINETO_USE_DAEMON=1 (on-demand tracing is off without it)"
        )
    theirs = env.get(SOCKET_DIR_ENV, "") or None
    if theirs != serving_dir:
        fix = (
            f"start gpulens with --ipc-socket-dir {theirs}"
            if theirs
            else "start gpulens without --ipc-socket-dir / KINETO_IPC_SOCKET_DIR"
        )
        return (
            f"socket-dir mismatch: it talks to {describe_address(theirs)} but gpulens serves "
            f"{describe_address(serving_dir)}: {fix}"
        )
    torch = loads_torch(pid, proc)
    if torch is False:
        return "no PyTorch loaded in it (libtorch is not mapped): only PyTorch programs can be traced"
    closed = _socket_dir_closed_to(serving_dir, uid)
    if closed is not None:
        return closed
    return (
        "it has not polled yet: PyTorch polls every ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS "
        "(5 s by default) once torch is imported; wait a few seconds (a program started "
        "before its KINETO_IPC_SOCKET_DIR existed never polls: restart it)"
    )


def _socket_dir_closed_to(serving_dir: str | None, uid: int) -> str | None:
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
    return (
        f"the socket dir {serving_dir} has mode {stat.S_IMODE(st.st_mode):04o}: programs of uid {uid} "
        f"cannot create their client sockets there, so they never poll: chmod 1733 {serving_dir}"
    )


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
