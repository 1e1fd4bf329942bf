"""Files and directories a (possibly root) gpulens touches on behalf of other users.

The rule (docs/security.md): never follow a symlink, never reuse a directory
another user could have made, never act on a path twice. Everything here
works on file descriptors: a directory is opened component by component
with ``O_NOFOLLOW | O_DIRECTORY``, new entries are made relative to that
descriptor (``dir_fd=``), and every check is an ``fstat`` of the object
actually opened, so a name swapped between check and use changes nothing.

Errors are :class:`UnsafePath` (a ``GpulensError``) naming the path and what was
wrong with it; the reason is a value too, ``problem`` (a :class:`PathProblem`), about
``component`` (the path the sentence names).
"""

from __future__ import annotations

import contextlib
import enum
import errno
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from gpulens.core.errors import GpulensError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class PathProblem(enum.Enum):
    """Why a path is refused: what a caller or a test compares, not the sentence."""

    SYMLINK = "a symbolic link"
    """A symbolic link where gpulens follows none; on the way to the Kineto socket directory, a link
    neither root's nor ours, or one link too many."""
    WRONG_OWNER = "wrong owner"
    """Owned by another uid than the one required: a directory another user made, a file not the
    expected user's, another user's dead socket at the Kineto name."""
    WRITABLE_BY_OTHERS = "writable by others"
    """A directory group or others may write to, and not sticky (or sticky where that is not enough)."""
    NOT_A_DIRECTORY = "not a directory"
    """Something else where a directory goes, the last component or one on the way."""
    NOT_REGULAR = "not a regular file"
    """A FIFO, device, socket or directory where a regular file goes."""
    HARD_LINKED = "hard-linked"
    """A file with more than one name (a hard link): gpulens will not append to it."""
    TOO_LARGE = "too large"
    """A file over the size gpulens reads."""
    NOT_A_SOCKET = "not a socket"
    """Something else (a file, a directory) at the Kineto socket's name."""
    WRONG_SOCKET_KIND = "wrong kind of socket"
    """A socket passed over that is not a Unix datagram socket."""
    BOUND_ELSEWHERE = "bound elsewhere"
    """A socket passed over that is bound to another name than the Kineto endpoint's."""
    NOT_ABSOLUTE = "not absolute"
    """A relative path where an absolute one goes."""
    BAD_NAME = "bad name"
    """``..`` on a path walked, or a name that is not a plain file name (empty, ``.``, ``..``, a ``/``, a NUL)."""
    REPLACED = "replaced"
    """Swapped for something else between gpulens making (or binding) it and using it, or changing each
    time gpulens looks."""
    NO_FRESH_NAME = "no fresh name"
    """Every random name tried for a fresh directory was taken."""
    MISSING = "missing"
    """Not there (the open's ``FileNotFoundError`` is the error's ``__cause__`` where there was an open)."""
    CANNOT_OPEN = "cannot open"
    """The open failed otherwise (permission denied, in use, ...): the sentence gives the system's words."""

    @classmethod
    def of_os_error(cls, err: OSError) -> PathProblem:
        """The reason an open (``O_NOFOLLOW``) failed with ``err``."""
        if err.errno == errno.ELOOP:
            return cls.SYMLINK
        if err.errno == errno.ENOTDIR:
            return cls.NOT_A_DIRECTORY
        if err.errno == errno.ENOENT:
            return cls.MISSING
        return cls.CANNOT_OPEN


class UnsafePath(GpulensError):
    """A path gpulens refuses to use: a symlink, a FIFO, another user's, too open.

    ``problem`` (a :class:`PathProblem`) is the reason as a value and ``component`` the path it is
    about, as the sentence shows it (the first component that fails on a walk; None where the sentence
    names none); ``str(err)`` is the sentence.
    """

    title = "unsafe path"

    def __init__(self, message: str, *, problem: PathProblem, component: str | None) -> None:
        super().__init__(message)
        self.problem = problem
        self.component = component

    def __reduce__(self) -> tuple[object, ...]:
        """Pickled with its reason."""
        return (_unsafe_path, (str(self), self.problem, self.component))


def _unsafe_path(message: str, problem: PathProblem, component: str | None) -> UnsafePath:
    return UnsafePath(message, problem=problem, component=component)


@contextlib.contextmanager
def closed_on_error(fd: int) -> Iterator[int]:
    """``fd`` for the block; closed when the block raises anything (Ctrl-C included), and the error goes on.

    The cleanup of a close-and-re-raise handler, without a handler that catches everything.
    """
    with contextlib.ExitStack() as undo:
        undo.callback(os.close, fd)
        yield fd
        undo.pop_all()


