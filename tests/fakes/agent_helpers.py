"""Helpers for the agent and stream tests: real agent subprocesses, an event log, a cuttable proxy,
an in-memory transport for in-process agents and their parts, a blocking profiler
(the fake trace service is tests/fakes/trace_service.py)."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from gpulens.core.events import HostStatusEvent, SampleEvent
from gpulens.ipc import stream
from gpulens.ipc.stream_decode import FrameDecoder

_M = TypeVar("_M")  # a message class, for until()

WAIT_S = 60.0
"""Upper bound for waits on a busy shared machine; tests finish as soon as the condition holds."""


def make_token_file(path: str | Path) -> Path:
    """Write a fresh random token to ``path`` with mode 0600, as a user makes one (``openssl rand -hex 32``)."""
    p = Path(path)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    os.chmod(p, 0o600)
    return p


class AgentProc:
    """A ``gpulens agent --listen 127.0.0.1:PORT`` subprocess."""

    def __init__(
        self,
        exe: str,
        workdir: Path,
        name: str,
        port: int = 0,
        extra: Sequence[str] = (),
        *,
        trace: bool = False,
        env: dict[str, str] | None = None,
        token: bool = False,
    ) -> None:
        self.name = name
        self.port_file = workdir / f"{name}.{time.monotonic_ns()}.port"
        self.log = workdir / f"{name}.log"
        # Trace, profile and files need a token over TCP (samples only without one).
        self.token_file: Path | None = None
        self.token: bytes | None = None
        if token:
            from gpulens.ipc import auth

            self.token_file = make_token_file(workdir / f"{name}.{time.monotonic_ns()}.token")
            self.token = auth.load_token(self.token_file)
        argv = [
            exe, "agent", "--listen", f"127.0.0.1:{port}", "--port-file", str(self.port_file),
            "--hostname", name, *([] if trace else ["--no-trace"]),
            *(["--token-file", str(self.token_file)] if self.token_file else []), *extra,
        ]
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env)
        deadline = time.monotonic() + WAIT_S
        while not self.port_file.exists():
            if self.proc.poll() is not None:
                raise RuntimeError(f"agent {name} exited {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"agent {name} did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.05)
        self.port = int(self.port_file.read_text())

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def alive(self) -> bool:
        return self.proc.poll() is None


class EventLog:
    """Thread-safe list of source events with a wait-for-condition helper."""

    def __init__(self) -> None:
        self.events: list[Any] = []
        self._cond = threading.Condition()

    def __call__(self, ev: Any) -> None:
        with self._cond:
            self.events.append(ev)
            self._cond.notify_all()

    def wait_for(self, pred: Callable[[list[Any]], bool], timeout: float = WAIT_S, what: str = "") -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: pred(self.events), timeout):
                raise AssertionError(f"timed out waiting for {what or pred}; last events: {self.events[-5:]}")

    def samples(self, host: str) -> list[SampleEvent]:
        with self._cond:
            return [e for e in self.events if isinstance(e, SampleEvent) and e.sample.host == host]

    def statuses(self, host: str) -> list[HostStatusEvent]:
        with self._cond:
            return [e for e in self.events if isinstance(e, HostStatusEvent) and e.host == host]

    def snapshot(self) -> list[Any]:
        with self._cond:
            return list(self.events)


def count_samples(host: str) -> Callable[[list[Any]], int]:
    return lambda evs: sum(1 for e in evs if isinstance(e, SampleEvent) and e.sample.host == host)


class RawViewer:
    """A hand-driven viewer connection for hostile and protocol tests."""

    def __init__(self, port: int, rcvbuf: int | None = None) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(WAIT_S)
        self.sock.connect(("127.0.0.1", port))
        self.dec = FrameDecoder()
        self.pending: list[stream.Message] = []

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_msg(self) -> stream.Message | None:
        """The next message, or None at end of stream."""
        while not self.pending:
            data = self.sock.recv(65536)
            if not data:
                return None
            self.pending.extend(self.dec.feed(data))
        return self.pending.pop(0)

    def until(self, kind: type[_M], limit: int = 10_000) -> _M:
        for _ in range(limit):
            msg = self.recv_msg()
            if msg is None:
                raise AssertionError(f"stream ended before a {kind.__name__}")
            if isinstance(msg, kind):
                return msg
        raise AssertionError(f"no {kind.__name__} in {limit} messages")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def ring_times(port: int) -> list[float]:
    """Every sample time the agent keeps (hello since=0 -> history id 0)."""
    v = RawViewer(port)
    try:
        v.until(stream.Hello)
        v.send(stream.encode(stream.Hello(proto=stream.PROTOCOL_VERSION, role="viewer", since=0.0)))
        times: list[float] = []
        while True:
            h = v.until(stream.History)
            times.extend(s.time for s in h.samples)
            if h.last:
                return times
    finally:
        v.close()


class Proxy:
    """A TCP proxy to ``127.0.0.1:target`` whose connections can be cut at will."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.accepting = threading.Event()
        self.accepting.set()
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if not self.accepting.is_set():
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._socks += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        """Drop every proxied connection and refuse new ones until resume()."""
        self.accepting.clear()
        with self._lock:
            socks, self._socks = self._socks, []
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()

    def resume(self) -> None:
        self.accepting.set()

    def close(self) -> None:
        self._closed = True
        self.cut()
        with contextlib.suppress(OSError):
            self.listener.close()


