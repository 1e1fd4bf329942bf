"""The Kineto socket directory (``KINETO_IPC_SOCKET_DIR``), opened safely for root and users alike.

Walked one component at a time from ``/`` by descriptor (docs/security.md,
"The Kineto socket directory"): every directory passed and every symlink
followed must be root's or ours, none writable by others unless sticky.
"""

from __future__ import annotations

import logging
import os
import stat

from gpulens.core.safefs import UnsafePath, check_dir

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
    walked: list[str] = []
    hops = 0
    made: str | None = None  # the path this call just created, if any
    try:
        check_dir(stack[-1], "/", owners=owners, shared_ok=True)
        while parts:
            name = parts.pop(0)
            if name == "..":
                if len(stack) > 1:
                    os.close(stack.pop())
                    walked.pop()
                continue
            here = "/" + "/".join([*walked, name])
            try:
                st = os.stat(name, dir_fd=stack[-1], follow_symlinks=False)
            except FileNotFoundError:
                try:
                    os.mkdir(name, 0o700, dir_fd=stack[-1])
                    made = here
                except FileExistsError:  # made meanwhile by someone: looked at again, checked
                    pass
                parts.insert(0, name)
                hops += 1
                if hops > MAX_LINK_HOPS:
                    raise UnsafePath(f"{here} keeps changing while gpulens creates it") from None
                continue
            if stat.S_ISLNK(st.st_mode):
                hops += 1
                if st.st_uid not in owners or hops > MAX_LINK_HOPS:
                    raise UnsafePath(
                        f"{here} is a symbolic link of uid {st.st_uid} (or too many links); "
                        "gpulens follows only root's or its own links to the socket directory"
                    )
                target = os.readlink(name, dir_fd=stack[-1])
                if target.startswith("/"):
                    while len(stack) > 1:
                        os.close(stack.pop())
                    walked.clear()
                parts[:0] = [p for p in target.split("/") if p and p != "."]
                continue
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=stack[-1])
            except OSError as err:
                raise UnsafePath(f"{here} is not a directory gpulens can use: {err.strerror}") from err
            stack.append(fd)
            walked.append(name)
            if made == here and os.fstat(fd).st_uid == euid:
                os.fchmod(fd, mode if not parts else 0o755)
            check_dir(fd, here, owners=owners, shared_ok=True)
        final = os.fstat(stack[-1])
        if euid == 0 and made != "/" + "/".join(walked) and not final.st_mode & stat.S_IWOTH:
            (log.debug if (final.st_dev, final.st_ino) in _WARNED_DIRS else log.warning)(  # once, not every retry
                "socket dir %s has mode %04o: programs of other users cannot create their client "
                "sockets there (gpulens creates it as 1733)", directory, stat.S_IMODE(final.st_mode),
            )
            _WARNED_DIRS.add((final.st_dev, final.st_ino))
        return stack.pop()
    finally:
        for fd in stack:
            os.close(fd)
