"""One viewer-side link to one agent: connect, handshake, read, reconnect.

A :class:`HostLink` runs in its own thread. It connects (TCP or a command
such as ssh), authenticates when the agent asks, sends its hello with
``since`` = the newest sample time it has seen from that host, and then
turns frames into :class:`SampleEvent` s. The agent answers ``since`` with
every kept sample newer than it (emitted with ``backfill=True``) before the
live stream, so a reconnect loses nothing the agent kept. On any failure
the link emits a down :class:`HostStatusEvent` with the reason and retries
with capped exponential backoff.

What the link trusts (docs/security.md): nothing the agent says until it is
checked. With a token the agent must prove it holds it too (challenge,
then an ``auth_ok`` whose MAC verifies) before its hello is accepted; its
hello must name a host, and every sample (live or history) must carry that
name, or the session ends with a ProtocolError. Samples are checked by
``collectors.sanitize`` at decode; every string the agent sends that is
shown (errors, results, ssh stderr) loses its control characters.
"""

from __future__ import annotations

import itertools
import logging
import random
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpulens.core.errors import SchemaError
from gpulens.core.events import Emit, HostStatusEvent, SampleEvent
from gpulens.core.model import HostSample
from gpulens.core.sanitize import clean_data, clean_text
from gpulens.ipc import auth, stream
from gpulens.ipc.channels import ChannelClosed, CommandChannel, TcpChannel
from gpulens.ipc.errors import AuthError, ProtocolError, RequestFailed, StreamError, VersionMismatch
from gpulens.ipc.fast_decode import fast_sample_from_dict as sample_from_dict
from gpulens.ipc.fast_decode import sample_from_msgpack
from gpulens.ipc.reactor import Reactor
from gpulens.sources.stream.downloads import PendingRequest, SaveFailed

log = logging.getLogger("gpulens.stream")

HANDSHAKE_TIMEOUT_S = 15.0
MAX_REQUEST_SAMPLES = 1_000_000
sample_hook: stream.SampleHook | None = sample_from_msgpack
"""Decodes live sample frames straight to HostSample (None: via plain maps)."""


@dataclass(frozen=True, slots=True)
class Target:
    """Where one agent is: ``tcp`` host:port, or a ``command`` (ssh) argv."""

    address: str
    kind: str
    host: str = ""
    port: int = 0
    tls: bool = False
    argv: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RequestResult:
    """What a request returned: the agent's result, files saved, samples (history)."""

    result: Any
    files: dict[str, Path] = field(default_factory=dict)
    samples: tuple[HostSample, ...] = ()


@dataclass(frozen=True, slots=True)
class LinkOptions:
    """Settings shared by every link of a StreamSource."""

    token: bytes | None = None
    ssl_context: ssl.SSLContext | None = None
    connect_timeout_s: float = 5.0
    backoff_min_s: float = 0.5
    backoff_max_s: float = 30.0
    idle_timeout_s: float = 20.0
    initial_history_s: float = 0.0
    download_dir: Path | None = None


