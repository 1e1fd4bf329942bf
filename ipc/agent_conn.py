"""One viewer connected to the agent: transport, send queue and handshake.

Each connection has a reader (the thread that calls :meth:`ViewerConnection.run`)
and a writer thread draining a bounded queue. Live samples are *offered*:
when the queue is full the viewer is too slow and is dropped, so a stalled
viewer never holds memory or blocks the sampler. Anything a viewer sends
that is not a valid message ends that connection only, after an error
message telling the viewer why.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from . import auth, stream
from .errors import AuthError, ProtocolError, StreamError, VersionMismatch

if TYPE_CHECKING:
    from .agent import Agent

log = logging.getLogger("gpulens.agent")

HANDSHAKE_TIMEOUT_S = 10.0
"""A viewer must finish auth and hello within this time or is dropped."""
RECV_BYTES = 256 * 1024


class Transport(Protocol):
    """A byte stream to one viewer (socket, TLS socket or stdin/stdout)."""

    def recv(self, n: int) -> bytes:
        """Up to ``n`` bytes; ``b""`` at end of stream."""
        ...

    def sendall(self, data: bytes) -> None:
        """Write all of ``data`` or raise OSError."""
        ...

    def close(self) -> None:
        """Close both directions; wakes a blocked recv/send. Idempotent."""
        ...


class SocketTransport:
    """A connected (possibly TLS-wrapped) socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._closed = False

    def recv(self, n: int) -> bytes:
        """Up to ``n`` bytes; ``b""`` at end of stream."""
        return self.sock.recv(n)

    def sendall(self, data: bytes) -> None:
        """Write all of ``data`` (blocking)."""
        self.sock.sendall(data)

    def close(self) -> None:
        """Shut down and close the socket."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self.sock.close()


class StdioTransport:
    """The agent's stdin/stdout (``--stdio``, what ``ssh HOST gpulens agent`` uses)."""

    def __init__(self, rfd: int, wfd: int) -> None:
        self.rfd = rfd
        self.wfd = wfd
        self._closed = False

    def recv(self, n: int) -> bytes:
        """Up to ``n`` bytes from stdin."""
        return os.read(self.rfd, n)

    def sendall(self, data: bytes) -> None:
        """Write all of ``data`` to stdout."""
        view = memoryview(data)
        while view:
            written = os.write(self.wfd, view)
            view = view[written:]

    def close(self) -> None:
        """Close stdout so the viewer sees end of stream."""
        if not self._closed:
            self._closed = True
            with contextlib.suppress(OSError):
                os.close(self.wfd)


