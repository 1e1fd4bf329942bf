"""Byte streams to one peer: a (TLS) socket or stdin/stdout, behind one small Transport protocol.

Used by the agent's viewer sessions and by the control socket; each call is
bounded by ``set_timeout`` so no peer can hold a thread forever.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
from typing import Protocol


class Transport(Protocol):
    """A byte stream to one viewer (socket, TLS socket or stdin/stdout)."""

    def recv(self, n: int) -> bytes:
        """Up to ``n`` bytes; ``b""`` at end of stream; TimeoutError past the timeout."""
        ...

    def sendall(self, data: bytes) -> None:
        """Write all of ``data`` or raise OSError (TimeoutError past the timeout)."""
        ...

    def set_timeout(self, seconds: float | None) -> None:
        """Bound each later recv/sendall (None: block)."""
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
        """Write all of ``data``."""
        self.sock.sendall(data)

    def set_timeout(self, seconds: float | None) -> None:
        """The socket's timeout (None: blocking)."""
        self.sock.settimeout(None if seconds is None else max(seconds, 0.001))

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
        self._timeout: float | None = None
        self._closed = False

    def recv(self, n: int) -> bytes:
        """Up to ``n`` bytes from stdin."""
        if self._timeout is not None:
            ready, _, _ = select.select([self.rfd], [], [], self._timeout)
            if not ready:
                raise TimeoutError("timed out")
        return os.read(self.rfd, n)

    def sendall(self, data: bytes) -> None:
        """Write all of ``data`` to stdout."""
        view = memoryview(data)
        while view:
            written = os.write(self.wfd, view)
            view = view[written:]

    def set_timeout(self, seconds: float | None) -> None:
        """Bound each later recv (writes to the ssh pipe are not bounded)."""
        self._timeout = seconds

    def close(self) -> None:
        """Close stdout so the viewer sees end of stream."""
        if not self._closed:
            self._closed = True
            with contextlib.suppress(OSError):
                os.close(self.wfd)
