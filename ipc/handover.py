"""Hand-over of this host's Kineto endpoint from a local gpulens to an agent started after it.

One gpulens per host owns the Kineto daemon name. When ``gpulens agent``
starts while a TUI's in-process endpoint owner holds it, the agent asks
that owner, over the owner's control socket (``gpulens.ipc.control``), to
pass the name on: the request kind :data:`KIND`. The owner lets every
trace it accepted reach Kineto, stops serving its bound socket and passes
that very socket (``SCM_RIGHTS``) to a one-shot abstract socket of the
agent's with an unguessable name; the agent serves it and says so; only then
does the owner close its copy, release its control socket, answer, and from
then on trace through the agent's control socket. The name is bound all
along (issue 27: a release-then-bind left a gap another user's loop on
``bind`` won); when anything fails, the owner serves its socket again. The
agent's remote viewers can then trace on this host as if it had started first.

Trust (docs/security.md, "Endpoint hand-over"):

- The owner honours the request only from a control-socket peer whose
  kernel credentials (``SO_PEERCRED``, never a claim in the message) show
  root or the owner's own uid: :func:`handover_allowed`.
- The agent asks only the process the kernel names as the holder of the
  Kineto name: the control socket's ``SO_PEERCRED`` pid must be that pid
  (:func:`request_handover`); it sends nothing but the request, reads at
  most :data:`MAX_ANSWER_FRAME` bytes a frame within one deadline, and
  cleans the holder's words before logging them. Its receiver takes a
  descriptor only from the holder's pid (``SO_PEERCRED``) and adopts it only
  when it is a Unix datagram socket bound to the Kineto name it serves.
- The owner passes its socket only to a receiver whose kernel-given uid is
  the asking control peer's (:func:`pass_socket`).
- After releasing, the owner checks who holds the name before sending it a
  single trace (the holder's uid must be root or its own, a gpulens whose
  control socket the kernel attributes to that pid); otherwise it takes the
  name back or says why it cannot trace.

An owner that does not know the kind (an older gpulens, or ``gpulens
trace``'s short-lived owner) does not list it in its hello; the agent then
keeps serving without traces and tries again on a slow timer.
"""

from __future__ import annotations

import contextlib
import enum
import os
import re
import secrets
import select
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from gpulens.core.errors import GpulensError
from gpulens.core.reasons import Reason, ReasonText
from gpulens.core.sanitize import clean_text
from gpulens.ipc import stream
from gpulens.ipc.control import control_name, peer_allowed, peer_cred
from gpulens.ipc.errors import IpcError
from gpulens.ipc.principal import Principal
from gpulens.ipc.stream_decode import FrameDecoder

KIND = "endpoint_pass"
"""The request kind an endpoint owner that can pass its endpoint on lists in its hello.

(``endpoint_handover``, before issue 27, released the name and left a gap another user could bind in;
an owner that only knows that kind is treated as one that cannot hand over.)"""
MAX_ANSWER_FRAME = 64 * 1024
"""Largest frame the asking agent reads from the holder (a hello or a response is ~300 bytes)."""
RECEIVER_PREFIX = "gpulens-handover-"
"""The asking agent's one-shot abstract socket: this prefix and 128 random bits in hex."""
_RECEIVER = re.compile(r"gpulens-handover-[0-9a-f]{32}")
PASS_TAG = b"kineto-endpoint"
"""The bytes that carry the descriptor (``SCM_RIGHTS``)."""
ACK_S = 10.0
"""How long the holder waits for the new owner to say it serves the passed socket."""
MAX_STRAY_CONNECTIONS = 8
"""Connections to the receiver from a process other than the holder, before the agent stops listening."""

Adopt = Callable[[socket.socket], Callable[[], None]]
"""Serves a passed, bound Kineto socket, or raises why it cannot (a GpulensError such as UnsafePath or
EndpointBusy, an OSError, or RuntimeError when the agent is stopping); returns how to stop serving it again."""


def handover_allowed(principal: Principal, holder_uid: int) -> bool:
    """May the peer ``principal`` make an owner of ``holder_uid`` release the Kineto name?

    Only a control-socket peer (its uid from ``SO_PEERCRED``) that is root or
    the holder's own user: nobody else can make a user's TUI stop owning it.
    """
    return principal.how == "peercred" and principal.uid is not None and peer_allowed(principal.uid, holder_uid)


def refusal(principal: Principal, holder_uid: int) -> str:
    """The answer to a peer :func:`handover_allowed` refuses."""
    return (
        f"endpoint hand-over refused: {principal.describe()} is neither root nor this gpulens's "
        f"user (uid {holder_uid})"
    )


@dataclass(frozen=True, slots=True)
class HandoverAnswer:
    """What came of asking the holder: ``released`` (this agent serves the name now), or why not.

    ``supported`` False: the holder does not know the request (an older
    gpulens, a ``gpulens trace`` owner) or serves no control socket at all.
    """

    released: bool
    reason: str = ""
    supported: bool = True