class HostLink:
    """The connection thread for one agent."""

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
        self._chan: TcpChannel | CommandChannel | None = None
        self._pending: dict[int, PendingRequest] = {}
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._idle_s = options.idle_timeout_s
        self._first = b""
        self.thread = threading.Thread(target=self._run, name=f"gpulens-link-{target.address}", daemon=True)
        self.on_host: Callable[[HostLink], None] | None = None

    # -- lifecycle --------------------------------------------------------------
    def _run(self) -> None:
        backoff = self.opt.backoff_min_s
        last_reason = None
        while not self._stop.is_set():
            reason = ""
            try:
                self._chan = self._open()
                self._session(self._chan)
            except (StreamError, SchemaError, ChannelClosed, ssl.SSLError, OSError) as err:
                reason = _describe(err)
            except Exception as err:
                log.exception("link %s", self.target.address)
                reason = f"internal error: {type(err).__name__}: {err}"
            finally:
                self._close_chan(reason or "disconnected")
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

    def _open(self) -> TcpChannel | CommandChannel:
        t = self.target
        if t.kind == "tcp":
            return TcpChannel(
                t.host,
                t.port,
                connect_timeout_s=self.opt.connect_timeout_s,
                ssl_context=self.opt.ssl_context if t.tls else None,
            )
        return CommandChannel(t.argv)

    def _close_chan(self, reason: str) -> None:
        chan, self._chan = self._chan, None
        if chan is not None:
            chan.close()
        with self._lock:
            pending, self._pending = self._pending, {}
        for p in pending.values():
            p.abort()
            if not p.future.done():
                p.future.set_exception(RequestFailed(f"connection lost: {reason}"))

    def close(self) -> None:
        """Wake the thread (the source's stop event must be set first)."""
        handle = self._handle
        if handle is not None and self.reactor is not None:
            self.reactor.detach(handle, "viewer stopping")
        chan = self._chan
        if chan is not None:
            chan.close()

    # -- session ----------------------------------------------------------------
    def _read(self, chan: TcpChannel | CommandChannel, decoder: stream.FrameDecoder, deadline: float | None) -> list[stream.Message]:
        """The messages completed by one read (maybe none); raises when idle, closed or stopped."""
        if self._stop.is_set():
            raise StreamError("stopped")
        timeout = self._idle_s if deadline is None else max(0.1, deadline - time.monotonic())
        try:
            data = chan.recv(timeout)
        except TimeoutError:
            if deadline is not None:
                raise StreamError(f"no answer from the agent within {HANDSHAKE_TIMEOUT_S:.0f} s") from None
            raise StreamError(f"no data from the agent for {self._idle_s:.0f} s") from None
        if not data:
            raise ChannelClosed(chan.describe_eof())
        if deadline is not None and len(self._first) < 48:
            self._first += data[: 48 - len(self._first)]
        return decoder.feed(data)

    def _session(self, chan: TcpChannel | CommandChannel) -> None:
        decoder = stream.FrameDecoder(sample_hook=sample_hook)
        self._first = b""
        # Messages read with the hello but after it (a sample in the same read) wait here.
        backlog: deque[stream.Message] = deque()
        try:
            hello = self._handshake(chan, decoder, backlog, time.monotonic() + HANDSHAKE_TIMEOUT_S)
        except ProtocolError as err:
            if isinstance(err, VersionMismatch) or not isinstance(chan, CommandChannel):
                raise
            # The usual cause over ssh: a login script that prints to stdout.
            raise ProtocolError(
                f"{err}; the command's output began {self._first!r} (is something printing "
                "to stdout on login, or is 'gpulens' not the agent there?)"
            ) from err
        host = hello.host
        self.host = host
        if hello.interval_s and 0 < hello.interval_s < 86400:
            self._idle_s = max(self.opt.idle_timeout_s, 10 * hello.interval_s)
        since = self.last_time.get(host)
        if since is None and self.opt.initial_history_s > 0:
            since = time.time() - self.opt.initial_history_s
        chan.send(stream.encode(stream.Hello(proto=stream.PROTOCOL_VERSION, role="viewer", since=since)))
        self.up = True
        if self.on_host is not None:
            self.on_host(self)
        self.emit(HostStatusEvent(host=host, up=True, reason="connected", time=time.time(), address=self.target.address))
        while backlog:
            self._dispatch(host, backlog.popleft())
        if self.reactor is not None and isinstance(chan, TcpChannel) and not chan.tls:
            self._session_on_reactor(self.reactor, chan, decoder, host)
            return
        while True:
            for msg in self._read(chan, decoder, None):
                self._dispatch(host, msg)

    def _session_on_reactor(self, reactor: Reactor, chan: TcpChannel, decoder: stream.FrameDecoder, host: str) -> None:
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

    def _handshake(
        self,
        chan: TcpChannel | CommandChannel,
        decoder: stream.FrameDecoder,
        backlog: deque[stream.Message],
        deadline: float,
    ) -> stream.Hello:
        """Authenticate (both ways when we hold a token) and return the agent's checked hello.

        Messages after the hello that arrived in the same read are left in ``backlog``.
        """
        token = self.opt.token
        cnonce = snonce = b""
        proven = False
        while True:
            while not backlog:
                backlog.extend(self._read(chan, decoder, deadline))
            msg = backlog.popleft()
            if isinstance(msg, stream.ErrorMsg):
                raise _refusal(msg)
            if isinstance(msg, stream.Challenge):
                if token is None:
                    raise AuthError("the agent requires a token: pass --token-file")
                if cnonce:
                    raise ProtocolError("the agent sent a second challenge")
                snonce, cnonce = msg.nonce, auth.new_nonce()
                mac = auth.viewer_proof(token, snonce, cnonce)
                chan.send(stream.encode(stream.AuthResponse(cnonce=cnonce, mac=mac)))
                continue
            if isinstance(msg, stream.AuthOk):
                if token is None:
                    raise ProtocolError("the agent sent auth_ok, but no token was asked for")
                if not cnonce:
                    raise AuthError(
                        "the agent did not prove it holds the token: it sent auth_ok without a challenge"
                    )
                try:
                    auth.verify_agent(token, snonce, cnonce, msg.mac)
                except AuthError:
                    raise AuthError(
                        "the agent did not prove it holds the token: its auth_ok MAC is wrong "
                        "(an impostor, or an agent with another token)"
                    ) from None
                proven = True
                continue
            if isinstance(msg, stream.Hello) and msg.role == "agent":
                if token is not None and not proven:
                    skipped = "auth_ok" if cnonce else "the challenge"
                    raise AuthError(
                        f"the agent did not prove it holds the token: it sent its hello without {skipped}; "
                        "refusing it (an impostor, or an agent started without --token-file: then "
                        "connect without --token-file)"
                    )
                return _checked_hello(msg)
            raise ProtocolError(f"expected the agent's hello, got '{stream.to_wire(msg)['t']}'")

    def _dispatch(self, host: str, msg: stream.Message) -> None:
        if isinstance(msg, stream.ParsedSample):
            self._deliver(host, msg.sample, backfill=False)
        elif isinstance(msg, stream.SampleMsg):
            self._deliver(host, sample_from_dict(msg.sample), backfill=False)
        elif isinstance(msg, stream.History):
            samples = [_own(host, sample_from_dict(s)) for s in msg.samples]
            if msg.id == 0:
                for s in samples:
                    self._deliver(host, s, backfill=True)
            else:
                p = self._pending.get(msg.id)
                if p is not None:
                    if len(p.samples) + len(samples) > MAX_REQUEST_SAMPLES:
                        raise ProtocolError("history answer larger than the viewer accepts")
                    p.samples.extend(samples)
        elif isinstance(msg, stream.FileChunk):
            self._chunk(msg)
        elif isinstance(msg, stream.Response):
            with self._lock:
                p = self._pending.pop(msg.id, None)
            if p is None:
                return
            if not msg.ok:
                p.abort()
                if not p.future.done():
                    p.future.set_exception(RequestFailed(clean_text(msg.error[:2000]) or "request failed"))
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
        elif isinstance(msg, stream.ErrorMsg):
            raise _refusal(msg)
        else:
            raise ProtocolError(f"unexpected message '{stream.to_wire(msg)['t']}' from the agent")

    def _deliver(self, host: str, sample: HostSample, backfill: bool) -> None:
        _own(host, sample)
        last = self.last_time.get(sample.host)
        if last is not None and sample.time <= last:
            return  # already delivered (overlap between live and backfill)
        self.last_time[sample.host] = sample.time
        self.emit(SampleEvent(sample, backfill=backfill))

    def _chunk(self, msg: stream.FileChunk) -> None:
        p = self._pending.get(msg.id)
        if p is None:
            return
        base = self.opt.download_dir or Path.home() / ".cache" / "gpulens" / "downloads"
        try:
            p.write_chunk(msg, base, self.host or "agent")
        except SaveFailed as err:  # our disk, not the agent: only this request fails
            with self._lock:
                self._pending.pop(msg.id, None)
            p.abort()
            if not p.future.done():
                p.future.set_exception(err)

    # -- requests ---------------------------------------------------------------
    def request(self, kind: str, params: dict[str, Any], timeout_s: float) -> Future[RequestResult]:
        """Send a request; the future fails with RequestFailed or TimeoutError."""
        fut: Future[RequestResult] = Future()
        chan = self._chan
        if chan is None or not self.up:
            fut.set_exception(RequestFailed(f"{self.host or self.target.address} is not connected"))
            return fut
        rid = next(self._ids)
        with self._lock:
            self._pending[rid] = PendingRequest(fut)
        try:
            chan.send(stream.encode(stream.Request(id=rid, kind=kind, params=params)))
        except (OSError, ProtocolError) as err:
            with self._lock:
                self._pending.pop(rid, None)
            fut.set_exception(RequestFailed(f"cannot send the request: {err}"))
            return fut

        def expire() -> None:
            with self._lock:
                p = self._pending.pop(rid, None)
            if p is not None:
                p.abort()
                if not p.future.done():
                    p.future.set_exception(TimeoutError(f"{kind} request timed out after {timeout_s:g} s"))

        timer = threading.Timer(timeout_s, expire)
        timer.daemon = True
        timer.start()
        fut.add_done_callback(lambda _f: timer.cancel())
        return fut


