"""One thread that reads every established plain-TCP agent connection.

A thread per host blocked in ``recv`` costs a wake-up and two system calls
per sample; at 1,000 hosts that alone was most of the viewer's CPU
(benchmarks/ingest.py). Links still connect and authenticate in their own
thread, then hand the socket here and sleep until the session ends. TLS and
ssh links keep their own reader (TLS buffers decrypted bytes, which a
selector cannot see).
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from gpulens.core.logbook import call_isolated

log = logging.getLogger("gpulens.stream")

RECV_BYTES = 256 * 1024


@dataclass
class _Reg:
    fd: int
    sock: socket.socket
    on_data: Callable[[bytes], None]
    on_end: Callable[[BaseException | None, str], None]
    idle_s: float
    last_rx: float


class Reactor:
    """Selector loop calling ``on_data(bytes)`` per read; ends a registration on error."""

    def __init__(self) -> None:
        self._sel = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self._regs: dict[int, _Reg] = {}
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gpulens-stream-reactor", daemon=True)
        self._thread.start()

    def attach(
        self,
        sock: socket.socket,
        on_data: Callable[[bytes], None],
        on_end: Callable[[BaseException | None, str], None],
        idle_s: float,
    ) -> object:
        """Read ``sock`` from now on; ``on_end(error, reason)`` is called exactly once.

        Returns a handle for :meth:`detach`.
        """
        reg = _Reg(sock.fileno(), sock, on_data, on_end, idle_s, time.monotonic())
        with self._lock:
            self._regs[reg.fd] = reg
            self._sel.register(reg.fd, selectors.EVENT_READ, reg)
        self._wake()
        return reg

    def detach(self, handle: object, reason: str) -> None:
        """Stop reading (on_end gets ``reason``); no-op if already ended."""
        if isinstance(handle, _Reg):
            self._end(handle, None, reason)

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"\0")

    def _end(self, reg: _Reg, err: BaseException | None, reason: str) -> None:
        with self._lock:
            if self._regs.get(reg.fd) is not reg:
                return
            del self._regs[reg.fd]
            with contextlib.suppress(KeyError, ValueError, OSError):
                self._sel.unregister(reg.fd)
        call_isolated(log, "stream reactor: on_end", reg.on_end, err, reason)

    def _loop(self) -> None:
        last_check = time.monotonic()
        while not self._stop.is_set():
            try:
                events = self._sel.select(1.0)
            except OSError:  # a socket closed under us; the registrations are checked below
                events = []
            now = time.monotonic()
            for key, _mask in events:
                reg = key.data
                if reg is None:
                    with contextlib.suppress(OSError):
                        self._wake_r.recv(4096)
                    continue
                self._read(reg, now)
            if now - last_check >= 1.0:
                last_check = now
                with self._lock:
                    stale = [r for r in self._regs.values() if now - r.last_rx > r.idle_s]
                for r in stale:
                    self._end(r, None, f"no data from the agent for {r.idle_s:.0f} s")

    def _read(self, reg: _Reg, now: float) -> None:
        try:
            data = reg.sock.recv(RECV_BYTES)
        except (BlockingIOError, InterruptedError, TimeoutError):
            return
        except OSError as err:
            self._end(reg, err, err.strerror or str(err))
            return
        if not data:
            self._end(reg, None, "the agent closed the connection")
            return
        reg.last_rx = now
        try:
            reg.on_data(data)
        except Exception as err:  # the reader's failure, whatever it is, ends this connection only: on_end gets it
            log.debug("stream reactor: the reader refused the connection's data", exc_info=True)
            self._end(reg, err, str(err))

    def close(self) -> None:
        """End every registration and stop the thread."""
        self._stop.set()
        self._wake()
        self._thread.join(timeout=3)
        with self._lock:
            regs = list(self._regs.values())
        for r in regs:
            self._end(r, None, "viewer stopping")
        with contextlib.suppress(OSError):
            self._sel.close()
        self._wake_r.close()
        self._wake_w.close()
