"""The Kineto on-demand endpoint: binds dynolog's socket name and answers polls.

Naming follows the traced programs (see KINETO_IPC.md): with
``KINETO_IPC_SOCKET_DIR`` set the endpoint binds ``$DIR/dynolog``; unset or
empty, the abstract name ``\\0dynolog\\0`` (trailing NUL included). A thread
answers every ``req`` and ``ctxt`` at once (clients wait ~90 ms). What a
poll gets back is decided by a *config provider* (the trace coordinator);
the endpoint itself only speaks the protocol and keeps the registry.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

from . import kineto_codec as codec
from .errors import EndpointBusy, IpcError, MalformedDatagram
from .registry import PollingProcess, Registry

log = logging.getLogger(__name__)

ABSTRACT_NAME = b"\0dynolog\0"
SOCKET_NAME = "dynolog"
SOCKET_DIR_ENV = "KINETO_IPC_SOCKET_DIR"
UCRED = struct.Struct("iII")  # struct ucred: pid, uid, gid
SUN_PATH_MAX = 107  # sockaddr_un.sun_path holds 108 bytes including the NUL
CLIENT_NAME_BYTES = len("/dynoconfigclient") + 36  # + a uuid4 string

ConfigProvider = Callable[[codec.ConfigRequest, "int | None"], str]
PollListener = Callable[[PollingProcess], None]


def resolve_socket_dir(socket_dir: str | None) -> str | None:
    """The directory to serve in, or None for the abstract name.

    ``socket_dir=None`` follows this process's ``$KINETO_IPC_SOCKET_DIR``;
    an empty string forces the abstract name; anything else is used as is.
    """
    if socket_dir is None:
        socket_dir = os.environ.get(SOCKET_DIR_ENV, "")
    return socket_dir or None


def describe_address(socket_dir: str | None) -> str:
    """Human form of the daemon name for messages."""
    return f"{socket_dir}/{SOCKET_NAME}" if socket_dir else "abstract \\0dynolog\\0"


def who_binds(socket_dir: str | None, proc: Path = Path("/proc")) -> tuple[int, str] | None:
    """(pid, comm) of the process holding the daemon name, when /proc tells us."""
    want = f"{socket_dir}/{SOCKET_NAME}" if socket_dir else "@dynolog@"
    inodes: set[str] = set()
    try:
        with open(proc / "net" / "unix", encoding="utf-8", errors="replace") as fh:
            next(fh, None)
            for line in fh:
                parts = line.split()
                if len(parts) >= 8 and parts[7] == want:
                    inodes.add(f"socket:[{parts[6]}]")
    except OSError:
        return None
    if not inodes:
        return None
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            for fd in (entry / "fd").iterdir():
                if os.readlink(fd) in inodes:
                    comm = (entry / "comm").read_text(errors="replace").strip()
                    return int(entry.name), comm
        except OSError:
            continue
    return None


class KinetoEndpoint:
    """Serves the daemon side of the Kineto IPC protocol from a thread.

    ``start()`` binds (raises EndpointBusy when the name is taken) and
    starts the thread; ``stop()`` closes and removes a filesystem socket.
    ``handle_datagram`` is the whole protocol logic, callable without a socket.
    """

    def __init__(
        self,
        socket_dir: str | None = None,
        *,
        registry: Registry | None = None,
        config_provider: ConfigProvider | None = None,
    ) -> None:
        self.socket_dir = resolve_socket_dir(socket_dir)
        self.registry = registry or Registry()
        self._provider = config_provider
        self._listeners: list[PollListener] = []
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.received = 0
        self.dropped = 0

    @property
    def address(self) -> str:
        """Where the endpoint listens, for messages."""
        return describe_address(self.socket_dir)

    def set_config_provider(self, provider: ConfigProvider | None) -> None:
        """Who decides the config text a poll gets (empty text = nothing to do)."""
        self._provider = provider

    def add_poll_listener(self, listener: PollListener) -> None:
        """Called from the endpoint thread after each recorded poll."""
        self._listeners.append(listener)

    # -- protocol ---------------------------------------------------------
    def handle_datagram(self, data: bytes, uid: int | None = None) -> bytes | None:
        """Answer one client datagram; None (and a log line) for a malformed one."""
        self.received += 1
        try:
            msg = codec.decode(data)
        except MalformedDatagram as err:
            self.dropped += 1
            log.warning("dropped malformed Kineto datagram: %s", err)
            return None
        if isinstance(msg, codec.ContextRegistration):
            return codec.encode_context_reply(self.registry.record_context(msg.job_id, msg.gpu, msg.pid))
        if not msg.pids or msg.pids[0] <= 0:
            self.dropped += 1
            log.warning("dropped Kineto req without a valid pid: %r", msg.pids[:4])
            return None
        entry = self.registry.record_poll(msg.pids, msg.job_id, uid)
        for listener in self._listeners:
            try:
                listener(entry)
            except Exception:
                log.exception("poll listener failed")
        config = ""
        if self._provider is not None:
            try:
                config = self._provider(msg, uid)
            except Exception:
                log.exception("config provider failed")
        try:
            return codec.encode_config_reply(config)
        except ValueError:
            log.exception("config text rejected by the codec")
            return codec.encode_config_reply("")

    # -- socket -------------------------------------------------------------
    def start(self) -> None:
        """Bind the daemon name and serve from a daemon thread.

        Raises:
            EndpointBusy: another process holds the name (message names it).
            OSError: the socket directory cannot be created or used.
        """
        if self._thread is not None:
            return
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            self._bind(sock)
        except BaseException:
            sock.close()
            raise
        sock.settimeout(0.2)
        self._sock = sock
        self._stop.clear()
        self._thread = threading.Thread(target=self._serve, name="gpulens-kineto", daemon=True)
        self._thread.start()

    def _bind(self, sock: socket.socket) -> None:
        if self.socket_dir is None:
            try:
                sock.bind(ABSTRACT_NAME)
            except OSError as err:
                raise self._busy() from err
            return
        directory = Path(self.socket_dir)
        if len(os.fsencode(directory)) + CLIENT_NAME_BYTES > SUN_PATH_MAX:
            raise IpcError(
                f"socket dir {directory} is too long: libkineto's client sockets "
                f"(DIR/dynoconfigclient<uuid>) must fit in {SUN_PATH_MAX} bytes; use a shorter "
                "KINETO_IPC_SOCKET_DIR"
            )
        if not directory.is_dir():
            # Root serves programs of every user: they must create client sockets here.
            directory.mkdir(parents=True, mode=0o1733 if os.geteuid() == 0 else 0o700)
        path = directory / SOCKET_NAME
        if path.exists() or path.is_symlink():
            if _is_live(str(path)):
                raise self._busy()
            path.unlink()  # stale file left by a crashed daemon
        try:
            sock.bind(str(path))
        except OSError as err:
            raise self._busy() from err
        os.chmod(path, 0o666)  # clients of other users (root agent) must be able to send

    def _busy(self) -> EndpointBusy:
        owner = who_binds(self.socket_dir)
        holder = f"{owner[1]} (pid {owner[0]})" if owner else "another process"
        if owner and owner[1].startswith("dynolog"):
            hint = "a dynolog daemon serves it; gpulens can send trace requests through its RPC port 1778"
        elif owner and _is_gpulens(owner[0]):
            holder = f"another gpulens (pid {owner[0]})"
            hint = "trace through that gpulens (its agent or TUI), or stop it first"
        else:
            hint = "stop it, or point both sides at another KINETO_IPC_SOCKET_DIR"
        return EndpointBusy(f"the Kineto daemon name {self.address} is already taken by {holder}: {hint}")

    def _serve(self) -> None:
        sock = self._sock
        assert sock is not None
        cmsg_size = socket.CMSG_SPACE(UCRED.size)
        while not self._stop.is_set():
            try:
                data, ancdata, flags, addr = sock.recvmsg(codec.MAX_DATAGRAM_BYTES + 1, cmsg_size)
            except TimeoutError:
                continue
            except OSError:
                if self._stop.is_set():
                    return
                log.exception("Kineto endpoint receive failed")
                time.sleep(0.1)
                continue
            if flags & socket.MSG_TRUNC or len(data) > codec.MAX_DATAGRAM_BYTES:
                self.received += 1
                self.dropped += 1
                log.warning("dropped oversized Kineto datagram")
                continue
            reply = self.handle_datagram(data, _sender_uid(ancdata))
            if reply is not None and addr:
                try:
                    sock.sendto(reply, addr)
                except OSError as err:  # the client gave up waiting or is gone
                    log.debug("reply to %r failed: %s", addr, err)

    def stop(self) -> None:
        """Stop serving, close the socket and remove a filesystem socket file."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        self._thread = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            if self.socket_dir is not None:
                with contextlib.suppress(OSError):
                    os.unlink(Path(self.socket_dir) / SOCKET_NAME)

    @property
    def running(self) -> bool:
        """True while the serving thread runs."""
        return self._thread is not None and self._thread.is_alive()


def _sender_uid(ancdata: list[tuple[int, int, bytes]]) -> int | None:
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(payload) >= UCRED.size:
            _pid, uid, _gid = UCRED.unpack_from(payload)
            return int(uid)
    return None


def _is_gpulens(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return b"gpulens" in fh.read(4096)
    except OSError:
        return False


def _is_live(path: str) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        probe.connect(path)
        return True
    except OSError:
        return False
    finally:
        probe.close()
