"""What /proc says about a process that gpulens may trace: owner, environment, libraries.

Everything here returns ``None`` when /proc cannot be read (the process is
gone, or belongs to another user and we are not root); callers say so.
"""

from __future__ import annotations

import os
from pathlib import Path

PROC = Path("/proc")
# /proc/PID/environ of a real program is a few KiB; bound the read anyway.
MAX_ENVIRON_BYTES = 1 << 20
MAX_MAPS_BYTES = 16 << 20


def proc_uid(pid: int, proc: Path = PROC) -> int | None:
    """Real uid of ``pid`` from /proc/PID/status; None when the process is gone."""
    try:
        with open(proc / str(pid) / "status", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def proc_environ(pid: int, proc: Path = PROC) -> dict[str, str] | None:
    """The environment ``pid`` started with; None when unreadable (gone or not ours)."""
    try:
        with open(proc / str(pid) / "environ", "rb") as fh:
            raw = fh.read(MAX_ENVIRON_BYTES)
    except OSError:
        return None
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return env


def loads_torch(pid: int, proc: Path = PROC) -> bool | None:
    """True when libtorch (hence libkineto) is mapped into ``pid``; None when unreadable."""
    try:
        with open(proc / str(pid) / "maps", "rb") as fh:
            raw = fh.read(MAX_MAPS_BYTES)
    except OSError:
        return None
    return b"libtorch_cpu.so" in raw or b"libtorch.so" in raw or b"libkineto" in raw


def may_trace(requester_uid: int, target_uid: int | None) -> bool:
    """Root may trace anyone; others only their own processes."""
    return target_uid is not None and (requester_uid == 0 or requester_uid == target_uid)


def current_uid() -> int:
    """The effective uid of this process (the requesting user for local requests)."""
    return os.geteuid()


def unix_socket_holder(shown_name: str, proc: Path = PROC) -> tuple[int, int | None, str] | None:
    """(pid, uid, comm) of a process holding the Unix socket named ``shown_name`` in /proc/net/unix.

    ``shown_name`` is the path, or the abstract name with ``@`` for each NUL.
    The socket's inode is looked up among every process's open descriptors
    (only our own are visible unless we are root). None when not found.
    """
    inodes: set[str] = set()
    try:
        with open(proc / "net" / "unix", encoding="utf-8", errors="replace") as fh:
            next(fh, None)
            for line in fh:
                parts = line.split()
                if len(parts) >= 8 and parts[7] == shown_name:
                    inodes.add(f"socket:[{parts[6]}]")
    except OSError:
        return None
    if not inodes:
        return None
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:  # closed since the listing (the listing's own descriptor, say): not it
                continue
            if target in inodes:
                try:
                    comm = (entry / "comm").read_text(errors="replace").strip()
                except OSError:
                    comm = "?"
                return int(entry.name), proc_uid(int(entry.name), proc), comm
    return None