MAX_HOST_NAME = 255


def _checked_hello(msg: stream.Hello) -> stream.Hello:
    """The agent's hello with its strings cleaned; it must name its host."""
    if len(msg.host) > MAX_HOST_NAME:
        raise ProtocolError(f"agent's host name longer than {MAX_HOST_NAME} characters")
    host = clean_text(msg.host).strip()
    if not host:
        raise ProtocolError("the agent's hello names no host")
    return stream.Hello(
        proto=msg.proto,
        role=msg.role,
        host=host,
        caps=tuple(clean_text(c)[:64] for c in msg.caps[:64]),
        version=clean_text(msg.version)[:64],
        interval_s=msg.interval_s,
        since=msg.since,
    )


def _own(host: str, sample: HostSample) -> HostSample:
    """``sample`` if it carries ``host`` (the hello's); else the session ends."""
    if sample.host != host:
        raise ProtocolError(
            f"the agent sent a sample for host {sample.host[:80]!r} but its hello declared {host[:80]!r}; "
            "an agent may publish only its own host's samples"
        )
    return sample


def _refusal(msg: stream.ErrorMsg) -> StreamError:
    text = f"agent refused: {clean_text(msg.message[:300])}"
    if msg.code == "version":
        return VersionMismatch(text)
    if msg.code == "auth":
        return AuthError(text)
    return StreamError(text)


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
