"""Byte channels from a viewer to one agent: TCP (optionally TLS) or a command.

A command channel runs e.g. ``ssh HOST gpulens agent --stdio`` and talks to
its stdin/stdout; its stderr is kept (last lines, control characters
removed: the remote end writes them) so a failure can say why
("ssh: Could not resolve hostname ..."). Both channels give ``recv`` with
an idle timeout and a thread-safe ``send``.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import ssl
import subprocess
import threading
from collections import deque
from collections.abc import Sequence

from gpulens.core.sanitize import clean_text
from gpulens.ipc.errors import IpcError

RECV_BYTES = 256 * 1024


class ChannelClosed(IpcError):
    """The agent's side ended; the message says how (exit code, stderr)."""

    title = "agent connection closed"


class TcpChannel:
    """A TCP connection to ``host:port``, optionally wrapped in TLS."""

    def __init__(
        self, host: str, port: int, *, connect_timeout_s: float, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        sock = socket.create_connection((host, port), timeout=connect_timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if ssl_context is not None:
            try:
                sock = ssl_context.wrap_socket(sock, server_hostname=host)
            except (OSError, ssl.SSLError):
                sock.close()
                raise
        self.sock = sock
        self.tls = ssl_context is not None
        self._send_lock = threading.Lock()
        self._timeout: float | None = None

    def recv(self, timeout_s: float) -> bytes:
        """Up to RECV_BYTES; ``b""`` at end of stream; TimeoutError when idle."""
        if timeout_s != self._timeout:
            self.sock.settimeout(timeout_s)
            self._timeout = timeout_s
        return self.sock.recv(RECV_BYTES)

    def send(self, data: bytes) -> None:
        """Send all of ``data`` (thread-safe)."""
        with self._send_lock:
            self.sock.sendall(data)

    def describe_eof(self) -> str:
        """Why the stream ended."""
        return "the agent closed the connection"

    def close(self) -> None:
        """Close the socket; idempotent."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self.sock.close()


class CommandChannel:
    """A child process (ssh) whose stdin/stdout carry the stream."""

    def __init__(self, argv: Sequence[str]) -> None:
        try:
            self.proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # Ctrl-C in the TUI must not kill ssh under us
                bufsize=0,
            )
        except OSError as err:
            raise ChannelClosed(f"cannot run {argv[0]!r}: {err.strerror or err}") from err
        self._stderr: deque[str] = deque(maxlen=20)
        self._send_lock = threading.Lock()
        assert self.proc.stdout is not None and self.proc.stdin is not None and self.proc.stderr is not None
        self._out = self.proc.stdout.fileno()
        # poll, not select: with hundreds of ssh children the pipe fds pass 1024.
        self._poll = select.poll()
        self._poll.register(self._out, select.POLLIN)
        self._err_thread = threading.Thread(target=self._drain_stderr, daemon=True, name="gpulens-ssh-stderr")
        self._err_thread.start()

    def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        with contextlib.suppress(OSError, ValueError):  # closed under us at shutdown
            stderr = self.proc.stderr
            for line in iter(lambda: stderr.readline(4096), b""):  # bounded: a line may never end
                text = clean_text(line.decode("utf-8", "replace")).strip()
                if text:
                    self._stderr.append(text[:300])

    def recv(self, timeout_s: float) -> bytes:
        """Up to RECV_BYTES of the child's stdout; TimeoutError when idle."""
        if not self._poll.poll(max(0, int(timeout_s * 1000))):
            raise TimeoutError("timed out")
        return os.read(self._out, RECV_BYTES)

    def send(self, data: bytes) -> None:
        """Write all of ``data`` to the child's stdin (thread-safe)."""
        assert self.proc.stdin is not None
        with self._send_lock:
            self.proc.stdin.write(data)

    def describe_eof(self) -> str:
        """Exit status and the child's last stderr line."""
        try:
            code = self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            code = None
        self._err_thread.join(timeout=1)
        last = self._stderr[-1] if self._stderr else ""
        what = f"command exited with status {code}" if code is not None else "command closed its output"
        return f"{what}: {last}" if last else what

    def close(self) -> None:
        """Close pipes and end the child (TERM, then KILL)."""
        for f in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                if f is not None:
                    f.close()
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                self.proc.terminate()
            try:
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(OSError):
                    self.proc.kill()
                self.proc.wait()
        self._err_thread.join(timeout=1)
        with contextlib.suppress(OSError):
            if self.proc.stderr is not None:
                self.proc.stderr.close()
