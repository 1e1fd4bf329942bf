"""The stream client over this host's agent control socket: a transport for the one client link.

``gpulens trace`` uses it when ``gpulens agent`` holds the Kineto name here
(see ``gpulens.ipc.control``). Only the transport is its own: a Unix
socket whose holder the kernel names (``SO_PEERCRED``). The session —
handshake, checked hello, samples (read and dropped), the pending-request
table, chunk writing — is :class:`~gpulens.sources.stream.link.HostLink`'s,
as for ``--host`` and the TUI. It offers the same ``request(host,
params, timeout_s) -> Future[RequestResult]`` as ``StreamSource``, so the
trace command has one code path for both.

Squatting: anyone can bind an abstract name first. Before anything is sent,
the kernel's ``SO_PEERCRED`` must show the pid holding the Kineto name and a
uid that is the caller's own or root's; a root caller accepts only root (a
user's process must never receive root's request or write root's ``-o``
file). Errors, results and file names from the peer are checked and
cleaned as on the stream (``sources.stream.downloads``, ``core.sanitize``).
"""

from __future__ import annotations

import enum
import os
import socket
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from gpulens.core.events import RequestParams, SourceEvent
from gpulens.core.reasons import Reason, ReasonText
from gpulens.ipc.channels import RECV_BYTES, ChannelClosed
from gpulens.ipc.control import control_name, peer_cred
from gpulens.ipc.errors import RequestFailed, StreamError, StreamProblem
from gpulens.sources.stream.handshake import TokenRequired
from gpulens.sources.stream.link import HostLink, LinkOptions, Target
from gpulens.sources.stream.requests import RequestResult

HANDSHAKE_S = 15.0
NO_IDLE_LIMIT_S = 7 * 86400.0
"""A silent local agent is waited for (its requests still time out on their own)."""


def trusted_peer(peer_uid: int, my_uid: int) -> bool:
    """May a request of ``my_uid`` go to a process of ``peer_uid``? Only to oneself or root."""
    return peer_uid in (my_uid, 0)


class HolderKind(enum.Enum):
    """Why the holder of the Kineto name gets none of our requests; the comment says which fields it fills."""

    OTHER_USER = "other-user"  # pid, uid: another user's process, not root's (it may be squatting the name)


@dataclass(frozen=True, slots=True)
class HolderRefusal(Reason):
    """Why our request must not go to the holder of the Kineto name: ``kind`` and the facts; ``str()`` the sentence."""

    kind: HolderKind
    pid: int
    uid: int

    TEXT: ClassVar[ReasonText] = {
        HolderKind.OTHER_USER: ("the Kineto name is held by pid {0.pid} of uid {0.uid}, not by a gpulens agent of "
                                "yours or root's: refusing to send it your request; it may be squatting"),
    }


class ControlChannel:
    """A connection to the control socket of the agent holding this host's Kineto name.

    Raises StreamError from the constructor with a sentence saying why when
    there is no such socket, or when its owner is not the expected agent
    (pid ``agent_pid``) or not an allowed user; nothing is sent before.
    """

    def __init__(self, socket_dir: str | None, agent_pid: int, agent_uid: int) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        name = control_name(socket_dir, agent_uid)
        try:
            sock.settimeout(HANDSHAKE_S)
            sock.connect(name)
        except OSError as err:
            sock.close()
            raise StreamError(
                f"the gpulens process {agent_pid} holding the Kineto name serves no control socket "
                f"(@{name[1:].decode()}: {err.strerror or err}); is it an older agent, or a TUI?",
                problem=StreamProblem.NO_CONTROL_SOCKET,
            ) from err
        self.sock = sock
        pid, uid = peer_cred(sock)
        if pid != agent_pid:
            self.close()
            raise StreamError(
                f"the control socket belongs to pid {pid} (uid {uid}), not to the agent holding the "
                f"Kineto name (pid {agent_pid}): refusing to use it",
                problem=StreamProblem.NOT_THE_HOLDER,
            )
        if not trusted_peer(uid, os.geteuid()):
            self.close()
            raise StreamError(str(HolderRefusal(HolderKind.OTHER_USER, pid, uid)),
                              problem=StreamProblem.UNTRUSTED_HOLDER)
        self._send_lock = threading.Lock()

    def recv(self, timeout_s: float) -> bytes:
        """Up to RECV_BYTES; ``b""`` at end of stream; TimeoutError when idle."""
        self.sock.settimeout(timeout_s)
        return self.sock.recv(RECV_BYTES)

    def send(self, data: bytes) -> None:
        """Send all of ``data`` (thread-safe)."""
        with self._send_lock:
            self.sock.sendall(data)

    def describe_eof(self) -> str:
        """Why the stream ended."""
        return "the local agent closed the connection"

    def close(self) -> None:
        """Shut the socket down (waking its reader) and close it; idempotent."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # never connected, or closed already
        finally:
            self.sock.close()


class LocalAgentLink:
    """One session with the local agent over its control socket (a :class:`HostLink` on a ControlChannel).

    Raises StreamError from the constructor with a sentence saying why when
    the control socket is missing or not the agent's (:class:`ControlChannel`),
    or when the handshake fails. Files are saved under ``download_dir`` as
    ``local-NAME``.
    """

    def __init__(self, socket_dir: str | None, agent_pid: int, agent_uid: int, download_dir: Path) -> None:
        self.download_dir = download_dir
        self.agent_pid = agent_pid
        self.address = f"local agent (pid {agent_pid})"
        chan = ControlChannel(socket_dir, agent_pid, agent_uid)
        options = LinkOptions(idle_timeout_s=NO_IDLE_LIMIT_S, download_dir=download_dir, download_prefix="local")
        self._stop = threading.Event()
        self._link = HostLink(Target(address=self.address, kind="control"), _drop, options, self._stop)
        try:
            self.hello = self._link.serve(chan)
        except TokenRequired as err:
            raise StreamError("the agent asked for a token on its local control socket",
                              problem=StreamProblem.TOKEN_REQUIRED) from err
        except ChannelClosed as err:
            raise StreamError(str(err), problem=StreamProblem.CLOSED) from err
        except OSError as err:
            raise StreamError(f"local agent: {err.strerror or err}", problem=StreamProblem.SOCKET_ERROR) from err

    def request(self, host: str, params: RequestParams, timeout_s: float) -> Future[RequestResult]:
        """Send a request (``host`` is ignored: there is one agent); fails with RequestFailed or TimeoutError."""
        if self._stop.is_set() or not self._link.up:
            fut: Future[RequestResult] = Future()
            fut.set_exception(RequestFailed("the local agent connection is closed"))
            return fut
        return self._link.request(params, timeout_s)

    def close(self, reason: str = "closed") -> None:
        """Close the connection; pending requests fail with ``reason``. Idempotent."""
        self._stop.set()
        self._link.hang_up(reason)


def _drop(_event: SourceEvent) -> None:
    """Samples from the local agent are not needed here."""
