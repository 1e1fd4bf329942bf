"""The agent's local control socket: ``gpulens trace`` on the same host reaches the agent here.

When ``gpulens agent`` owns the Kineto daemon name, a local ``gpulens trace``
cannot bind it; it sends its request to that agent instead. The agent
listens on an abstract Unix socket named after its user and the Kineto
address it serves::

    \\0gpulens-control-<uid>-<sha256(kineto address)[:16]>

and speaks the ordinary stream protocol there (docs/protocol.md), without a
token: the kernel tells each side who the other is (``SO_PEERCRED``). The
agent accepts only peers of its own uid (or root); the client accepts only
an agent of its own uid (or root) whose pid is the one holding the Kineto
name. An abstract name needs no directory (so nothing to clean up after a
crash, no ``$XDG_RUNTIME_DIR`` disagreements between a service and a
shell); anyone could squat it, which the peer checks turn into a clear
refusal, never into talking to the wrong process.
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

from .agent_conn import SocketTransport, Transport
from .endpoint import resolve_socket_dir

log = logging.getLogger("gpulens.agent")

_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
MAX_CONTROL_CONNECTIONS = 16


def kineto_key(socket_dir: str | None) -> str:
    """The Kineto address both sides agree on: ``abstract`` or the real path of ``DIR/dynolog``.

    ``socket_dir`` follows :func:`~gpulens.ipc.endpoint.resolve_socket_dir`
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


ServeFn = Callable[[Transport, str], None]


class ControlListener:
    """Accepts local viewers on the control socket and hands each to ``serve(transport, peer)``.

    ``serve`` runs in a thread per connection (the agent's
    ``serve_connection`` with no token). Peers of another uid are closed at
    once and logged.
    """

    def __init__(self, socket_dir: str | None, serve: ServeFn) -> None:
        self.name = control_name(socket_dir)
        self._serve = serve
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._active = 0
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
        self._thread = threading.Thread(target=self._accept, name="gpulens-control", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop accepting (connections being served end with the agent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
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
            try:
                pid, uid = peer_cred(client)
            except OSError:
                client.close()
                continue
            with self._lock:
                full = self._active >= MAX_CONTROL_CONNECTIONS
            if not peer_allowed(uid, me) or full:
                why = "too many local viewers" if full else f"uid {uid} is not this agent's user (uid {me})"
                log.warning("control socket: refusing pid %d: %s", pid, why)
                client.close()
                continue
            client.settimeout(None)
            with self._lock:
                self._active += 1
            threading.Thread(
                target=self._run, args=(client, f"local pid {pid}"), name=f"gpulens-control-{pid}", daemon=True
            ).start()

    def _run(self, client: socket.socket, peer: str) -> None:
        try:
            self._serve(SocketTransport(client), peer)
        finally:
            with self._lock:
                self._active -= 1