def env_without_kineto() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("KINETO_USE_DAEMON", None)
    return env


class MemTransport:
    """An in-memory :class:`gpulens.agent.sessions.Transport`: the test plays the viewer.

    ``feed`` gives the agent bytes, ``end`` closes the viewer's side,
    ``next_msg`` decodes what the agent sent.
    """

    def __init__(self) -> None:
        self._in = bytearray()
        self._out = bytearray()
        self._cond = threading.Condition()
        self._eof = False
        self.closed = False
        self._timeout: float | None = None
        self._dec = FrameDecoder()
        self._msgs: list[stream.Message] = []

    # agent side
    def recv(self, n: int) -> bytes:
        with self._cond:
            if not self._cond.wait_for(lambda: self._in or self._eof or self.closed, self._timeout):
                raise TimeoutError("timed out")
            if self.closed or not self._in:
                return b""
            data = bytes(self._in[:n])
            del self._in[:n]
            return data

    def sendall(self, data: bytes) -> None:
        with self._cond:
            if self.closed:
                raise BrokenPipeError(32, "closed")
            self._out += data
            self._cond.notify_all()

    def set_timeout(self, seconds: float | None) -> None:
        self._timeout = seconds

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._cond.notify_all()

    # viewer side
    def feed(self, data: bytes) -> None:
        with self._cond:
            self._in += data
            self._cond.notify_all()

    def send(self, msg: stream.Message) -> None:
        self.feed(stream.encode(msg))

    def end(self) -> None:
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    def next_msg(self, timeout: float = WAIT_S) -> stream.Message | None:
        """The agent's next message; None once it closed and everything was read."""
        deadline = time.monotonic() + timeout
        while not self._msgs:
            with self._cond:
                self._cond.wait_for(lambda: self._out or self.closed, max(0.0, deadline - time.monotonic()))
                data = bytes(self._out)
                self._out.clear()
                if not data and self.closed:
                    return None
            if not data and time.monotonic() > deadline:
                raise AssertionError("no message from the agent in time")
            self._msgs.extend(self._dec.feed(data))
        return self._msgs.pop(0)

    def until(self, kind: type[_M], limit: int = 10_000) -> _M:
        for _ in range(limit):
            msg = self.next_msg()
            if msg is None:
                raise AssertionError(f"connection closed before a {kind.__name__}")
            if isinstance(msg, kind):
                return msg
        raise AssertionError(f"no {kind.__name__} in {limit} messages")

    def response(self, request_id: int) -> stream.Response:
        """The response to ``request_id`` (chunks and samples before it are skipped)."""
        while True:
            msg = self.until(stream.Response)
            if msg.id == request_id:
                return msg


class BlockingProfiler:
    """A py-spy stand-in whose ``sample_pids`` blocks until ``release`` is set (``started`` counts callers)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = threading.Semaphore(0)

    def sample_pids(self, pids: list[int], duration: float, /, rate_hz: int = 100) -> str:
        self.started.release()
        self.release.wait(WAIT_S)
        return "main 1\n"


class RecordingConn:
    """What the request runner needs of a connection (a principal and ``put``), recording every frame."""

    def __init__(self, principal: Any = None) -> None:
        self.principal = principal
        self.frames: list[bytes] = []
        self._cond = threading.Condition()

    def put(self, frame: bytes, timeout_s: float | None = None) -> bool:
        with self._cond:
            self.frames.append(frame)
            self._cond.notify_all()
        return True

    def messages(self) -> list[stream.Message]:
        """Every message put so far, decoded."""
        with self._cond:
            frames = list(self.frames)
        dec = FrameDecoder(max_frame_bytes=stream.MAX_FRAME_BYTES)
        return [m for f in frames for m in dec.feed(f)]

    def response(self, request_id: int, timeout: float = WAIT_S) -> stream.Response:
        """The response to ``request_id``, waiting for it (requests on threads answer later)."""
        def found() -> stream.Response | None:
            return next((m for m in self.messages() if isinstance(m, stream.Response) and m.id == request_id), None)

        with self._cond:
            if not self._cond.wait_for(lambda: found() is not None, timeout):
                raise AssertionError(f"no response to request {request_id}")
        res = found()
        assert res is not None
        return res