class ViewerConnection:
    """Serve one viewer: auth (when a token is set), hello, samples, requests."""

    def __init__(
        self,
        agent: Agent,
        transport: Transport,
        peer: str,
        *,
        token: bytes | None,
        max_queued_frames: int,
    ) -> None:
        self.agent = agent
        self.transport = transport
        self.peer = peer
        self._token = token
        self._max = max_queued_frames
        self._queue: deque[bytes | None] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self.reason = ""
        self._state = "auth" if token is not None else "hello"
        self._nonce = b""
        self._decoder = stream.FrameDecoder()
        self._handshake_timer: threading.Timer | None = None
        self.on_close: Callable[[ViewerConnection], None] | None = None

    # -- sending ----------------------------------------------------------------
    def offer(self, frame: bytes) -> bool:
        """Queue a live frame unless the queue is full (then False: too slow)."""
        with self._cond:
            if self._closed:
                return True
            if len(self._queue) >= self._max:
                return False
            self._queue.append(frame)
            self._cond.notify()
            return True

    def put(self, frame: bytes, timeout_s: float | None = None) -> bool:
        """Queue a frame, waiting up to ``timeout_s`` for room (None: never wait)."""
        with self._cond:
            if timeout_s is not None:
                self._cond.wait_for(lambda: self._closed or len(self._queue) < self._max, timeout_s)
                if not self._closed and len(self._queue) >= self._max:
                    return False
            if self._closed:
                return False
            self._queue.append(frame)
            self._cond.notify_all()
            return True

    def _writer(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._queue) or self._closed)
                if self._closed and not self._queue:
                    return
                frame = self._queue.popleft()
                self._cond.notify_all()
            if frame is None:  # close marker: everything before it is sent
                self.drop(self.reason or "closed")
                return
            try:
                self.transport.sendall(frame)
            except OSError as err:
                self.drop(f"send failed: {err.strerror or err}")
                return

    def close_after(self, msg: stream.Message, reason: str) -> None:
        """Send ``msg`` (an error) after what is queued, then close."""
        with self._cond:
            if self._closed:
                return
            self.reason = reason
            self._queue.append(stream.encode(msg))
            self._queue.append(None)
            self._cond.notify_all()

    def drop(self, reason: str) -> None:
        """Close this connection now (idempotent); the agent forgets it."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self.reason = self.reason or reason
            self._queue.clear()
            self._cond.notify_all()
        if self._handshake_timer is not None:
            self._handshake_timer.cancel()
        self.transport.close()
        log.info("viewer %s disconnected: %s", self.peer, self.reason)
        if self.on_close is not None:
            self.on_close(self)

    @property
    def closed(self) -> bool:
        """True once the connection is closed."""
        return self._closed

    # -- receiving --------------------------------------------------------------
    def run(self) -> None:
        """Serve until the viewer leaves or misbehaves; never raises."""
        writer = threading.Thread(target=self._writer, name=f"gpulens-send-{self.peer}", daemon=True)
        writer.start()
        self._handshake_timer = threading.Timer(
            HANDSHAKE_TIMEOUT_S, self._handshake_expired
        )
        self._handshake_timer.daemon = True
        self._handshake_timer.start()
        if self._token is not None:
            self._nonce = auth.new_nonce()
            self.put(stream.encode(stream.Challenge(proto=stream.PROTOCOL_VERSION, nonce=self._nonce)))
        else:
            self.put(stream.encode(self.agent.hello()))
        try:
            self._read_loop()
        except VersionMismatch as err:
            self.close_after(stream.ErrorMsg("version", str(err)), f"version mismatch: {err}")
        except AuthError as err:
            self.close_after(stream.ErrorMsg("auth", str(err)), f"auth failed: {err}")
        except ProtocolError as err:
            self.close_after(stream.ErrorMsg("protocol", str(err)), f"protocol error: {err}")
        except OSError as err:
            self.drop(f"receive failed: {err.strerror or err}")
        except Exception as err:
            log.exception("viewer %s: internal error", self.peer)
            self.close_after(stream.ErrorMsg("internal", f"agent error: {err}"), f"internal error: {err}")
        writer.join(timeout=5)
        self.drop(self.reason or "closed")

    def _handshake_expired(self) -> None:
        if self._state != "active":
            self.close_after(
                stream.ErrorMsg("timeout", f"no hello within {HANDSHAKE_TIMEOUT_S:.0f} s"),
                "handshake timed out",
            )

    def _read_loop(self) -> None:
        while not self._closed:
            data = self.transport.recv(RECV_BYTES)
            if not data:
                if self._decoder.buffered:
                    self.drop(f"disconnected mid-frame ({self._decoder.buffered} bytes pending)")
                else:
                    self.drop("viewer closed the connection")
                return
            for msg in self._decoder.feed(data):
                self._handle(msg)
                if self._closed:
                    return

    def _handle(self, msg: stream.Message) -> None:
        if self._state == "auth":
            if not isinstance(msg, stream.AuthResponse):
                raise AuthError("authentication required: this agent needs a token (--token-file)")
            assert self._token is not None
            auth.verify_viewer(self._token, self._nonce, msg.cnonce, msg.mac, self.agent.replay_guard)
            self.put(stream.encode(stream.AuthOk(mac=auth.agent_proof(self._token, self._nonce, msg.cnonce))))
            self.put(stream.encode(self.agent.hello()))
            self._state = "hello"
            return
        if self._state == "hello":
            if not isinstance(msg, stream.Hello) or msg.role != "viewer":
                raise ProtocolError(f"expected the viewer's hello, got '{stream.to_wire(msg)['t']}'")
            self._state = "active"
            if self._handshake_timer is not None:
                self._handshake_timer.cancel()
            self.agent.subscribe(self, msg.since)
            return
        if isinstance(msg, stream.Request):
            self.agent.requests.submit(self, msg)
            return
        raise ProtocolError(f"unexpected message '{stream.to_wire(msg)['t']}' from a viewer")


def describe(err: BaseException) -> str:
    """A short reason for logs and HostStatusEvents."""
    if isinstance(err, StreamError):
        return f"{err.title}: {err}"
    if isinstance(err, OSError):
        return err.strerror or str(err)
    return str(err)