def request_handover(socket_dir: str | None, holder_pid: int, holder_uid: int, timeout_s: float,
                     adopt: Adopt) -> HandoverAnswer:
    """Ask the gpulens holding the Kineto name (pid ``holder_pid``, uid ``holder_uid``) to pass it on.

    The holder passes its bound socket (``SCM_RIGHTS``) to a one-shot abstract
    socket of ours with an unguessable name, which only the holder's pid may
    use; ``adopt(sock)`` serves it, and then the holder closes its copy. The
    name is bound all along: there is no moment another process could bind it.
    Never raises for what the holder does: a refusal, a wrong peer, a protocol
    error or a timeout comes back as the answer's reason (and the holder keeps the name).
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    name = control_name(socket_dir, holder_uid)
    shown = "@" + name[1:].decode(errors="replace")
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(min(timeout_s, 5.0))
        try:
            sock.connect(name)
        except OSError as err:
            return HandoverAnswer(False, f"it serves no control socket ({shown}: {err.strerror or err})", False)
        pid, uid = peer_cred(sock)
        if pid != holder_pid:
            return HandoverAnswer(
                False, f"the control socket {shown} belongs to pid {pid} (uid {uid}), not to the holder "
                f"(pid {holder_pid}): not asking it", False,
            )
        receiver_name = RECEIVER_PREFIX + secrets.token_hex(16)
        receiver.bind(b"\0" + receiver_name.encode())
        receiver.listen(4)
        return _Exchange(sock, receiver, holder_pid, adopt, time.monotonic() + timeout_s).run(receiver_name)
    except OSError as err:
        return HandoverAnswer(False, f"control socket {shown}: {err.strerror or err}")
    finally:
        receiver.close()
        sock.close()


class _Exchange:
    """The asking side: the handshake, the request, the passed socket, the answer."""

    def __init__(self, sock: socket.socket, receiver: socket.socket, holder_pid: int, adopt: Adopt,
                 deadline: float) -> None:
        self.sock = sock
        self.receiver = receiver
        self.holder_pid = holder_pid
        self.adopt = adopt
        self.deadline = deadline
        self.decoder = FrameDecoder(max_frame_bytes=MAX_ANSWER_FRAME)
        self.pending: list[stream.Message] = []
        self.adopted = False
        self.listening = True
        self.adopt_error = ""
        self.strays = 0

    def _left(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no answer in time")
        return left

    def next_msg(self, *, listen: bool = False) -> stream.Message | None:
        """The holder's next message; while ``listen``, the passed socket is taken when it comes."""
        while not self.pending:
            watched = [self.sock, self.receiver] if listen and self.listening else [self.sock]
            ready, _, _ = select.select(watched, [], [], self._left())
            if self.receiver in ready:
                self._take_passed()
            if self.sock not in ready:
                continue
            self.sock.settimeout(self._left())
            data = self.sock.recv(65536)
            if not data:
                return None
            self.pending.extend(self.decoder.feed(data))
        return self.pending.pop(0)

    def _take_passed(self) -> None:
        """One connection to the receiver: the holder's pid, one descriptor, adopted, acknowledged."""
        conn, _ = self.receiver.accept()
        with conn:
            conn.settimeout(min(self._left(), ACK_S))
            pid, _uid = peer_cred(conn)
            if pid != self.holder_pid:
                self.strays += 1
                if self.strays >= MAX_STRAY_CONNECTIONS:
                    self.listening = False
                    self.adopt_error = f"{self.strays} connections from processes other than the holder"
                return
            msg, fds, _flags, _addr = socket.recv_fds(conn, len(PASS_TAG), 1)
            if msg != PASS_TAG or len(fds) != 1:
                for fd in fds:
                    os.close(fd)
                self.adopt_error = "the holder passed no socket"
                return
            passed = socket.socket(fileno=fds[0])
            try:
                undo = self.adopt(passed)
            except (GpulensError, OSError, RuntimeError) as err:  # the holder keeps the name and serves it again
                passed.close()
                self.adopt_error = clean_text(f"{type(err).__name__}: {err}")[:300]
                with contextlib.suppress(OSError):
                    conn.sendall(b"N" + self.adopt_error.encode()[:200])
                return
            try:
                conn.sendall(b"A")
            except OSError as err:  # the holder did not hear us: it serves the name again, we must not
                undo()
                self.adopt_error = f"could not tell the holder the socket is served: {err.strerror or err}"
                return
            self.adopted = True
            self.listening = False

    def run(self, receiver_name: str) -> HandoverAnswer:
        try:
            hello = self.next_msg()
            if hello is None:
                return HandoverAnswer(False, "it closed the connection before its hello (it does not serve this user)")
            if not isinstance(hello, stream.Hello) or hello.role != "agent":
                return HandoverAnswer(False, "it did not greet as a gpulens endpoint owner", False)
            if KIND not in hello.caps:
                return HandoverAnswer(False, "it does not pass its endpoint on (an older gpulens, or "
                                      "'gpulens trace')", False)
            self.sock.sendall(stream.encode(stream.Hello(proto=stream.PROTOCOL_VERSION, role="viewer")))
            self.sock.sendall(stream.encode(stream.Request(id=1, kind=KIND, params={"receiver": receiver_name})))
            while True:
                msg = self.next_msg(listen=True)
                if msg is None:
                    return self._answer("it closed the connection without an answer")
                if isinstance(msg, stream.ErrorMsg):
                    return self._answer(f"it refused the connection: {clean_text(msg.message)}"[:300])
                if isinstance(msg, stream.Response) and msg.id == 1:
                    if msg.ok:
                        return self._answer("it answered without passing its socket")
                    return self._answer(clean_text(msg.error)[:300] or "it refused without a reason")
        except TimeoutError:  # before OSError: a subclass
            return self._answer("it did not answer in time")
        except (IpcError, ValueError) as err:
            return self._answer(clean_text(f"it sent something that is not the gpulens protocol: {err}")[:300])

    def _answer(self, why: str) -> HandoverAnswer:
        """Released when we serve the passed socket (whatever the holder said after); else why not."""
        if self.adopted and not self.adopt_error:
            return HandoverAnswer(True)
        return HandoverAnswer(False, self.adopt_error or why)  # what went wrong on our side says most


