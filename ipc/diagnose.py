"""Why a process cannot be traced on demand, read from the process itself."""

from __future__ import annotations

from pathlib import Path

from .endpoint import SOCKET_DIR_ENV, describe_address
from .procinfo import PROC, loads_torch, may_trace, proc_environ, proc_uid


def diagnose_pid(
    pid: int,
    *,
    polling: bool,
    serving_dir: str | None,
    requester_uid: int,
    proc: Path = PROC,
) -> str | None:
    """None when ``pid`` can be traced; otherwise one line saying why, with the fix.

    ``serving_dir`` is the socket directory gpulens serves (None = abstract
    name). Checks, in order: the process exists, belongs to the requester
    (or the requester is root), sets ``KINETO_USE_DAEMON``, uses the same
    ``KINETO_IPC_SOCKET_DIR``, has PyTorch loaded, and polls.
    """
    uid = proc_uid(pid, proc)
    if uid is None:
        return f"process {pid} is gone"
    if not may_trace(requester_uid, uid):
        return f"process {pid} belongs to uid {uid}: only its owner or root can trace it"
    if polling:
        return None
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
    return (
        "it has not polled yet: PyTorch polls every ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS "
        "(5 s by default) once torch is imported; wait a few seconds (a program started "
        "before its KINETO_IPC_SOCKET_DIR existed never polls: restart it)"
    )
