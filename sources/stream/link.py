"""One viewer-side link to one agent: connect, handshake, read, reconnect.

A :class:`HostLink` runs in its own thread. It connects (TCP or a command
such as ssh), authenticates when the agent asks, sends its hello with
``since`` = the newest sample time it has seen from that host, and then
turns frames into :class:`SampleEvent` s. The agent answers ``since`` with
every kept sample newer than it (emitted with ``backfill=True``) before the
live stream, so a reconnect loses nothing the agent kept. On any failure
the link emits a down :class:`HostStatusEvent` with the reason and retries
with capped exponential backoff.

This is the one stream client: ``StreamSource`` (the TUI, ``gpulens
trace/profile --host``) runs one HostLink per agent, and the local
control-socket client (``local_agent.py``) runs one :meth:`HostLink.serve`
session on its own channel. Requests of a session live in its
:class:`~gpulens.sources.stream.requests.RequestTable`.

What the link trusts (docs/security.md): nothing the agent says until it is
checked. The handshake (:mod:`gpulens.sources.stream.handshake`) has the
agent prove it holds the token, when the viewer has one, and checks its hello,
which must name a host; every sample (live or history) must carry that name,
or the session ends with a ProtocolError. Samples are checked by
``core.sanitize`` at decode; every string the agent sends that is
shown (errors, results, ssh stderr) loses its control characters.
"""

from __future__ import annotations

import logging
import random
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from gpulens.core.dirs import cache_dir
from gpulens.core.errors import SchemaError
from gpulens.core.events import Emit, HostStatusEvent, RequestParams, SampleEvent
from gpulens.core.model import HostSample
from gpulens.core.sanitize import clean_text
from gpulens.ipc import stream
from gpulens.ipc.channels import ChannelClosed, CommandChannel, TcpChannel
from gpulens.ipc.errors import (
    ProtocolError,
    ProtocolProblem,
    RequestFailed,
    StreamError,
    StreamProblem,
    VersionMismatch,
)
from gpulens.ipc.reactor import Reactor
from gpulens.ipc.stream_decode import FrameDecoder
from gpulens.sources.stream.handshake import handshake, refusal
from gpulens.sources.stream.requests import RequestResult, RequestTable

log = logging.getLogger("gpulens.stream")

HANDSHAKE_TIMEOUT_S = 15.0


@dataclass(frozen=True, slots=True)
class Target:
    """Where one agent is: ``tcp`` host:port, or a ``command`` (ssh) argv."""

    address: str
    kind: str
    host: str = ""
    port: int = 0
    tls: bool = False
    argv: tuple[str, ...] = ()


class Channel(Protocol):
    """A byte channel to one agent (``ipc.channels``, or the local control socket)."""

    def recv(self, timeout_s: float) -> bytes:
        """Up to one buffer; ``b""`` at end of stream; TimeoutError when idle."""
        ...

    def send(self, data: bytes) -> None:
        """Send all of ``data`` (thread-safe)."""
        ...

    def describe_eof(self) -> str:
        """Why the stream ended."""
        ...

    def close(self) -> None:
        """Close; idempotent."""
        ...


@dataclass(frozen=True, slots=True)
class LinkOptions:
    """Settings shared by every link of a StreamSource."""

    token: bytes | None = None
    ssl_context: ssl.SSLContext | None = None
    connect_timeout_s: float = 5.0
    backoff_min_s: float = 0.5
    backoff_max_s: float = 30.0
    idle_timeout_s: float = 20.0
    """Silence after which an agent is taken for gone (at least 10 of its intervals)."""
    initial_history_s: float = 0.0
    download_dir: Path | None = None
    """Where files that requests bring back are saved (None: ``$XDG_CACHE_HOME/gpulens/downloads``)."""
    download_prefix: str | None = None
    """The saved files' name prefix (None: the agent's host name)."""


