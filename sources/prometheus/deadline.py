"""HTTP connections whose every step ends at one monotonic deadline (connect, TLS, each read).

A server dripping a byte every few seconds is cut off at the deadline, not fed
forever: each socket read may wait only for the time left.
"""

from __future__ import annotations

import functools
import http.client
import io
import socket
import ssl
import time
import urllib.request
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer, WriteableBuffer


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("deadline passed")
    return left


class _DeadlineIO(socket.SocketIO):
    """Socket reads that end at a monotonic deadline: each ``recv`` waits only for the time left."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        super().__init__(sock, "rb")
        sock._io_refs += 1  # type: ignore[attr-defined]  # as socket.makefile() does: close() waits for us
        self._timed = sock
        self._deadline = deadline

    def readinto(self, b: WriteableBuffer) -> int:
        self._timed.settimeout(_left(self._deadline))
        n: int = super().readinto(b)  # type: ignore[assignment]
        return n


class _DeadlineSocket:
    """The connection's socket as http.client sees it: sends and reads bounded by the deadline."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self._deadline = deadline

    def makefile(self, mode: str, *args: object, **kwargs: object) -> io.BufferedReader:
        return io.BufferedReader(_DeadlineIO(self._sock, self._deadline))

    def sendall(self, data: ReadableBuffer) -> None:
        self._sock.settimeout(_left(self._deadline))
        self._sock.sendall(data)

    def __getattr__(self, name: str) -> object:
        return getattr(self._sock, name)


class _HTTPConnection(http.client.HTTPConnection):
    def __init__(self, host: str, *, deadline: float, port: int | None = None, timeout: float | None = None,
                 source_address: tuple[str, int] | None = None, blocksize: int = 8192) -> None:
        super().__init__(host, port, timeout, source_address, blocksize)
        self.deadline = deadline

    def connect(self) -> None:
        self.timeout = _left(self.deadline)  # the TCP connect waits only for the time left
        super().connect()
        self.sock = _DeadlineSocket(self.sock, self.deadline)


class _HTTPSConnection(http.client.HTTPSConnection):
    def __init__(self, host: str, *, deadline: float, context: ssl.SSLContext | None = None, port: int | None = None,
                 timeout: float | None = None, source_address: tuple[str, int] | None = None,
                 blocksize: int = 8192) -> None:
        super().__init__(host, port, timeout=timeout, source_address=source_address, context=context,
                         blocksize=blocksize)
        self.deadline = deadline

    def connect(self) -> None:
        # CPython applies a socket's timeout to the whole TLS handshake, not to each read.
        self.timeout = _left(self.deadline)
        super().connect()
        self.sock = _DeadlineSocket(self.sock, self.deadline)


class DeadlineHTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline: float) -> None:
        super().__init__()
        self._deadline = deadline

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_HTTPConnection, deadline=self._deadline), req)


class DeadlineHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline: float, context: ssl.SSLContext | None = None) -> None:
        super().__init__()
        self._deadline = deadline
        self._ctx = context

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        # No context given: HTTPSConnection makes the default, verifying one.
        return self.do_open(functools.partial(_HTTPSConnection, deadline=self._deadline, context=self._ctx), req)