def _describe_open_error(path: str, err: OSError) -> UnsafePath:
    if err.errno == errno.ELOOP:  # O_NOFOLLOW met a symlink
        return UnsafePath(f"{path} is a symbolic link; gpulens does not follow links here",
                          problem=PathProblem.SYMLINK, component=path)
    if err.errno == errno.ENOTDIR:  # also what O_DIRECTORY | O_NOFOLLOW gives for a symlink
        if os.path.islink(path):
            return UnsafePath(f"{path} is a symbolic link; gpulens does not follow links here",
                              problem=PathProblem.SYMLINK, component=path)
        return UnsafePath(f"{path} is not a directory", problem=PathProblem.NOT_A_DIRECTORY, component=path)
    return UnsafePath(f"{path}: {err.strerror or err}", problem=PathProblem.of_os_error(err), component=path)


def open_dir(path: str | Path) -> int:
    """Open an absolute directory path without following a symlink in any component.

    Returns a directory file descriptor (the caller closes it).

    Raises:
        UnsafePath: a component is a symlink or not a directory, or cannot be opened.
    """
    return _walk(path, None)


def _walk(path: str | Path, owners: tuple[int, ...] | None) -> int:
    """Open an absolute directory component by component from ``/`` with ``O_NOFOLLOW``; with ``owners``,
    every directory on the way (``/`` included) must pass :func:`check_dir` against them (shared if sticky)."""
    text = os.fspath(path)
    if not text.startswith("/"):
        raise UnsafePath(f"{text}: expected an absolute path", problem=PathProblem.NOT_ABSOLUTE, component=text)
    fd = os.open("/", _DIR_FLAGS)
    walked = ""
    done = False
    try:
        if owners is not None:
            check_dir(fd, "/", owners=owners, shared_ok=True)
        for part in [p for p in text.split("/") if p and p != "."]:
            if part == "..":
                raise UnsafePath(f"{text}: '..' is not allowed here", problem=PathProblem.BAD_NAME, component=text)
            walked += "/" + part
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as err:
                raise _describe_open_error(walked, err) from err
            os.close(fd)
            fd = nxt
            if owners is not None:
                check_dir(fd, walked, owners=owners, shared_ok=True)
        done = True
    finally:
        if not done:  # anything raised, Ctrl-C included: the directory open now is closed
            os.close(fd)
    return fd


@contextlib.contextmanager
def opened_dir(path: str | Path) -> Iterator[int]:
    """``open_dir`` as a context manager."""
    fd = open_dir(path)
    try:
        yield fd
    finally:
        os.close(fd)


def open_trusted_dir(path: str | Path, owners: tuple[int, ...]) -> int:
    """Open an absolute directory that nobody outside ``owners`` can change the meaning of.

    Walked from ``/`` by descriptor: every component, ``/`` and the last one
    included, must be a real directory (no symlink) owned by one of ``owners``
    and not writable by group or others unless sticky (like /tmp, where only
    an entry's owner may rename it). Returns the directory's fd.

    Raises:
        UnsafePath: naming the first component that fails; a missing one has problem
            ``PathProblem.MISSING`` (and ``FileNotFoundError`` as its ``__cause__``).
    """
    return _walk(path, owners)


def check_dir(fd: int, path: str, *, owners: tuple[int, ...], shared_ok: bool) -> os.stat_result:
    """Check an opened directory: owned by one of ``owners``; group/other-writable only if sticky
    and ``shared_ok`` (like /tmp). Returns its stat.

    Raises:
        UnsafePath: wrong owner or mode.
    """
    st = os.fstat(fd)
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePath(f"{path} is not a directory", problem=PathProblem.NOT_A_DIRECTORY, component=path)
    if st.st_uid not in owners:
        raise UnsafePath(
            f"{path} belongs to uid {st.st_uid}, not to uid {' or '.join(map(str, owners))}; "
            "gpulens will not use a directory another user made",
            problem=PathProblem.WRONG_OWNER, component=path,
        )
    writable_by_others = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if writable_by_others and not (shared_ok and st.st_mode & stat.S_ISVTX):
        raise UnsafePath(
            f"{path} has mode {stat.S_IMODE(st.st_mode):04o}: writable by other users; "
            "gpulens needs a directory only its owner can change",
            problem=PathProblem.WRITABLE_BY_OTHERS, component=path,
        )
    return st