class HostLink:
    """The connection thread for one agent.

    :meth:`serve` runs one session on a channel the caller opened (the
    local control socket): the handshake on the calling thread, the rest on
    the link's thread, no reconnect.
    """

    def __init__(
        self, target: Target, emit: Emit, options: LinkOptions, stop: threading.Event, reactor: Reactor | None = None
    ) -> None:
        self.target = target
        self.reactor = reactor
        self._handle: object | None = None
        self.emit = emit
        self.opt = options
        self._stop = stop
        self.host: str | None = None
        self.up = False
        self.last_time: dict[str, float] = {}
        self._chan: Channel | None = None
        self._requests: RequestTable | None = None
        self._idle_s = options.idle_timeout_s
        self._first = b""
        self.thread = threading.Thread(target=self._run, name=f"gpulens-link-{target.address}", daemon=True)
        self.on_host: Callable[[HostLink], None] | None = None

    # -- lifecycle --------------------------------------------------------------
    def _run(self) -> None:
        backoff = self.opt.backoff_min_s
        last_reason = None
        while not self._stop.is_set():
            reason = self._guarded(self._connect)
            self.hang_up(reason or "disconnected")
            if self._stop.is_set():
                break
            was_up = self.up
            self.up = False
            if was_up or reason != last_reason:
                self.emit(
                    HostStatusEvent(
                        host=self.host or self.target.address,
                        up=False,
                        reason=reason or "disconnected",
                        time=time.time(),
                        address=self.target.address,
                    )
                )
            last_reason = reason
            if was_up:
                backoff = self.opt.backoff_min_s
            self._stop.wait(backoff * random.uniform(0.8, 1.2))
            backoff = min(backoff * 2, self.opt.backoff_max_s)

    def _connect(self) -> None:
        self._chan = self._open()
        self._session(self._chan)

    def _guarded(self, body: Callable[[], None]) -> str:
        """Run ``body`` (a session); the reason it ended, as shown to the user ("" when it returned)."""
        try:
            body()
        except (StreamError, SchemaError, ChannelClosed, ssl.SSLError, OSError) as err:
            return _describe(err)
        except Exception as err:  # last resort of the link's thread: pending requests still fail, it reconnects
            log.exception("link %s", self.target.address)
            return f"internal error: {type(err).__name__}: {err}"
        return ""

    def _open(self) -> Channel:
        t = self.target
        if t.kind == "tcp":
            return TcpChannel(
                t.host,
                t.port,
                connect_timeout_s=self.opt.connect_timeout_s,
                ssl_context=self.opt.ssl_context if t.tls else None,
            )
        return CommandChannel(t.argv)

    def serve(self, chan: Channel) -> stream.Hello:
        """Handshake on ``chan`` now, then serve it on :attr:`thread` until it ends; the agent's hello.

        For a channel opened by the caller; there is no reconnect, and when
        the session ends (or the handshake fails, which raises why) the
        channel is closed and pending requests fail.
        """
        self._chan = chan
        began = False
        try:
            hello, decoder, backlog = self._begin(chan)
            began = True
        finally:
            if not began:  # the error goes on to the caller
                self.hang_up("handshake failed")

        def session() -> None:
            self.hang_up(self._guarded(lambda: self._serve(chan, decoder, hello.host, backlog)) or "disconnected")
            self.up = False

        self.thread = threading.Thread(target=session, name=f"gpulens-link-{self.target.address}", daemon=True)
        self.thread.start()
        return hello

    def hang_up(self, reason: str) -> None:
        """End the session now: pending requests fail with ``connection lost: reason``; close the channel."""
        table = self._requests
        if table is not None:  # first: the reader, woken by the close, must not give its own reason
            table.close(reason)
        chan, self._chan = self._chan, None
        if chan is not None:
            chan.close()

    def close(self) -> None:
        """Wake the thread (the source's stop event must be set first)."""
        handle = self._handle
        if handle is not None and self.reactor is not None:
            self.reactor.detach(handle, "viewer stopping")
        chan = self._chan
        if chan is not None:
            chan.close()

    # -- session ----------------------------------------------------------------
    def _read(self, chan: Channel, decoder: FrameDecoder, deadline: float | None) -> list[stream.Message]:
        """The messages completed by one read (maybe none); raises when idle, closed or stopped."""
        if self._stop.is_set():
            raise StreamError("stopped", problem=StreamProblem.STOPPED)
        timeout = self._idle_s if deadline is None else max(0.1, deadline - time.monotonic())
        try:
            data = chan.recv(timeout)
        except TimeoutError:
            if deadline is not None:
                raise StreamError(f"no answer from the agent within {HANDSHAKE_TIMEOUT_S:.0f} s",
                                  problem=StreamProblem.HANDSHAKE_TIMEOUT) from None
            raise StreamError(f"no data from the agent for {self._idle_s:.0f} s", problem=StreamProblem.IDLE) from None
        if not data:
            raise ChannelClosed(chan.describe_eof())
        if deadline is not None and len(self._first) < 48:
            self._first += data[: 48 - len(self._first)]
        return decoder.feed(data)

    def _session(self, chan: Channel) -> None:
        hello, decoder, backlog = self._begin(chan)
        self._serve(chan, decoder, hello.host, backlog)

    def _begin(self, chan: Channel) -> tuple[stream.Hello, FrameDecoder, deque[stream.Message]]:
        """Handshake, send our hello, open the request table; the hello, decoder and messages read past it."""
        decoder = FrameDecoder()
        self._first = b""
        # Messages read with the hello but after it (a sample in the same read) wait here.
        backlog: deque[stream.Message] = deque()
        deadline = time.monotonic() + HANDSHAKE_TIMEOUT_S
        try:
            hello = handshake(lambda: self._read(chan, decoder, deadline), chan.send, self.opt.token, backlog)
        except ProtocolError as err:
            if isinstance(err, VersionMismatch) or not isinstance(chan, CommandChannel):
                raise
            # The usual cause over ssh: a login script that prints to stdout.
            raise ProtocolError(
                f"{err}; the command's output began {self._first!r} (is something printing "
                "to stdout on login, or is 'gpulens' not the agent there?)",
                problem=err.problem,
            ) from err
        host = hello.host
        self.host = host
        if hello.interval_s and 0 < hello.interval_s < 86400:
            self._idle_s = max(self.opt.idle_timeout_s, 10 * hello.interval_s)
        since = self.last_time.get(host)
        if since is None and self.opt.initial_history_s > 0:
            since = time.time() - self.opt.initial_history_s
        chan.send(stream.encode(stream.Hello(proto=stream.PROTOCOL_VERSION, role="viewer", since=since)))
        download_dir = self.opt.download_dir or cache_dir() / "downloads"
        self._requests = RequestTable(chan.send, download_dir, self.opt.download_prefix or host)
        self.up = True
        if self.on_host is not None:
            self.on_host(self)
        self.emit(HostStatusEvent(host=host, up=True, reason="connected", time=time.time(), address=self.target.address))
        return hello, decoder, backlog

    def _serve(self, chan: Channel, decoder: FrameDecoder, host: str, backlog: deque[stream.Message]) -> None:
        """Dispatch what the agent sends until the session ends (raises why)."""
        while backlog:
            self._dispatch(host, backlog.popleft())
        if self.reactor is not None and isinstance(chan, TcpChannel) and not chan.tls:
            self._session_on_reactor(self.reactor, chan, decoder, host)
            return
        while True:
            for msg in self._read(chan, decoder, None):
                self._dispatch(host, msg)

    def _session_on_reactor(self, reactor: Reactor, chan: TcpChannel, decoder: FrameDecoder, host: str) -> None:
        ended = threading.Event()
        outcome: list[tuple[BaseException | None, str]] = []

        def on_data(data: bytes) -> None:
            for msg in decoder.feed(data):
                self._dispatch(host, msg)

        def on_end(err: BaseException | None, reason: str) -> None:
            outcome.append((err, reason))
            ended.set()

        chan.sock.settimeout(self._idle_s)  # bounds request sends; reads happen only when ready
        self._handle = reactor.attach(chan.sock, on_data, on_end, self._idle_s)
        if self._stop.is_set():  # stop() raced the attach
            reactor.detach(self._handle, "viewer stopping")
        ended.wait()  # no polling: close() or the reactor ends the session
        self._handle = None
        if self._stop.is_set():
            return
        err, reason = outcome[0]
        if err is not None:
            raise err
        raise ChannelClosed(reason)

    def _dispatch(self, host: str, msg: stream.Message) -> None:
        if isinstance(msg, stream.SampleMsg):
            self._deliver(host, msg.sample, backfill=False)
        elif isinstance(msg, stream.History):
            samples = [_own(host, s) for s in msg.samples]
            if msg.id == 0:
                for s in samples:
                    self._deliver(host, s, backfill=True)
            else:
                self._table().add_samples(msg.id, samples)
        elif isinstance(msg, stream.FileChunk):
            self._table().chunk(msg)
        elif isinstance(msg, stream.Response):
            self._table().respond(msg)
        elif isinstance(msg, stream.ErrorMsg):
            raise refusal(msg)
        else:
            raise ProtocolError(f"unexpected message '{stream.to_wire(msg)['t']}' from the agent",
                                problem=ProtocolProblem.UNEXPECTED_MESSAGE)

    def _deliver(self, host: str, sample: HostSample, backfill: bool) -> None:
        _own(host, sample)
        last = self.last_time.get(sample.host)
        if last is not None and sample.time <= last:
            return  # already delivered (overlap between live and backfill)
        self.last_time[sample.host] = sample.time
        self.emit(SampleEvent(sample, backfill=backfill))

    def _table(self) -> RequestTable:
        table = self._requests
        if table is None:  # only before the first hello, when nothing is dispatched
            raise StreamError("no session", problem=StreamProblem.NO_SESSION)
        return table

    # -- requests ---------------------------------------------------------------
    def request(self, params: RequestParams, timeout_s: float) -> Future[RequestResult]:
        """Send ``params`` (its kind and map); the future fails with RequestFailed or TimeoutError."""
        table = self._requests
        if table is None or self._chan is None or not self.up:
            fut: Future[RequestResult] = Future()
            fut.set_exception(RequestFailed(f"{self.host or self.target.address} is not connected"))
            return fut
        return table.submit(params, timeout_s)


def _own(host: str, sample: HostSample) -> HostSample:
    """``sample`` if it carries ``host`` (the hello's); else the session ends."""
    if sample.host != host:
        raise ProtocolError(
            f"the agent sent a sample for host {sample.host[:80]!r} but its hello declared {host[:80]!r}; "
            "an agent may publish only its own host's samples",
            problem=ProtocolProblem.FOREIGN_SAMPLE,
        )
    return sample


def _describe(err: BaseException) -> str:
    """The down reason shown for ``err`` (control characters removed: parts may come from the agent)."""
    if isinstance(err, StreamError | SchemaError):
        text = f"{err.title}: {err}"
    elif isinstance(err, ssl.SSLError):
        text = f"TLS: {err.reason or err}"
    elif isinstance(err, OSError):
        text = err.strerror or str(err) or type(err).__name__
    else:
        text = str(err)
    return clean_text(text)
