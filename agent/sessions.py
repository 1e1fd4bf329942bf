"""One viewer connected to the agent: transport, handshake, send queue.

A connection is *pending* from accept until the viewer's hello: it must
finish (TLS, token proof when the agent has one, hello) within
``HANDSHAKE_TIMEOUT_S`` in all, its frames may be at most
``PREAUTH_FRAME_BYTES``, and its one thread (the reader) sends the
challenge and the agent's hello itself. Admitted (the host's ``admit`` may
say busy), it gets the full frame limit and a writer thread draining a bounded
queue. Live samples are *offered*: when the queue is full the viewer is
too slow and is dropped, so a stalled viewer never holds memory or blocks
the sampler. What the viewer may ask for is its :class:`Principal`
(``gpulens.ipc.principal``), fixed by how it proved who it is: a verified
token grants the agent owner's authority, no token samples only. Anything
a viewer sends that is not a valid message ends that connection only,
after an error message telling the viewer why.

A connection knows the agent only as a :class:`SessionHost` (hello, admit,
subscribe, submit, forget), so it can be built and tested alone over any
:class:`~gpulens.ipc.transport.Transport`.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import ClassVar, Protocol

from gpulens.core.reasons import Reason, ReasonText
from gpulens.ipc import auth, stream
from gpulens.ipc.errors import (
    AuthError,
    AuthProblem,
    ProtocolError,
    ProtocolProblem,
    StreamError,
    VersionMismatch,
)
from gpulens.ipc.principal import SAMPLES_ONLY, Principal
from gpulens.ipc.stream_decode import FrameDecoder
from gpulens.ipc.transport import Transport

log = logging.getLogger("gpulens.agent")

HANDSHAKE_TIMEOUT_S = 5.0
"""From accept to the viewer's hello (TLS and the token proof included)."""
PREAUTH_FRAME_BYTES = 4096
"""Largest frame a viewer may send before its hello (an auth response or a hello is ~100 bytes)."""
RECV_BYTES = 256 * 1024
PREAUTH_RECV_BYTES = 8192
CLOSE_SEND_S = 1.0
"""How long a last error message may take to go out before a pending connection is closed."""


class RefusalKind(enum.Enum):
    """Why a viewer that finished its handshake is not admitted."""

    VIEWERS_FULL = "viewers-full"  # limit: the TCP viewers the agent serves at once


@dataclass(frozen=True, slots=True)
class Refusal(Reason):
    """An admission refusal as a value; ``str()`` is what the viewer is told (a ``busy`` error)."""

    kind: RefusalKind
    limit: int = 0

    TEXT: ClassVar[ReasonText] = {RefusalKind.VIEWERS_FULL: "agent has {0.limit} viewers"}


class SessionHost(Protocol):
    """What a viewer connection asks of whoever serves it (the agent; a fake in tests).

    Called from the connection's own thread, in this order: ``hello`` (once
    the principal is known), ``admit`` (after the viewer's hello),
    ``subscribe`` (admitted: history newer than ``since``, then live
    samples), ``submit`` per request, and ``forget`` once, when it closes.
    """

    def hello(self, principal: Principal) -> stream.Hello:
        """The agent's hello for a viewer with ``principal`` (its caps: what that viewer may request)."""
        ...

    def admit(self, conn: ViewerConnection) -> Refusal | None:
        """Admit a viewer through its handshake; the refusal (busy) when it cannot be."""
        ...

    def subscribe(self, conn: ViewerConnection, since: float | None) -> None:
        """Queue history newer than ``since`` (None: none) on ``conn``, then offer it live samples."""
        ...

    def submit(self, conn: ViewerConnection, req: stream.Request) -> None:
        """Run the viewer's request (the answer goes back through ``conn.put``)."""
        ...

    def forget(self, conn: ViewerConnection) -> None:
        """``conn`` closed: stop offering it samples and release what it held."""
        ...


