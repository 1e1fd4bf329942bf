"""gpulens' log file, safe to keep in a directory other users can write (``/tmp``).

The agent runs as root beside ordinary users, and ``--log-file`` may name a
file in ``/tmp``. So the file is reached and changed only through a held
descriptor of its directory, never through a name looked up twice:

- the directory is opened from ``/`` without following a link
  (:func:`gpulens.core.safefs.open_dir`) and must belong to root or to us;
  if group or others can write it, it must be sticky (like ``/tmp``: only an
  entry's owner may rename or remove it);
- the file is opened ``O_APPEND|O_NOFOLLOW|O_NONBLOCK`` at that descriptor
  and kept only if ``fstat`` says it is a regular file of our euid with one
  link: another user's file, a FIFO (which would block the open or the
  writes), a device, a symlink or a hard link to someone's file is refused
  with an :class:`~gpulens.core.safefs.UnsafePath` naming why;
- rotation (at ``max_bytes``, one old copy ``NAME.1``) creates the new file
  ``O_EXCL`` under an unguessable name, checks it the same way, renames the
  old file to ``NAME.1`` and the new one over ``NAME`` (a rename replaces a
  planted link or FIFO, never opens it), and only then swaps descriptors.
  If any step fails the old, verified descriptor stays in use: the handler
  never holds a closed descriptor number that a later socket could reuse.
  It then stops rotating, truncates the open file in place at ``max_bytes``
  instead, and says so once (``warn``).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path

from gpulens.core.safefs import PathProblem, UnsafePath, check_dir, closed_on_error, open_dir
from gpulens.core.sanitize import clean_text

_OPEN = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_NEW = _OPEN | os.O_EXCL
MODE = 0o600


def _temp_name(name: str) -> str:
    """The new file's name until it is renamed into place: 64 random bits nobody can plant at."""
    return f".{name}.{secrets.token_hex(8)}.new"


def _check_file(st: os.stat_result, shown: str) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise UnsafePath(f"{shown} is not a regular file (a FIFO, device, socket or directory); "
                         "gpulens writes its log only to a regular file",
                         problem=PathProblem.NOT_REGULAR, component=shown)
    if st.st_uid != os.geteuid():
        raise UnsafePath(f"{shown} belongs to uid {st.st_uid}, not to this process (uid {os.geteuid()}); "
                         "gpulens appends only to a log file of its own: remove it or choose another name",
                         problem=PathProblem.WRONG_OWNER, component=shown)
    if st.st_nlink != 1:
        raise UnsafePath(f"{shown} has {st.st_nlink} hard links; gpulens will not append to a file "
                         "that is also somewhere else", problem=PathProblem.HARD_LINKED, component=shown)


def _open_checked(dir_fd: int, name: str, shown: str, flags: int) -> int:
    """Open ``name`` at ``dir_fd``; a blocking fd of our own regular file, or UnsafePath."""
    if not flags & os.O_EXCL:
        # Look first, so a FIFO or a device is refused without being opened at all.
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            pass
        else:
            if stat.S_ISLNK(st.st_mode):
                raise UnsafePath(f"{shown} is a symbolic link; gpulens does not follow links here",
                                 problem=PathProblem.SYMLINK, component=shown)
            _check_file(st, shown)
    try:
        fd = os.open(name, flags, MODE, dir_fd=dir_fd)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise UnsafePath(f"{shown} is a symbolic link; gpulens does not follow links here",
                             problem=PathProblem.SYMLINK, component=shown) from err
        raise UnsafePath(f"{shown}: {err.strerror or err}",
                         problem=PathProblem.of_os_error(err), component=shown) from err
    with closed_on_error(fd):
        _check_file(os.fstat(fd), shown)  # the object opened decides, whatever the name is now
        os.fchmod(fd, MODE)
        os.set_blocking(fd, True)
    return fd


def absolute(path: Path) -> Path:
    """``path`` made absolute against the working directory, without resolving links."""
    return path if path.is_absolute() else Path(os.getcwd()) / path


class SafeFileHandler(logging.Handler):
    """Appends records to a log file held by descriptor; rotates at ``max_bytes`` (module doc).

    Raises:
        UnsafePath: the directory or the file is unsafe or cannot be opened; the message names it.
    """

    def __init__(self, path: Path, max_bytes: int, *, warn: Callable[[str], None] | None = None) -> None:
        super().__init__()
        self.path = absolute(path)
        self.max_bytes = max_bytes
        self._warn = warn
        self._name = self.path.name
        if self._name in ("", ".", "..") or "\x00" in str(self.path):
            raise UnsafePath(f"{self.path}: not a file name",
                             problem=PathProblem.BAD_NAME, component=str(self.path))
        parent = str(self.path.parent)
        self._dir_fd = open_dir(parent)
        with closed_on_error(self._dir_fd):
            owners = tuple(sorted({0, os.geteuid()}))
            check_dir(self._dir_fd, parent, owners=owners, shared_ok=True)
            self._fd = _open_checked(self._dir_fd, self._name, str(self.path), _OPEN)
        self.degraded: str | None = None
        """Why rotation stopped (the file is then truncated in place); None while it works."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = clean_text(self.format(record)).replace("\n", " ") + "\n"
            data = line.encode("utf-8", "replace")
            if os.fstat(self._fd).st_size + len(data) > self.max_bytes:
                self._rotate()
            os.write(self._fd, data)
        except OSError:
            self.handleError(record)

    def fileno(self) -> int:
        """The descriptor written now (for tests and ``/proc`` checks)."""
        return self._fd

    def _rotate(self) -> None:
        if self.degraded is not None:
            os.ftruncate(self._fd, 0)
            os.write(self._fd, f"gpulens: log restarted: {self.degraded}\n".encode("utf-8", "replace"))
            return
        shown, old_copy = str(self.path), self._name + ".1"
        d = self._dir_fd
        temp = _temp_name(self._name)
        try:
            new_fd = _open_checked(d, temp, f"{self.path.parent}/{temp}", _NEW)
        except UnsafePath as err:
            self._degrade(f"cannot create a new log file next to {shown} ({err})", moved=False)
            return
        moved = False
        try:
            try:
                os.rename(self._name, old_copy, src_dir_fd=d, dst_dir_fd=d)
                moved = True
            except FileNotFoundError:
                pass  # removed by root or by us (logrotate): nothing to keep
            os.rename(temp, self._name, src_dir_fd=d, dst_dir_fd=d)
        except OSError as err:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=d)
            os.close(new_fd)
            self._degrade(f"cannot rotate {shown}: {err.strerror or err}", moved=moved)
            return
        old, self._fd = self._fd, new_fd  # swap first: the handler never holds a closed number
        os.close(old)

    def _degrade(self, why: str, *, moved: bool) -> None:
        where = f"{self.path}.1" if moved else str(self.path)
        self.degraded = (f"{why}; writing on to the file already open ({where}), "
                         f"truncated in place at {self.max_bytes:,} bytes")
        os.ftruncate(self._fd, 0)
        os.write(self._fd, f"gpulens: log restarted: {self.degraded}\n".encode("utf-8", "replace"))
        if self._warn is not None:
            self._warn(self.degraded)

    def close(self) -> None:
        self.acquire()  # not while another thread writes: its number must not be reused under it
        try:
            for fd in (self._fd, self._dir_fd):
                if fd >= 0:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            self._fd = self._dir_fd = -1
        finally:
            self.release()
        super().close()
