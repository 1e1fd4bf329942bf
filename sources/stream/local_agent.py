"""A small synchronous viewer for one agent on this host, over its local control socket.

``gpulens trace`` uses it when ``gpulens agent`` holds the Kineto name here
(see ``gpulens.ipc.control``). It speaks the stream protocol
(docs/protocol.md) and offers the same ``request(host, kind, params,
timeout_s) -> Future[RequestResult]`` as ``StreamSource``, so the trace
command has one code path for both. Live samples are read and dropped.

Squatting: anyone can bind an abstract name first. Before anything is sent,
the kernel's ``SO_PEERCRED`` must show the pid holding the Kineto name and a
uid that is the caller's own or root's; a root caller accepts only root (a
user's process must never receive root's request or write root's ``-o``
file). Errors, results and file names from the peer are checked and
cleaned as on the stream (``collectors.downloads``, ``collectors.sanitize``).
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import threading
from collections.abc import Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from gpulens.core.errors import SchemaError
from gpulens.core.sanitize import clean_data, clean_text
from gpulens.ipc import stream
from gpulens.ipc.control import control_name, peer_cred
from gpulens.ipc.errors import RequestFailed, StreamError
from gpulens.sources.stream.downloads import PendingRequest, SaveFailed
from gpulens.sources.stream.link import RequestResult

HANDSHAKE_S = 15.0


def trusted_peer(peer_uid: int, my_uid: int) -> bool:
    """May a request of ``my_uid`` go to a process of ``peer_uid``? Only to oneself or root."""
    return peer_uid in (my_uid, 0)


class LocalAgentLink:
    """One connection to the control socket of the agent holding this host's Kineto name.

    Raises StreamError from the constructor with a sentence saying why when
    there is no such socket, when its owner is not the expected agent (pid
    ``agent_pid``) or not an allowed user, or when the handshake fails.
    """

    def __init__(self, socket_dir: str | None, agent_pid: int, agent_uid: int, download_dir: Path) -> None:
        import os

        self.download_dir = download_dir
        self.address = f"local agent (pid {agent_pid})"
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        name = control_name(socket_dir, agent_uid)
        try:
            self._sock.settimeout(HANDSHAKE_S)
            self._sock.connect(name)
        except OSError as err:
            self._sock.close()
            raise StreamError(
                f"the gpulens process {agent_pid} holding the Kineto name serves no control socket "
                f"(@{name[1:].decode()}: {err.strerror or err}); is it an older agent, or a TUI?"
            ) from err
        pid, uid = peer_cred(self._sock)
        me = os.geteuid()
        if pid != agent_pid:
            self._sock.close()
            raise StreamError(
                f"the control socket belongs to pid {pid} (uid {uid}), not to the agent holding the "
                f"Kineto name (pid {agent_pid}): refusing to use it"
            )
        if not trusted_peer(uid, me):
            self._sock.close()
            raise StreamError(
                f"the Kineto name is held by pid {pid} of uid {uid}, not by a gpulens agent of yours or "
                "root's: refusing to send it your request; it may be squatting"
            )
        self._dec = stream.FrameDecoder()
        self._ids = itertools.count(1)
        self._pending: dict[int, PendingRequest] = {}
        self._lock = threading.Lock()
        self._closed = False
        self.hello = self._handshake()
        self._sock.settimeout(None)
        self._reader = threading.Thread(target=self._read, name="gpulens-local-agent", daemon=True)
        self._reader.start()

    def _handshake(self) -> stream.Hello:
        while True:
            for msg in self._recv():
                if isinstance(msg, stream.ErrorMsg):
                    self.close()
                    raise StreamError(f"agent refused: {clean_text(msg.message[:300])}")
                if isinstance(msg, stream.Challenge):
                    self.close()
                    raise StreamError("the agent asked for a token on its local control socket")
                if isinstance(msg, stream.Hello) and msg.role == "agent":
                    stream.check_version(msg.proto)
                    self._send(stream.Hello(proto=stream.PROTOCOL_VERSION, role="viewer"))
                    return msg

    def _recv(self) -> list[stream.Message]:
        try:
            data = self._sock.recv(256 * 1024)
        except OSError as err:
            raise StreamError(f"local agent: {err.strerror or err}") from err
        if not data:
            raise StreamError("the local agent closed the connection")
        return list(self._dec.feed(data))

    def _send(self, msg: stream.Message) -> None:
        with self._lock:
            self._sock.sendall(stream.encode(msg))

    def request(self, host: str, kind: str, params: Mapping[str, Any], timeout_s: float) -> Future[RequestResult]:
        """Send a request (``host`` is ignored: there is one agent); fails with RequestFailed or TimeoutError."""
        fut: Future[RequestResult] = Future()
        rid = next(self._ids)
        with self._lock:
            if self._closed:
                fut.set_exception(RequestFailed("the local agent connection is closed"))
                return fut
            self._pending[rid] = PendingRequest(fut)
        try:
            self._send(stream.Request(id=rid, kind=kind, params=dict(params)))
        except OSError as err:
            self._finish(rid, RequestFailed(f"cannot send the request: {err}"))
            return fut
        timer = threading.Timer(timeout_s, self._finish, (rid, TimeoutError(f"{kind} request timed out after {timeout_s:g} s")))
        timer.daemon = True
        timer.start()
        fut.add_done_callback(lambda _f: timer.cancel())
        return fut

    def _finish(self, rid: int, outcome: Any) -> None:
        """End request ``rid``: an exception fails it (its files deleted); else ``outcome`` is the result."""
        with self._lock:
            p = self._pending.pop(rid, None)
        if p is None:
            return
        if isinstance(outcome, BaseException):
            p.abort()
            if not p.future.done():
                p.future.set_exception(outcome)
            return
        files = p.finish()
        if p.future.done():
            return
        try:
            result = clean_data(outcome)
        except SchemaError as err:
            p.future.set_exception(RequestFailed(f"the agent's answer is malformed: {err}"))
            return
        p.future.set_result(RequestResult(result, files))

    def _read(self) -> None:
        reason = "the local agent closed the connection"
        try:
            while not self._closed:
                for msg in self._recv():
                    self._dispatch(msg)
        except (StreamError, OSError) as err:
            reason = clean_text(str(err))
        self.close(reason)

    def _dispatch(self, msg: stream.Message) -> None:
        if isinstance(msg, stream.FileChunk):
            self._chunk(msg)
        elif isinstance(msg, stream.Response):
            with self._lock:
                p = self._pending.get(msg.id)
            if p is None:
                return
            if msg.ok:
                self._finish(msg.id, msg.result)
            else:
                self._finish(msg.id, RequestFailed(clean_text(msg.error[:2000]) or "request failed"))
        elif isinstance(msg, stream.ErrorMsg):
            raise StreamError(f"agent refused: {clean_text(msg.message[:300])}")
        # samples and history are not needed here

    def _chunk(self, msg: stream.FileChunk) -> None:
        with self._lock:
            p = self._pending.get(msg.id)
        if p is None:
            return
        try:
            p.write_chunk(msg, self.download_dir, "local")
        except SaveFailed as err:  # our disk, not the agent: only this request fails
            self._finish(msg.id, err)

    def close(self, reason: str = "closed") -> None:
        """Close the connection; pending requests fail with ``reason``. Idempotent."""
        with self._lock:
            self._closed = True
            rids = list(self._pending)
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._sock.close()
        for rid in rids:
            self._finish(rid, RequestFailed(f"connection lost: {reason}"))
