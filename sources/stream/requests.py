"""The requests one connection to an agent has in flight: the viewer's one pending-request table.

Every viewer-side connection (:class:`~gpulens.sources.stream.link.HostLink`,
used by the TUI's ``StreamSource``, by ``gpulens trace/profile --host`` and,
over the local control socket, by ``gpulens trace``) keeps its requests in
a :class:`RequestTable`, one per connection::

    table = RequestTable(chan.send, download_dir, prefix=host)
    fut = table.submit(ProfileParams(pids=(1234,)), timeout_s=30)
    ...                                   # the reader routes what the agent sends:
    table.add_samples(msg.id, samples)    # history answer
    table.chunk(msg)                      # a file chunk, saved by PendingRequest
    table.respond(msg)                    # the answer: the future gets a RequestResult
    table.close("the agent closed the connection")   # every pending request fails

A request ends exactly once: with its answer, an error answer, a local
failure to save (:class:`~gpulens.sources.stream.downloads.SaveFailed`, only
that request fails), its timeout (``TimeoutError``) or the connection's end
(``RequestFailed("connection lost: ...")``). On every failure its partial
files are deleted (docs/security.md). One lock guards the table; it is never
held while sending or writing a file.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path

from gpulens.core.errors import SchemaError
from gpulens.core.events import RequestParams, RequestResult
from gpulens.core.model import HostSample
from gpulens.core.sanitize import clean_data, clean_text
from gpulens.ipc import stream
from gpulens.ipc.errors import ProtocolError, ProtocolProblem, RequestFailed
from gpulens.sources.stream.downloads import PendingRequest, SaveFailed

__all__ = ["MAX_REQUEST_SAMPLES", "RequestResult", "RequestTable"]  # RequestResult: core.events', the seam's

MAX_REQUEST_SAMPLES = 1_000_000
"""History samples one request may bring back."""


class RequestTable:
    """The pending requests of one connection (thread-safe).

    ``send`` writes one encoded frame to the agent; files the agent sends
    are saved under ``download_dir`` as ``PREFIX-NAME`` (``prefix`` is
    sanitised: it may be the peer's host name).
    """

    def __init__(self, send: Callable[[bytes], None], download_dir: Path, prefix: str) -> None:
        self._send = send
        self._dir = download_dir
        self._prefix = prefix
        self._pending: dict[int, PendingRequest] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._closed: str | None = None

    def submit(self, params: RequestParams, timeout_s: float) -> Future[RequestResult]:
        """Send ``params`` as one ``request`` frame; the future fails with RequestFailed or, after ``timeout_s``,
        TimeoutError."""
        kind = params.kind
        fut: Future[RequestResult] = Future()
        with self._lock:
            if self._closed is not None:
                fut.set_exception(RequestFailed(f"connection lost: {self._closed}"))
                return fut
            rid = next(self._ids)
            self._pending[rid] = PendingRequest(fut)
        try:
            self._send(stream.encode(stream.Request(id=rid, kind=kind, params=params.wire())))
        except (OSError, ProtocolError) as err:
            self.fail(rid, RequestFailed(f"cannot send the request: {err}"))
            return fut
        expired = TimeoutError(f"{kind} request timed out after {timeout_s:g} s")
        timer = threading.Timer(timeout_s, self.fail, (rid, expired))
        timer.daemon = True
        timer.start()
        fut.add_done_callback(lambda _f: timer.cancel())
        return fut

    def pending(self) -> int:
        """How many requests await their answer."""
        with self._lock:
            return len(self._pending)

    def add_samples(self, rid: int, samples: Sequence[HostSample]) -> None:
        """History samples for request ``rid`` (ignored when it is not pending).

        Raises:
            ProtocolError: more than :data:`MAX_REQUEST_SAMPLES` for one request.
        """
        with self._lock:
            p = self._pending.get(rid)
            if p is None:
                return
            if len(p.samples) + len(samples) > MAX_REQUEST_SAMPLES:
                raise ProtocolError("history answer larger than the viewer accepts",
                                    problem=ProtocolProblem.ANSWER_TOO_LARGE)
            p.samples.extend(samples)

    def chunk(self, msg: stream.FileChunk) -> None:
        """Save one file chunk of a pending request; a local failure to save fails only that request.

        Raises:
            ProtocolError: an unsafe name, a chunk out of order, too many files or bytes.
        """
        with self._lock:
            p = self._pending.get(msg.id)
        if p is None:
            return
        try:
            p.write_chunk(msg, self._dir, self._prefix)
        except SaveFailed as err:  # our disk, not the agent: only this request fails
            self.fail(msg.id, err)

    def respond(self, msg: stream.Response) -> None:
        """The agent's answer to a request: its future gets a RequestResult, or fails with RequestFailed."""
        if not msg.ok:
            self.fail(msg.id, RequestFailed(clean_text(msg.error[:2000]) or "request failed"))
            return
        with self._lock:
            p = self._pending.pop(msg.id, None)
        if p is None:
            return
        files = p.finish()
        if p.future.done():
            return
        try:
            result = clean_data(msg.result)
        except SchemaError as err:
            p.future.set_exception(RequestFailed(f"the agent's answer is malformed: {err}"))
            return
        p.future.set_result(RequestResult(result, files, tuple(p.samples)))

    def fail(self, rid: int, err: BaseException) -> None:
        """End request ``rid`` with ``err`` and delete its files (nothing when it has ended already)."""
        with self._lock:
            p = self._pending.pop(rid, None)
        if p is not None:
            _fail(p, err)

    def close(self, reason: str) -> None:
        """Fail every pending request with ``connection lost: reason``; later submits fail too. Idempotent."""
        with self._lock:
            if self._closed is None:
                self._closed = reason
            pending, self._pending = self._pending, {}
        for p in pending.values():
            _fail(p, RequestFailed(f"connection lost: {reason}"))


def _fail(p: PendingRequest, err: BaseException) -> None:
    p.abort()
    if not p.future.done():
        p.future.set_exception(err)
