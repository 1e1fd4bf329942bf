"""The Kineto socket directory (``KINETO_IPC_SOCKET_DIR``), opened safely for root and users alike.

Walked one component at a time from ``/`` by descriptor (docs/security.md,
"The Kineto socket directory"): every directory passed and every symlink
followed must be root's or ours, none writable by others unless sticky.
"""

from __future__ import annotations

import logging
import os
import stat

from gpulens.core.safefs import PathProblem, UnsafePath, check_dir

log = logging.getLogger("gpulens.ipc.kineto.endpoint")

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
MAX_LINK_HOPS = 40
_WARNED_DIRS: set[tuple[int, int]] = set()
"""Socket directories whose mode was warned about (an agent retrying the name warns once)."""


def open_socket_dir(directory: str, mode: int) -> int:
    """Open the socket directory (creating what is missing); returns its fd.

    Walked one component at a time from ``/``: every directory passed and
    every symlink followed must belong to root or to us, and no directory may
    be writable by group/other unless sticky (so nobody else can rename
    anything on the way, or take over the socket's name). Directories it
    creates get their mode by ``fchmod`` whatever the umask: 0755 on the way,
    ``mode`` for the last.

    Raises:
        UnsafePath: naming the component and what is wrong with it.
    """
    euid = os.geteuid()
    owners = tuple(sorted({0, euid}))
    parts = [p for p in os.path.abspath(directory).split("/") if p]
    stack = [os.open("/", _DIR_FLAGS)]
    walk = _Walk(owners, parts, stack)
    try:
        check_dir(stack[-1], "/", owners=owners, shared_ok=True)
        while parts:
            name = parts.pop(0)
            if name == "..":
                walk.up()
                continue
            here = "/" + "/".join([*walk.walked, name])
            try:
                st = os.stat(name, dir_fd=stack[-1], follow_symlinks=False)
            except FileNotFoundError:
                walk.create(name, here)
                continue
            if stat.S_ISLNK(st.st_mode):
                walk.follow(name, here, st)
                continue
            walk.enter(name, here, mode if not parts else 0o755, euid)
        _warn_mode(directory, euid, walk.made != "/" + "/".join(walk.walked), stack[-1])
        return stack.pop()
    finally:
        for fd in stack:
            os.close(fd)


class _Walk:
    """Where :func:`open_socket_dir` is: the descriptors of the directories passed (``/`` first) and their
    names, the components still to walk, the links followed (and names re-looked at), what it created."""

    def __init__(self, owners: tuple[int, ...], parts: list[str], stack: list[int]) -> None:
        self.owners = owners
        self.parts = parts
        self.stack = stack
        self.walked: list[str] = []
        self.hops = 0
        self.made: str | None = None  # the path this call just created, if any

    def up(self) -> None:
        """``..``: back to the directory before (never above ``/``)."""
        if len(self.stack) > 1:
            os.close(self.stack.pop())
            self.walked.pop()

    def create(self, name: str, here: str) -> None:
        """``name`` is missing: create it (0700 until checked) and look at it again."""
        try:
            os.mkdir(name, 0o700, dir_fd=self.stack[-1])
            self.made = here
        except FileExistsError:  # made meanwhile by someone: looked at again, checked
            pass
        self.parts.insert(0, name)
        self.hops += 1
        if self.hops > MAX_LINK_HOPS:
            raise UnsafePath(f"{here} keeps changing while gpulens creates it",
                             problem=PathProblem.REPLACED, component=here) from None

    def follow(self, name: str, here: str, st: os.stat_result) -> None:
        """A symlink: followed only when it is root's or ours (and not too many); an absolute one from ``/``."""
        self.hops += 1
        if st.st_uid not in self.owners or self.hops > MAX_LINK_HOPS:
            raise UnsafePath(
                f"{here} is a symbolic link of uid {st.st_uid} (or too many links); "
                "gpulens follows only root's or its own links to the socket directory",
                problem=PathProblem.SYMLINK, component=here,
            )
        target = os.readlink(name, dir_fd=self.stack[-1])
        if target.startswith("/"):
            while len(self.stack) > 1:
                os.close(self.stack.pop())
            self.walked.clear()
        self.parts[:0] = [p for p in target.split("/") if p and p != "."]

    def enter(self, name: str, here: str, mode: int, euid: int) -> None:
        """Open directory ``name`` (no link followed), give it ``mode`` if this call made it, and check it."""
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=self.stack[-1])
        except OSError as err:
            raise UnsafePath(f"{here} is not a directory gpulens can use: {err.strerror}",
                             problem=PathProblem.of_os_error(err), component=here) from err
        self.stack.append(fd)
        self.walked.append(name)
        if self.made == here and os.fstat(fd).st_uid == euid:
            os.fchmod(fd, mode)
        check_dir(fd, here, owners=self.owners, shared_ok=True)


def _warn_mode(directory: str, euid: int, found: bool, fd: int) -> None:
    """Root using a socket directory it ``found`` (did not make) that others cannot write to: say so, once."""
    final = os.fstat(fd)
    if euid == 0 and found and not final.st_mode & stat.S_IWOTH:
        (log.debug if (final.st_dev, final.st_ino) in _WARNED_DIRS else log.warning)(  # once, not every retry
            "socket dir %s has mode %04o: programs of other users cannot create their client "
            "sockets there (gpulens creates it as 1733)", directory, stat.S_IMODE(final.st_mode),
        )
        _WARNED_DIRS.add((final.st_dev, final.st_ino))
