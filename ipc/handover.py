"""Hand-over of this host's Kineto endpoint from a local gpulens to an agent started after it.

One gpulens per host owns the Kineto daemon name. When ``gpulens agent``
starts while a TUI's in-process endpoint owner holds it, the agent asks
that owner, over the owner's control socket (``gpulens.ipc.control``), to
hand the name over: the request kind :data:`KIND`. The owner lets every
trace it accepted reach Kineto, releases the name and its control socket,
answers, and from then on traces through the agent's control socket; the
agent binds the name. Its remote viewers can then trace on this host as if
the agent had started first.

Trust (docs/security.md, "Endpoint hand-over"):

- The owner honours the request only from a control-socket peer whose
  kernel credentials (``SO_PEERCRED``, never a claim in the message) show
  root or the owner's own uid: :func:`handover_allowed`.
- The agent asks only the process the kernel names as the holder of the
  Kineto name: the control socket's ``SO_PEERCRED`` pid must be that pid
  (:func:`request_handover`); it sends nothing but the request, reads at
  most :data:`MAX_ANSWER_FRAME` bytes a frame within one deadline, and
  cleans the holder's words before logging them.
- After releasing, the owner checks who holds the name before sending it a
  single trace (the holder's uid must be root or its own, a gpulens whose
  control socket the kernel attributes to that pid); otherwise it takes the
  name back or says why it cannot trace.

An owner that does not know the kind (an older gpulens, or ``gpulens
trace``'s short-lived owner) does not list it in its hello; the agent then
keeps serving without traces and tries again on a slow timer.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass

from gpulens.core.sanitize import clean_text
from gpulens.ipc import stream
from gpulens.ipc.control import control_name, peer_allowed, peer_cred
from gpulens.ipc.errors import IpcError
from gpulens.ipc.principal import Principal

KIND = "endpoint_handover"
"""The request kind an endpoint owner that can hand over lists in its hello."""
MAX_ANSWER_FRAME = 64 * 1024
"""Largest frame the asking agent reads from the holder (a hello or a response is ~300 bytes)."""


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
    """What the holder said: ``released`` (the name is free now), or why not.

    ``supported`` False: the holder does not know the request (an older
    gpulens, a ``gpulens trace`` owner) or serves no control socket at all.
    """

    released: bool
    reason: str = ""
    supported: bool = True


def request_handover(socket_dir: str | None, holder_pid: int, holder_uid: int, timeout_s: float) -> HandoverAnswer:
    """Ask the gpulens holding the Kineto name (pid ``holder_pid``, uid ``holder_uid``) to hand it over.

    Never raises for what the holder does: a refusal, a wrong peer, a
    protocol error or a timeout comes back as the answer's reason.
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    name = control_name(socket_dir, holder_uid)
    shown = "@" + name[1:].decode(errors="replace")
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
        return _ask(sock, time.monotonic() + timeout_s)
    except OSError as err:
        return HandoverAnswer(False, f"control socket {shown}: {err.strerror or err}")
    finally:
        sock.close()


def _ask(sock: socket.socket, deadline: float) -> HandoverAnswer:
    """The handshake, then one request; the holder's answer."""
    decoder = stream.FrameDecoder(max_frame_bytes=MAX_ANSWER_FRAME)
    pending: list[stream.Message] = []

    def next_msg() -> stream.Message | None:
        while not pending:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no answer in time")
            sock.settimeout(left)
            data = sock.recv(65536)
            if not data:
                return None
            pending.extend(decoder.feed(data))
        return pending.pop(0)

    try:
        hello = next_msg()
        if hello is None:
            return HandoverAnswer(False, "it closed the connection before its hello (it does not serve this user)")
        if not isinstance(hello, stream.Hello) or hello.role != "agent":
            return HandoverAnswer(False, "it did not greet as a gpulens endpoint owner", False)
        if KIND not in hello.caps:
            return HandoverAnswer(False, "it does not hand the endpoint over (an older gpulens, or 'gpulens trace')",
                                  False)
        sock.sendall(stream.encode(stream.Hello(proto=stream.PROTOCOL_VERSION, role="viewer")))
        sock.sendall(stream.encode(stream.Request(id=1, kind=KIND, params={})))
        while True:
            msg = next_msg()
            if msg is None:
                return HandoverAnswer(False, "it closed the connection without an answer")
            if isinstance(msg, stream.ErrorMsg):
                return HandoverAnswer(False, f"it refused the connection: {clean_text(msg.message)}"[:300])
            if isinstance(msg, stream.Response) and msg.id == 1:
                if msg.ok:
                    return HandoverAnswer(True)
                return HandoverAnswer(False, clean_text(msg.error)[:300] or "it refused without a reason")
    except TimeoutError:  # before OSError: a subclass
        return HandoverAnswer(False, "it did not answer in time")
    except (IpcError, ValueError) as err:
        return HandoverAnswer(False, clean_text(f"it sent something that is not the gpulens protocol: {err}")[:300])
