"""Files a request's result brings back from an agent, written chunk by chunk.

Each pending request of a :class:`~gpulens.sources.stream.requests.RequestTable`
(the one table every viewer link uses, sources/stream/requests.py) writes
its files here. What an agent may make us write (docs/security.md):

- names match :data:`SAFE_NAME` (no path, no ``..``), and the peer's host
  name only ever becomes a sanitised prefix;
- at most :data:`MAX_FILES_PER_REQUEST` files and :data:`MAX_DOWNLOAD_BYTES`
  bytes per request; chunks in order;
- each file is created new (``O_CREAT | O_EXCL | O_NOFOLLOW``, mode 0600)
  relative to the opened download directory, which must be ours or root's
  and not writable by others unless sticky: an existing file or a planted
  symlink is never overwritten or followed (a taken name gets a ``-N``
  infix instead);
- on any failure (a bad chunk, a timeout, a lost connection, an error
  answer) :meth:`PendingRequest.abort` closes and deletes every file of the
  request; on success :meth:`PendingRequest.finish` keeps the complete
  files and deletes any the agent left unfinished.

Breaking the protocol raises ProtocolError (the session ends); a local
failure to save (disk full, unusable directory) raises :class:`SaveFailed`,
which fails only that request.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpulens.core.safefs import UnsafePath, check_dir
from gpulens.ipc.errors import ProtocolError, ProtocolProblem, RequestFailed
from gpulens.ipc.stream import FileChunk

MAX_DOWNLOAD_BYTES = 4 * 1024**3
"""Bytes one request may bring back, all its files together."""
MAX_FILES_PER_REQUEST = 64
"""Files one request may bring back (a trace of a 64-rank job fits)."""
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,200}")
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_TAKEN_TRIES = 100


class SaveFailed(RequestFailed):
    """A file the agent sent could not be saved here (disk full, unusable directory)."""


@dataclass
class _File:
    name: str
    """The name on disk, inside the download directory."""
    path: Path
    fd: int
    offset: int = 0
    done: bool = False


class PendingRequest:
    """A request awaiting its response: its future, samples and files so far (thread-safe)."""

    def __init__(self, future: Future[Any]) -> None:
        self.future = future
        self.samples: list[Any] = []
        self.bytes = 0
        self._files: dict[str, _File] = {}
        self._dir_fd: int | None = None
        self._closed = False
        self._lock = threading.Lock()

    def write_chunk(self, msg: FileChunk, base: Path, prefix: str) -> None:
        """Append ``msg`` to its file under ``base`` (``PREFIX-NAME``); ignored once finished or aborted.

        Raises:
            ProtocolError: an unsafe name, a chunk out of order, too many files or bytes.
            SaveFailed: the file cannot be created or written here.
        """
        if not SAFE_NAME.fullmatch(msg.name) or ".." in msg.name:
            raise ProtocolError(f"unsafe file name from the agent: {msg.name[:60]!r}", problem=ProtocolProblem.UNSAFE_NAME)
        with self._lock:
            if self._closed:
                return
            entry = self._files.get(msg.name)
            if entry is None:
                if len(self._files) >= MAX_FILES_PER_REQUEST:
                    raise ProtocolError(
                        f"request {msg.id}: the agent sent more than {MAX_FILES_PER_REQUEST} files; "
                        f"the viewer accepts at most {MAX_FILES_PER_REQUEST} per request",
                        problem=ProtocolProblem.ANSWER_TOO_LARGE,
                    )
                entry = self._files[msg.name] = self._create(msg.name, base, prefix)
            if entry.done or msg.offset != entry.offset:
                raise ProtocolError(f"file chunk for {msg.name!r} out of order", problem=ProtocolProblem.OUT_OF_ORDER)
            self.bytes += len(msg.data)
            if self.bytes > MAX_DOWNLOAD_BYTES:
                raise ProtocolError(f"request {msg.id} sent more than {MAX_DOWNLOAD_BYTES} bytes",
                                    problem=ProtocolProblem.ANSWER_TOO_LARGE)
            try:
                view = memoryview(msg.data)
                while view:
                    view = view[os.write(entry.fd, view) :]
            except OSError as err:
                raise SaveFailed(f"cannot write {entry.path}: {err.strerror or err}") from err
            entry.offset += len(msg.data)
            if msg.last:
                entry.done = True
                os.close(entry.fd)
                entry.fd = -1

    def _create(self, name: str, base: Path, prefix: str) -> _File:
        dir_fd = self._open_base(base)
        # The prefix may come from the peer (its host name): it must never shape the path.
        safe_prefix = re.sub(r"[^A-Za-z0-9_-]", "_", prefix)[:64]
        for n in range(_TAKEN_TRIES):
            fname = f"{safe_prefix}-{name}" if n == 0 else f"{safe_prefix}-{n}-{name}"
            try:
                fd = os.open(fname, _CREATE, 0o600, dir_fd=dir_fd)
            except FileExistsError:
                continue  # an earlier download, or something planted: never reused
            except OSError as err:
                raise SaveFailed(f"cannot create {base / fname}: {err.strerror or err}") from err
            return _File(fname, base / fname, fd)
        raise SaveFailed(f"cannot save {name!r} under {base}: {_TAKEN_TRIES} names already taken")

    def _open_base(self, base: Path) -> int:
        if self._dir_fd is not None:
            return self._dir_fd
        try:
            base.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as err:
            raise SaveFailed(f"cannot use the download directory {base}: {err.strerror or err}") from err
        try:
            check_dir(fd, str(base), owners=(os.geteuid(), 0), shared_ok=True)
        except UnsafePath as err:
            os.close(fd)
            raise SaveFailed(f"download directory refused: {err}") from err
        self._dir_fd = fd
        return fd

    def finish(self) -> dict[str, Path]:
        """End the request: the complete files by the agent's names; unfinished ones are deleted."""
        with self._lock:
            self._closed = True
            kept = {agent_name: f.path for agent_name, f in self._files.items() if f.done}
            self._release(delete_all=False)
        return kept

    def abort(self) -> None:
        """Close and delete every file of this request; later chunks are ignored. Idempotent."""
        with self._lock:
            self._closed = True
            self._release(delete_all=True)

    def _release(self, *, delete_all: bool) -> None:
        for f in self._files.values():
            if f.fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(f.fd)
                f.fd = -1
            if (delete_all or not f.done) and self._dir_fd is not None:
                with contextlib.suppress(OSError):
                    os.unlink(f.name, dir_fd=self._dir_fd)
        if delete_all or any(not f.done for f in self._files.values()):
            self._files = {k: f for k, f in self._files.items() if f.done and not delete_all}
        if self._dir_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._dir_fd)
            self._dir_fd = None
