"""Opening a ``--record`` file for writing, link-safe (issue 27, item 1; issue 31, item 4).

A recording is often written by root into a shared directory (``/tmp``), on
kernels where ``fs.protected_symlinks`` and ``fs.protected_fifos`` are off.
So the file is never reached through a symlink, never a FIFO, device or
socket, and never another user's file:

- ``new`` (the default): created with ``O_CREAT | O_EXCL | O_NOFOLLOW``, mode
  0600. Any existing entry at the name (a file, a planted link, a FIFO)
  is refused with one line saying what is there and which flag continues
  or replaces it.
- ``append`` (``--append``): the existing file must be a regular file of
  ours (``O_NOFOLLOW | O_NONBLOCK`` then ``fstat`` of what was opened) and a
  gpulens recording of the same kind (SIMULATED or not); a record cut off by
  a crash is cut back to the last whole one, and new events follow, in the
  file's own format version (version 2: in a new block).
- ``overwrite`` (``--force``): the same checks, then truncated.

Errors are :class:`~gpulens.core.errors.ConfigError`, one line naming the path.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from typing import Literal

import msgpack

from gpulens.core.errors import ConfigError, ConfigProblem, RecordingError
from gpulens.core.safefs import closed_on_error
from gpulens.ipc.recording import UNPACK_LIMITS, VERSION, check_header
from gpulens.ipc.recording_blocks import MAX_FRAME_BYTES

RecordMode = Literal["new", "append", "overwrite"]
"""How ``--record`` treats an existing file: refuse it, continue it (``--append``), replace it (``--force``)."""

_RECORDING = "a gpulens recording to continue"
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_EXISTING = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass(frozen=True, slots=True)
class OpenedRecording:
    """A recording file opened for writing: its descriptor, positioned at its end.

    ``continued``: the header is already there (``append``) and must not be written again;
    ``size``: bytes kept of what was there (after cutting a partial last record).
    """

    fd: int
    continued: bool
    size: int
    cut: int = 0
    """Bytes of a partial last record that were cut away (append only)."""
    version: int = VERSION
    """The format version to write: a continued file's own (``VERSION`` for a new one)."""


def _what_is_there(st: os.stat_result) -> str:
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return f"a file of {st.st_size} bytes"


def _refused(path: str, problem: ConfigProblem, detail: str, expected: str = "a regular file of its own") -> ConfigError:
    """``--record PATH: DETAIL``, with the reason as a value."""
    return ConfigError(where=f"--record {path}", expected=expected, got=path, problem=problem, detail=detail)


def _refuse_existing(path: str) -> ConfigError:
    try:
        st = os.lstat(path)
    except OSError:
        return _refused(path, ConfigProblem.EXISTS, "the name is taken (it appeared while being created)",
                        "a name not taken")
    there = _what_is_there(st)
    if stat.S_ISREG(st.st_mode):
        return _refused(path, ConfigProblem.EXISTS,
                        f"exists ({there}); add --append to continue it or --force to replace it", "a name not taken")
    problem = ConfigProblem.UNSAFE if stat.S_ISLNK(st.st_mode) else ConfigProblem.NOT_REGULAR
    return _refused(path, problem, f"exists and is {there}; gpulens records only into a regular file of its own")


def _open_existing(path: str) -> int:
    """Open an existing recording for writing: a regular file of ours, never through a link, never blocking."""
    try:
        fd = os.open(path, _EXISTING)
    except OSError as err:
        if err.errno in (40, 6):  # ELOOP (O_NOFOLLOW met a link), ENXIO (a FIFO with no reader)
            raise _refuse_existing(path) from None
        if err.errno == 2:
            raise _refused(path, ConfigProblem.UNREADABLE,
                           "does not exist (nothing to continue; leave out --append)") from None
        problem = ConfigProblem.NOT_REGULAR if err.errno == errno.EISDIR else ConfigProblem.UNREADABLE
        raise _refused(path, problem, f"cannot open: {err.strerror}") from None
    with closed_on_error(fd):
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _refused(path, ConfigProblem.NOT_REGULAR,
                           f"is {_what_is_there(st)}; gpulens records only into a regular file")
        if st.st_uid != os.geteuid():
            raise _refused(path, ConfigProblem.UNSAFE, f"belongs to uid {st.st_uid}, not to this process (uid "
                           f"{os.geteuid()}); gpulens does not write into another user's file")
        os.set_blocking(fd, True)
    return fd


def _whole_records_end(fd: int, simulated: bool, path: str) -> tuple[int, int]:
    """Where the last whole record of the recording at ``fd`` ends, and its version; checks the header's kind.

    Raises:
        ConfigError: not a gpulens recording, or one of the other kind (SIMULATED or not).
    """
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=True, **UNPACK_LIMITS)
    os.lseek(fd, 0, os.SEEK_SET)
    end = version = 0
    first = True
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            break
        try:
            unpacker.feed(chunk)
        except msgpack.BufferFull:
            raise _refused(path, ConfigProblem.NOT_A_RECORDING, f"a record larger than {MAX_FRAME_BYTES} bytes: "
                           "not a recording gpulens can continue", _RECORDING) from None
        while True:
            try:
                obj = unpacker.unpack() if first else unpacker.skip()
            except msgpack.OutOfData:
                break
            except (ValueError, msgpack.UnpackException, TypeError) as err:
                raise _refused(path, ConfigProblem.NOT_A_RECORDING, f"corrupt after byte {end} ({err}): not continued",
                               _RECORDING) from None
            if first:
                try:
                    head = check_header(obj)
                except RecordingError as err:
                    raise _refused(path, ConfigProblem.NOT_A_RECORDING, f"{err}; not continued", _RECORDING) from None
                if bool(head.get("simulated")) != simulated:
                    kind = "a SIMULATED source" if head.get("simulated") else "real hosts"
                    raise _refused(path, ConfigProblem.CONFLICT, f"it records {kind}, this source is not; not "
                                   "continued (record into another file)", "a recording of this kind of source")
                first = False
                version = int(head["version"])
            end = unpacker.tell()
    if first:
        raise _refused(path, ConfigProblem.NOT_A_RECORDING, "not a gpulens recording (no header); not continued",
                       _RECORDING)
    return end, version


def open_for_recording(path: str, mode: RecordMode, *, simulated: bool) -> OpenedRecording:
    """Open ``path`` for a recording as ``mode`` says (see the module docstring).

    Raises:
        ConfigError: one line: what is at the name and which flag would continue or replace it,
            or why the file cannot be used.
    """
    if mode == "new":
        try:
            fd = os.open(path, _NEW, 0o600)
        except FileExistsError:
            raise _refuse_existing(path) from None
        except OSError as err:
            raise _refused(path, ConfigProblem.UNAVAILABLE, f"cannot create: {err.strerror}") from None
        return OpenedRecording(fd, continued=False, size=0)
    fd = _open_existing(path)
    with closed_on_error(fd):
        if mode == "overwrite":
            os.ftruncate(fd, 0)
            return OpenedRecording(fd, continued=False, size=0)
        end, version = _whole_records_end(fd, simulated, path)
        total = os.fstat(fd).st_size
        if end < total:
            os.ftruncate(fd, end)
        os.lseek(fd, end, os.SEEK_SET)
        return OpenedRecording(fd, continued=True, size=end, cut=total - end, version=version)