class ViewerConnection:
    """Serve one viewer: auth (when a token is set), hello, samples, requests.

    ``principal`` is what the viewer may do once through the handshake; with
    a ``token`` it is granted only after the viewer proves the token
    (``self.principal`` is samples-only until then; ``replay_guard``
    remembers the nonces every connection of the agent has seen). ``kind``
    (``tcp``, ``control``, ``stdio``) says which viewer cap admits it.
    """

    def __init__(
        self,
        host: SessionHost,
        transport: Transport,
        peer: str,
        *,
        principal: Principal,
        token: bytes | None,
        max_queued_frames: int,
        replay_guard: auth.ReplayGuard | None = None,
        kind: str = "tcp",
        deadline: float | None = None,
    ) -> None:
        if token is not None and replay_guard is None:
            raise ValueError("a token needs the agent's replay guard")
        self.host = host
        self._replay_guard = replay_guard
        self.transport = transport
        self.peer = peer
        self.kind = kind
        self._granted = principal
        self.principal = SAMPLES_ONLY if token is not None else principal
        self._token = token
        self._max = max_queued_frames
        self._queue: deque[bytes | None] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self.admitted = False
        self.reason = ""
        self._state = "auth" if token is not None else "hello"
        self._nonce = b""
        self._deadline = time.monotonic() + HANDSHAKE_TIMEOUT_S if deadline is None else deadline
        self._decoder = FrameDecoder(max_frame_bytes=PREAUTH_FRAME_BYTES)
        self._pre_header = bytearray()
        self._pre_left = 0
        self._writer_thread: threading.Thread | None = None

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
        """Queue a frame, waiting up to ``timeout_s`` for room (None: never wait).

        False when the connection is closed (or not admitted yet) or stayed full.
        """
        with self._cond:
            if timeout_s is not None:
                self._cond.wait_for(lambda: self._closed or len(self._queue) < self._max, timeout_s)
                if not self._closed and len(self._queue) >= self._max:
                    return False
            if self._closed or self._writer_thread is None:
                return False
            self._queue.append(frame)
            self._cond.notify_all()
            return True

    def _send_now(self, frame: bytes) -> None:
        """Before admission there is no writer: the reader sends (within the handshake deadline)."""
        self.transport.set_timeout(self._remaining())
        self.transport.sendall(frame)

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
        if self._writer_thread is None:
            if not self._closed:
                self.reason = reason
                with contextlib.suppress(OSError):
                    self.transport.set_timeout(CLOSE_SEND_S)
                    self.transport.sendall(stream.encode(msg))
                self.drop(reason)
            return
        with self._cond:
            if self._closed:
                return
            self.reason = reason
            self._queue.append(stream.encode(msg))
            self._queue.append(None)
            self._cond.notify_all()

    def drop(self, reason: str) -> None:
        """Close this connection now (idempotent); the host forgets it."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self.reason = self.reason or reason
            self._queue.clear()
            self._cond.notify_all()
        self.transport.close()
        log.info("viewer %s disconnected: %s", self.peer, self.reason)
        self.host.forget(self)

    @property
    def closed(self) -> bool:
        """True once the connection is closed."""
        return self._closed

    # -- receiving --------------------------------------------------------------
    def run(self) -> None:
        """Serve until the viewer leaves or misbehaves; never raises."""
        try:
            if self._token is not None:
                self._nonce = auth.new_nonce()
                self._send_now(stream.encode(stream.Challenge(proto=stream.PROTOCOL_VERSION, nonce=self._nonce)))
            else:
                self._send_now(stream.encode(self.host.hello(self.principal)))
            self._read_loop()
        except TimeoutError:
            self.close_after(
                stream.ErrorMsg("timeout", f"no hello within {HANDSHAKE_TIMEOUT_S:g} s"), "handshake timed out"
            )
        except _Busy as err:
            self.close_after(stream.ErrorMsg("busy", str(err)), f"refused: {err}")
        except VersionMismatch as err:
            self.close_after(stream.ErrorMsg("version", str(err)), f"version mismatch: {err}")
        except AuthError as err:
            self.close_after(stream.ErrorMsg("auth", str(err)), f"auth failed: {err}")
        except ProtocolError as err:
            self.close_after(stream.ErrorMsg("protocol", str(err)), f"protocol error: {err}")
        except OSError as err:
            self.drop(f"receive failed: {err.strerror or err}")
        except Exception as err:  # last resort of the viewer's thread: a bug ends this session only
            log.exception("viewer %s: internal error", self.peer)
            self.close_after(stream.ErrorMsg("internal", f"agent error: {err}"), f"internal error: {err}")
        if self._writer_thread is not None:
            self._writer_thread.join(timeout=5)
        self.drop(self.reason or "closed")

    def _remaining(self) -> float:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("handshake deadline passed")
        return left

    def _read_loop(self) -> None:
        while not self._closed:
            data = self.transport.recv(RECV_BYTES) if self.admitted else self._recv_preauth()
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

    def _recv_preauth(self) -> bytes:
        """Before admission read exactly up to the end of the next frame, never beyond.

        The viewer may send its hello and a (large) request in one write; the
        request must stay in the kernel until the full frame limit applies.
        The decoder still checks every declared size.
        """
        self.transport.set_timeout(self._remaining())
        if self._pre_left == 0:
            data = self.transport.recv(stream.HEADER.size - len(self._pre_header))
            self._pre_header += data
            if len(self._pre_header) == stream.HEADER.size:
                (self._pre_left,) = stream.HEADER.unpack(self._pre_header)
                self._pre_header.clear()
            return data
        data = self.transport.recv(min(self._pre_left, PREAUTH_RECV_BYTES))
        self._pre_left -= len(data)
        return data

    def _handle(self, msg: stream.Message) -> None:
        if self._state == "auth":
            if not isinstance(msg, stream.AuthResponse):
                raise AuthError("authentication required: this agent needs a token (--token-file)",
                                problem=AuthProblem.TOKEN_REQUIRED)
            assert self._token is not None and self._replay_guard is not None
            auth.verify_viewer(self._token, self._nonce, msg.cnonce, msg.mac, self._replay_guard)
            self.principal = self._granted
            self._send_now(stream.encode(stream.AuthOk(mac=auth.agent_proof(self._token, self._nonce, msg.cnonce))))
            self._send_now(stream.encode(self.host.hello(self.principal)))
            self._state = "hello"
            return
        if self._state == "hello":
            if not isinstance(msg, stream.Hello) or msg.role != "viewer":
                raise ProtocolError(f"expected the viewer's hello, got '{stream.to_wire(msg)['t']}'",
                                    problem=ProtocolProblem.UNEXPECTED_MESSAGE)
            refusal = self.host.admit(self)
            if refusal is not None:
                raise _Busy(str(refusal))
            self._admitted()
            self.host.subscribe(self, msg.since)
            return
        if isinstance(msg, stream.Request):
            self.host.submit(self, msg)
            return
        raise ProtocolError(f"unexpected message '{stream.to_wire(msg)['t']}' from a viewer",
                            problem=ProtocolProblem.UNEXPECTED_MESSAGE)

    def _admitted(self) -> None:
        self._state = "active"
        self.admitted = True
        self._decoder.max_frame_bytes = stream.MAX_FRAME_BYTES
        self.transport.set_timeout(None)
        self._writer_thread = threading.Thread(target=self._writer, name=f"gpulens-send-{self.peer}", daemon=True)
        self._writer_thread.start()


class _Busy(Exception):
    """The agent has as many viewers of this kind as it serves."""


def describe(err: BaseException) -> str:
    """A short reason for logs and HostStatusEvents."""
    if isinstance(err, StreamError):
        return f"{err.title}: {err}"
    if isinstance(err, OSError):
        return err.strerror or str(err)
    return str(err)
