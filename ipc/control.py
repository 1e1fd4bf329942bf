"""The agent's local control socket: ``gpulens trace`` on the same host reaches the agent here.

When ``gpulens agent`` owns the Kineto daemon name, a local ``gpulens trace``
cannot bind it; it sends its request to that agent instead. The agent
listens on an abstract Unix socket named after its user and the Kineto
address it serves::

    \\0gpulens-control-<uid>-<sha256(kineto address)[:16]>

and speaks the ordinary stream protocol there (docs/protocol.md), without a
token: the kernel tells each side who the other is (``SO_PEERCRED``), and
each peer acts for its own uid only (a :class:`~gpulens.ipc.principal.Principal`
``peercred``): it may trace or profile its own processes, root's anyone's.
A root agent therefore accepts peers of any uid (that is how an ordinary
user's ``gpulens trace`` reaches the node's root agent), at most
``MAX_PER_UID`` connections per uid and ``MAX_CONTROL_CONNECTIONS`` in
all; an agent of another user accepts only its own uid and root. The
client accepts only an agent of its own uid (or root) whose pid is the one
holding the Kineto name. An abstract name needs no directory (so nothing
to clean up after a crash, no ``$XDG_RUNTIME_DIR`` disagreements between
a service and a shell); anyone could squat it, which the peer checks turn
into a clear refusal, never into talking to the wrong process, and the
agent warns naming the squatter (:func:`describe_holder`).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import socket
import struct
import threading
from collections.abc import Callable
from pathlib import Path

from gpulens.core.procfs import unix_socket_holder
from gpulens.core.threads import start_thread, stop_thread
from gpulens.ipc.kineto.endpoint import resolve_socket_dir
from gpulens.ipc.principal import Principal, peer
from gpulens.ipc.refusal import NoSlot, NoSlotKind
from gpulens.ipc.transport import SocketTransport, Transport

log = logging.getLogger("gpulens.agent")

_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
MAX_CONTROL_CONNECTIONS = 32
MAX_PER_UID = 4
"""Control connections one uid may hold at once, so no user locks the others out."""


def kineto_key(socket_dir: str | None) -> str:
    """The Kineto address both sides agree on: ``abstract`` or the real path of ``DIR/dynolog``.

    ``socket_dir`` follows :func:`~gpulens.ipc.kineto.endpoint.resolve_socket_dir`
    (None: ``$KINETO_IPC_SOCKET_DIR``, "" or unset: the abstract name).
    """
    resolved = resolve_socket_dir(socket_dir)
    if resolved is None:
        return "abstract"
    return os.path.join(os.path.realpath(resolved), "dynolog")


def control_name(socket_dir: str | None, uid: int | None = None) -> bytes:
    """Abstract socket address (leading NUL) of the control socket for this Kineto address and uid."""
    uid = os.geteuid() if uid is None else uid
    digest = hashlib.sha256(kineto_key(socket_dir).encode()).hexdigest()[:16]
    return f"\0gpulens-control-{uid}-{digest}".encode()


def peer_cred(sock: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process at the other end of a connected Unix socket."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    pid, uid, _gid = _UCRED.unpack(raw)
    return pid, uid


def peer_allowed(peer_uid: int, my_uid: int) -> bool:
    """A control peer must be the same user, or root (root may act for anyone)."""
    return peer_uid == my_uid or peer_uid == 0


def listener_accepts(peer_uid: int, my_uid: int) -> bool:
    """Whom an agent of ``my_uid`` serves here: a root agent everyone (each for itself), others their user and root."""
    return my_uid == 0 or peer_allowed(peer_uid, my_uid)


def who_holds(name: bytes, proc: Path = Path("/proc")) -> tuple[int, int | None, str] | None:
    """(pid, uid, comm) of a process holding the abstract Unix socket ``name``, when /proc tells us."""
    return unix_socket_holder(name.decode(errors="replace").replace("\0", "@"), proc)


def describe_holder(name: bytes) -> str:
    """``"; held by pid P (uid U, comm)"`` for a bind warning, or a note that the holder is unknown."""
    held = who_holds(name)
    if held is None:
        return "; another process holds the name (not found in /proc)"
    pid, uid, comm = held
    whose = f"uid {uid}" if uid is not None else "unknown uid"
    return f"; held by pid {pid} ({whose}, {comm}): local 'gpulens trace' cannot reach this agent"


ServeFn = Callable[[Transport, str, Principal], None]


class ControlListener:
    """Accepts local viewers on the control socket and hands each to ``serve(transport, peer)``.

    ``serve(transport, peer, principal)`` runs in a thread per connection
    (the agent's ``serve_connection``, no token: the principal is the
    peer's uid). Peers this agent does not serve, and a uid over its cap,
    are closed at once and logged.
    """

    def __init__(self, socket_dir: str | None, serve: ServeFn) -> None:
        self.name = control_name(socket_dir)
        self._serve = serve
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._active: dict[int, int] = {}
        self._lock = threading.Lock()

    @property
    def address(self) -> str:
        """Human form (``@`` for the leading NUL, as in /proc/net/unix)."""
        return "@" + self.name[1:].decode()

    def start(self) -> None:
        """Bind and accept in a thread.

        Raises:
            OSError: the name is taken (another agent of this user serves the same Kineto address).
        """
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(self.name)
            sock.listen(8)
        except OSError:
            sock.close()
            raise
        sock.settimeout(0.5)
        self._sock = sock
        self._thread = start_thread(self._accept, "gpulens-control")

    def stop(self) -> None:
        """Stop accepting (connections being served end with the agent); the name is free on return."""
        self._stop.set()
        if self._sock is not None and self._thread is not None:
            waker = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # the accept returns at once
            with contextlib.suppress(OSError):
                waker.settimeout(0.2)
                waker.connect(self.name)
            waker.close()
        stop_thread(self._stop, self._thread)
        self._thread = None
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None

    def _accept(self) -> None:
        assert self._sock is not None
        me = os.geteuid()
        while not self._stop.is_set():
            try:
                client, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError as err:
                if self._stop.is_set():
                    return
                log.warning("control socket accept failed: %s", err)
                self._stop.wait(0.1)
                continue
            if self._stop.is_set():  # stop()'s wake-up (or a peer just too late)
                client.close()
                return
            try:
                pid, uid = peer_cred(client)
            except OSError:
                client.close()
                continue
            why = self._reserve(uid, me)
            if why is not None:
                log.warning("control socket: refusing pid %d: %s", pid, why)
                client.close()
                continue
            threading.Thread(
                target=self._run, args=(client, f"local pid {pid} (uid {uid})", uid),
                name=f"gpulens-control-{pid}", daemon=True,
            ).start()

    def _reserve(self, uid: int, me: int) -> NoSlot | None:
        """Take a connection slot for ``uid`` (None), or why not (logged by the accept loop)."""
        if not listener_accepts(uid, me):
            return NoSlot(NoSlotKind.NOT_SERVED, uid=uid, me=me)
        with self._lock:
            if sum(self._active.values()) >= MAX_CONTROL_CONNECTIONS:
                return NoSlot(NoSlotKind.LOCAL_FULL, MAX_CONTROL_CONNECTIONS)
            if self._active.get(uid, 0) >= MAX_PER_UID:
                return NoSlot(NoSlotKind.LOCAL_PER_UID, MAX_PER_UID, uid=uid)
            self._active[uid] = self._active.get(uid, 0) + 1
        return None

    def _run(self, client: socket.socket, peer_name: str, uid: int) -> None:
        try:
            self._serve(SocketTransport(client), peer_name, peer(uid))
        finally:
            with self._lock:
                n = self._active.get(uid, 1) - 1
                if n <= 0:
                    self._active.pop(uid, None)
                else:
                    self._active[uid] = n