def ensure_dir_at(parent_fd: int, name: str, mode: int, *, parent_path: str = "") -> int:
    """Open ``name`` under ``parent_fd`` as our own directory with exactly ``mode``, creating it.

    An existing entry is accepted only when it is a real directory owned by
    this process's euid; its mode is then set to ``mode`` with ``fchmod``
    (whatever the umask was at creation). Returns the directory's fd.

    Raises:
        UnsafePath: a symlink, not a directory, or another user's.
    """
    shown = f"{parent_path.rstrip('/')}/{name}"
    if "/" in name or name in ("", ".", ".."):
        raise UnsafePath(f"{shown}: not a plain name", problem=PathProblem.BAD_NAME, component=shown)
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o700, dir_fd=parent_fd)
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except OSError as err:
        raise _describe_open_error(shown, err) from err
    with closed_on_error(fd):
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            raise UnsafePath(
                f"{shown} belongs to uid {st.st_uid}, not to this process (uid {os.geteuid()}); "
                "remove it or choose another directory",
                problem=PathProblem.WRONG_OWNER, component=shown,
            )
        os.fchmod(fd, mode)
    return fd


def make_unique_dir(parent_fd: int, prefix: str, mode: int) -> tuple[str, int]:
    """Create a fresh directory ``PREFIX<random>`` under ``parent_fd``; returns (name, fd).

    The name carries 128 random bits, so no other user can plant anything at
    it in advance; ``mkdir`` fails rather than reuses an existing entry.
    """
    for _ in range(8):
        name = f"{prefix}{secrets.token_hex(16)}"
        try:
            os.mkdir(name, 0o700, dir_fd=parent_fd)
        except FileExistsError:
            continue
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
        with closed_on_error(fd):
            st = os.fstat(fd)
            if st.st_uid != os.geteuid():  # swapped between mkdir and open
                raise UnsafePath(f"{name}: replaced by uid {st.st_uid} while being created",
                                 problem=PathProblem.REPLACED, component=name)
            os.fchmod(fd, mode)
        return name, fd
    raise UnsafePath("could not create a fresh directory (8 random names taken)",
                     problem=PathProblem.NO_FRESH_NAME, component=None)


def open_regular_at(dir_fd: int | None, path: str | Path, *, owner: int | None, max_bytes: int) -> int:
    """Open a file for reading only if it is a regular file (owned by ``owner``, when given).

    ``O_NOFOLLOW`` refuses a symlink as the last component, ``O_NONBLOCK``
    makes a FIFO or device fail the check instead of blocking the open, and
    ``fstat`` of the opened descriptor decides. ``dir_fd`` None: ``path`` is
    relative to the working directory or absolute. Returns a blocking fd.

    Raises:
        UnsafePath: a symlink, not a regular file, another user's, or over ``max_bytes``.
    """
    shown = os.fspath(path)
    try:
        fd = os.open(path, _FILE_FLAGS, dir_fd=dir_fd)
    except OSError as err:
        raise _describe_open_error(shown, err) from err
    with closed_on_error(fd):
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePath(f"{shown} is not a regular file (a FIFO, device, socket or directory)",
                             problem=PathProblem.NOT_REGULAR, component=shown)
        if owner is not None and st.st_uid != owner:
            raise UnsafePath(f"{shown} belongs to uid {st.st_uid}, not to uid {owner}; not read",
                             problem=PathProblem.WRONG_OWNER, component=shown)
        if st.st_size > max_bytes:
            raise UnsafePath(f"{shown} is {st.st_size} bytes; the limit is {max_bytes}",
                             problem=PathProblem.TOO_LARGE, component=shown)
        os.set_blocking(fd, True)
    return fd


def write_new_file(path: str | Path, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` atomically through a fresh, unpredictable temporary name (:func:`new_file`)."""
    with new_file(path, mode) as f:
        f.write(data)


@contextlib.contextmanager
def new_file(path: str | Path, mode: int = 0o644) -> Iterator[BinaryIO]:
    """A file written in the block and renamed over ``path`` when it ends; nothing is left if it raises.

    It is written under a fresh, unpredictable temporary name beside ``path``,
    created with ``O_EXCL | O_NOFOLLOW``: never an existing file or a link
    another user planted.
    """
    p = Path(path)
    tmp = p.with_name(f".{p.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    with contextlib.ExitStack() as undo:  # anything raised, Ctrl-C included: the temporary file goes
        undo.callback(_unlink_quietly, tmp)
        with os.fdopen(fd, "wb") as f:
            yield f
        os.replace(tmp, p)
        undo.pop_all()


def _unlink_quietly(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
