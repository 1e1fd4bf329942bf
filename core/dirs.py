"""Where gpulens keeps files, as the XDG base-directory spec says, and how old ones go.

- :func:`cache_dir`: ``$XDG_CACHE_HOME/gpulens`` (``~/.cache/gpulens``):
  downloaded traces (``traces/``, ``downloads/``). HPC homes have small
  quotas, so sites point ``XDG_CACHE_HOME`` at scratch.
- :func:`state_dir`: ``$XDG_STATE_HOME/gpulens`` (``~/.local/state/gpulens``):
  the ``--debug`` log.
- :func:`prune`: keeps a directory of gpulens' own files under a size cap and
  an age limit (``[cache]`` in config.toml: ``max_mib``, ``max_age_days``),
  oldest first. It walks through directory descriptors without following a
  link, removes only entries owned by the caller's uid, and never leaves the
  directory it was given — so pointing it at a tree another user can write
  cannot make it delete anything outside. The directory itself is reached
  from ``/`` by descriptor, every component a real directory of root's or
  the caller's that nobody else can write (sticky ones like /tmp aside): a
  root gpulens run with a user's ``XDG_CACHE_HOME`` (``sudo -E``) refuses a
  path she could point elsewhere instead of pruning wherever it leads.

A relative ``XDG_*`` value is ignored, as the spec requires.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from gpulens.core.safefs import PathProblem, UnsafePath, open_trusted_dir

MAX_ENTRIES = 100_000
"""Entries looked at per prune: a directory of millions of files is pruned in parts."""


def _xdg(var: str, fallback: str) -> Path:
    value = os.environ.get(var, "")
    if value and os.path.isabs(value):
        return Path(value)
    return Path.home() / fallback


def cache_dir(create: bool = False) -> Path:
    """``$XDG_CACHE_HOME/gpulens`` (``~/.cache/gpulens`` when unset or relative)."""
    path = _xdg("XDG_CACHE_HOME", ".cache") / "gpulens"
    if create:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def state_dir(create: bool = False) -> Path:
    """``$XDG_STATE_HOME/gpulens`` (``~/.local/state/gpulens`` when unset or relative)."""
    path = _xdg("XDG_STATE_HOME", ".local/state") / "gpulens"
    if create:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


@dataclass(frozen=True, slots=True)
class PruneResult:
    """What :func:`prune` found and removed; ``refused``: why it pruned nothing (the path is unsafe)."""

    kept_bytes: int
    removed_files: int
    removed_bytes: int
    refused: str | None = None


@dataclass(frozen=True, slots=True)
class _Entry:
    dir_fd_path: tuple[str, ...]  # names from the top directory down to the file's directory
    name: str
    size: int
    mtime: float


def prune(top: Path, max_bytes: int, max_age_s: float, now: float | None = None) -> PruneResult:
    """Remove files under ``top`` older than ``max_age_s``, then the oldest until under ``max_bytes``.

    Only regular files owned by our uid are counted and removed; links,
    other users' files and anything not a plain file are left alone (and not
    counted). Directories emptied by the removal are removed too. A missing
    ``top``, or one another user owns, is an empty result; so is a ``top``
    reached through a link, or through a directory neither root nor we own or
    that others may write (not sticky), with ``refused`` saying which.
    """
    now = time.time() if now is None else now
    uid = os.geteuid()
    try:
        top_fd = open_trusted_dir(top, owners=tuple({0, uid}))
    except UnsafePath as err:
        if err.problem is PathProblem.MISSING:
            return PruneResult(0, 0, 0)
        return PruneResult(0, 0, 0, refused=str(err))
    try:
        if os.fstat(top_fd).st_uid != uid:  # someone else's tree (e.g. a squatted /tmp/gpulens-UID)
            return PruneResult(0, 0, 0)
        entries: list[_Entry] = []
        _walk(top_fd, (), uid, entries, depth=0)
        entries.sort(key=lambda e: e.mtime)
        total = sum(e.size for e in entries)
        removed = removed_bytes = 0
        touched: set[tuple[str, ...]] = set()
        for e in entries:
            if now - e.mtime <= max_age_s and total <= max_bytes:
                break
            if _unlink(top_fd, e):
                removed += 1
                removed_bytes += e.size
                total -= e.size
                touched.update(e.dir_fd_path[:i] for i in range(1, len(e.dir_fd_path) + 1))
        _remove_empty_dirs(top_fd, uid, (), touched, now - max_age_s, depth=0)
        return PruneResult(total, removed, removed_bytes)
    finally:
        os.close(top_fd)


def _walk(dir_fd: int, where: tuple[str, ...], uid: int, out: list[_Entry], depth: int) -> None:
    if depth > 8 or len(out) >= MAX_ENTRIES:
        return
    try:
        names = os.listdir(dir_fd)
    except OSError:
        return
    for name in names:
        if len(out) >= MAX_ENTRIES:
            return
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            continue
        if st.st_uid != uid:
            continue
        if stat.S_ISREG(st.st_mode):
            out.append(_Entry(where, name, st.st_size, st.st_mtime))
        elif stat.S_ISDIR(st.st_mode):
            sub = _open_sub(dir_fd, name, uid)
            if sub is not None:
                try:
                    _walk(sub, (*where, name), uid, out, depth + 1)
                finally:
                    os.close(sub)


def _open_sub(dir_fd: int, name: str, uid: int) -> int | None:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    if os.fstat(fd).st_uid != uid:  # swapped between the stat and the open
        os.close(fd)
        return None
    return fd


def _unlink(top_fd: int, e: _Entry) -> bool:
    fds: list[int] = []
    try:
        fd = top_fd
        for name in e.dir_fd_path:
            sub = _open_sub(fd, name, os.geteuid())
            if sub is None:
                return False
            fds.append(sub)
            fd = sub
        st = os.stat(e.name, dir_fd=fd, follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            return False
        os.unlink(e.name, dir_fd=fd)
        return True
    except OSError:
        return False
    finally:
        for sub in fds:
            os.close(sub)


def _remove_empty_dirs(
    dir_fd: int, uid: int, where: tuple[str, ...], touched: set[tuple[str, ...]], cutoff: float, depth: int
) -> None:
    """Remove empty directories this prune emptied, or that have been empty since before ``cutoff``.

    A fresh empty directory is kept: it may be a trace directory handed to a
    target that has not written its file yet.
    """
    if depth > 8:
        return
    try:
        names = os.listdir(dir_fd)
    except OSError:
        return
    for name in names:
        sub = _open_sub(dir_fd, name, uid)
        if sub is None:
            continue
        path = (*where, name)
        try:
            _remove_empty_dirs(sub, uid, path, touched, cutoff, depth + 1)
            empty = not os.listdir(sub) and (path in touched or os.fstat(sub).st_mtime < cutoff)
        except OSError:
            empty = False
        finally:
            os.close(sub)
        if empty:
            with contextlib.suppress(OSError):
                os.rmdir(name, dir_fd=dir_fd)
