"""TCP viewers: the listening socket, the accept loop and the pending-connection gate.

Every accepted connection takes a *pending* slot until it is admitted (TLS,
token and hello done) or gone. At most ``MAX_PENDING`` are pending at once;
a new one drops the oldest pending one, so a flood of idle sockets never
locks out a real viewer, and there is no thread beyond those. "Busy" is
decided by the admitted viewers only (the ``busy`` function the listener is
handed). Each connection gets one daemon thread, a deadline of
``HANDSHAKE_TIMEOUT_S`` for TLS, token and hello together, and is then
handed to ``serve`` -- the agent, which the listener knows only as that
function.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from gpulens.agent.sessions import HANDSHAKE_TIMEOUT_S, Refusal, ViewerConnection
from gpulens.ipc import stream
from gpulens.ipc.transport import SocketTransport, Transport

log = logging.getLogger("gpulens.agent")

MAX_PENDING = 16
"""TCP connections not yet through TLS, token and hello; a new one drops the oldest."""
SNDBUF_BYTES = 256 * 1024

ServeFn = Callable[[Transport, str, float, "PendingSlot"], None]
"""``serve(transport, peer, deadline, slot)``: serve one TCP viewer until it leaves (blocking)."""
BusyFn = Callable[[], "Refusal | None"]
"""Why no TCP viewer can be admitted now (None: one can)."""


class PendingSlot:
    """A pending TCP connection's slot: a duplicate of its socket, to shut it down from the accept thread.

    ``shutdown`` acts on the socket, not the descriptor, so it wakes the
    connection's thread wherever it blocks (TLS handshake included) without
    closing a descriptor that thread still uses. ``release`` (admitted, or
    gone) frees the slot.
    """

    def __init__(self, client: socket.socket, peer: str, on_release: Callable[[PendingSlot], None]) -> None:
        self.peer = peer
        self.conn: ViewerConnection | None = None
        """The connection being served on this socket, once there is one (for the drop reason)."""
        self._dup: socket.socket | None = client.dup()
        self._on_release = on_release
        self._lock = threading.Lock()

    def shut(self, reason: str = "agent stopping") -> None:
        """Wake and end the connection (idempotent)."""
        with self._lock:
            if self.conn is not None and not self.conn.reason:
                self.conn.reason = reason
            if self._dup is not None:
                with contextlib.suppress(OSError):
                    self._dup.shutdown(socket.SHUT_RDWR)
        self.release()

    def release(self) -> None:
        """No longer pending: leave the table and close the duplicate descriptor (the connection goes on)."""
        self._on_release(self)
        with self._lock:
            dup, self._dup = self._dup, None
        if dup is not None:
            with contextlib.suppress(OSError):
                dup.close()


class TcpListener:
    """Accepts TCP viewers, each with a pending slot and a thread, and hands them to ``serve``."""

    def __init__(self, serve: ServeFn, *, busy: BusyFn) -> None:
        self._serve = serve
        self._busy = busy
        self._pending: OrderedDict[PendingSlot, None] = OrderedDict()
        self._lock = threading.Lock()

    def run(self, sock: socket.socket, ssl_context: ssl.SSLContext | None, stop: threading.Event) -> None:
        """Accept viewers on a listening socket until ``stop`` is set (blocking)."""
        sock.settimeout(0.5)
        while not stop.is_set():
            try:
                client, addr = sock.accept()
            except TimeoutError:
                continue
            except OSError as err:
                log.warning("accept failed: %s", err)
                time.sleep(0.1)
                continue
            self.accept(client, f"{addr[0]}:{addr[1]}", ssl_context)

    def accept(self, client: socket.socket, peer: str, ssl_context: ssl.SSLContext | None) -> None:
        """Give a new connection a pending slot (dropping the oldest pending one if full) and a thread."""
        refusal = self._busy()
        if refusal is not None:
            log.warning("refusing viewer %s: %s", peer, refusal)
            with contextlib.suppress(OSError):
                client.setblocking(False)
                client.send(stream.encode(stream.ErrorMsg("busy", str(refusal))))
            client.close()
            return
        try:
            slot = PendingSlot(client, peer, self._forget)
        except OSError as err:  # out of file descriptors
            log.warning("refusing viewer %s: %s", peer, err.strerror or err)
            client.close()
            return
        evicted = None
        with self._lock:
            if len(self._pending) >= MAX_PENDING:
                evicted, _ = self._pending.popitem(last=False)
            self._pending[slot] = None
        if evicted is not None:
            why = f"dropped: {MAX_PENDING} newer connections are still unauthenticated"
            log.info("viewer %s %s", evicted.peer, why)
            evicted.shut(why)
        threading.Thread(
            target=self._serve_socket, args=(client, peer, ssl_context, slot), name=f"gpulens-viewer-{peer}", daemon=True
        ).start()

    def _serve_socket(
        self, client: socket.socket, peer: str, ssl_context: ssl.SSLContext | None, slot: PendingSlot
    ) -> None:
        deadline = time.monotonic() + HANDSHAKE_TIMEOUT_S
        try:
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # A fixed send buffer turns off kernel autotuning, so a stalled viewer
            # fills it quickly and the bounded queue (not megabytes of kernel
            # memory) decides when it is dropped.
            client.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SNDBUF_BYTES)
            if ssl_context is not None:
                # The whole handshake is bounded (CPython applies one deadline per call).
                client.settimeout(max(deadline - time.monotonic(), 0.001))
                try:
                    client = ssl_context.wrap_socket(client, server_side=True)
                except (OSError, ssl.SSLError) as err:
                    log.info("viewer %s: TLS handshake failed: %s", peer, err)
                    client.close()
                    return
            self._serve(SocketTransport(client), peer, deadline, slot)
        except OSError as err:
            log.info("viewer %s: %s", peer, err.strerror or err)
            with contextlib.suppress(OSError):
                client.close()
        finally:
            slot.release()

    def _forget(self, slot: PendingSlot) -> None:
        with self._lock:
            self._pending.pop(slot, None)

    def pending_count(self) -> int:
        """Connections not yet admitted."""
        with self._lock:
            return len(self._pending)

    def shut_all(self) -> None:
        """End every pending connection (the agent is stopping)."""
        with self._lock:
            slots = list(self._pending)
            self._pending.clear()
        for slot in slots:
            slot.shut()


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket (SO_REUSEADDR so a restarted agent gets its port back).

    Raises:
        OSError: the name does not resolve, or the port is taken / not allowed.
    """
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, addr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def is_loopback(host: str) -> bool:
    """True when every address ``host`` resolves to is a loopback address."""
    import ipaddress

    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    try:
        return all(ipaddress.ip_address(str(i[4][0]).split("%")[0]).is_loopback for i in infos)
    except ValueError:
        return False