class NotPassedKind(enum.Enum):
    """Why the holder kept its endpoint; the comment says which fields of :class:`NotPassed` it fills."""

    BAD_RECEIVER = "bad-receiver"  # the request names no receiver of the asking agent's form
    NO_RECEIVER = "no-receiver"  # detail: why connecting to the receiver failed (the OSError's words)
    OTHER_USER = "other-user"  # pid, uid (the receiver's), asker (the asking peer's uid; None: unknown)
    NOT_SERVED = "not-served"  # detail: the asking agent's words (it could not serve the passed socket)
    NOT_CONFIRMED = "not-confirmed"  # it answered neither that it serves it nor why not
    TIMEOUT = "timeout"  # no answer within the deadline
    FAILED = "failed"  # detail: the OSError's words (sending the descriptor, reading the answer)


@dataclass(frozen=True, slots=True)
class NotPassed(Reason):
    """Why :func:`pass_socket` kept the endpoint: ``kind`` and the facts its sentence names; ``str()`` is the
    one line the holder logs and answers the asking agent with (the ``NOT_TAKEN`` detail of its
    ``release_endpoint``)."""

    kind: NotPassedKind
    pid: int = 0
    uid: int = 0
    asker: int | None = None
    detail: str = ""

    TEXT: ClassVar[ReasonText] = {
        NotPassedKind.BAD_RECEIVER: "the request names no receiver of the agent's form; the endpoint is kept",
        NotPassedKind.NO_RECEIVER: "the asking agent's receiver did not answer ({0.detail}); the endpoint is kept",
        NotPassedKind.OTHER_USER: ("the receiver belongs to pid {0.pid} (uid {0.uid}), not to the asking agent's "
                                   "user (uid {0.asker}); the endpoint is kept"),
        NotPassedKind.NOT_SERVED: "the asking agent could not serve it: {0.detail}",
        NotPassedKind.NOT_CONFIRMED: "the asking agent did not confirm it serves the endpoint; the endpoint is kept",
        NotPassedKind.TIMEOUT: "the asking agent did not confirm in time; the endpoint is kept",
        NotPassedKind.FAILED: "passing the endpoint failed: {0.detail}; the endpoint is kept",
    }


def pass_socket(receiver: object, endpoint: socket.socket, asker_uid: int | None,
                timeout_s: float = ACK_S) -> NotPassed | None:
    """The holder's side: pass ``endpoint`` (bound, not served) to the asking agent's ``receiver``.

    The receiver must be a one-shot name of the asking agent's form, held by
    a process of ``asker_uid`` (the uid the kernel gave for the asking
    control peer). None once the agent said it serves the socket; else why
    not (the caller then serves it again: the name never comes free).
    """
    if not isinstance(receiver, str) or not _RECEIVER.fullmatch(receiver):
        return NotPassed(NotPassedKind.BAD_RECEIVER)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(timeout_s)
        try:
            conn.connect(b"\0" + receiver.encode())
        except OSError as err:
            return NotPassed(NotPassedKind.NO_RECEIVER, detail=str(err.strerror or err))
        pid, uid = peer_cred(conn)
        if asker_uid is None or uid != asker_uid:
            return NotPassed(NotPassedKind.OTHER_USER, pid, uid, asker_uid)
        socket.send_fds(conn, [PASS_TAG], [endpoint.fileno()])
        ack = conn.recv(256)
        if ack == b"A":
            return None
        if ack.startswith(b"N"):
            return NotPassed(NotPassedKind.NOT_SERVED, detail=clean_text(ack[1:].decode(errors="replace")))
        return NotPassed(NotPassedKind.NOT_CONFIRMED)
    except TimeoutError:
        return NotPassed(NotPassedKind.TIMEOUT)
    except OSError as err:
        return NotPassed(NotPassedKind.FAILED, detail=str(err.strerror or err))
    finally:
        conn.close()
