"""The Kineto on-demand endpoint: binds dynolog's socket name and answers polls.

Naming follows the traced programs (see KINETO_IPC.md): with
``KINETO_IPC_SOCKET_DIR`` set the endpoint binds ``$DIR/dynolog``; unset or
empty, the abstract name ``\\0dynolog\\0`` (trailing NUL included). A thread
answers every ``req`` and ``ctxt`` at once (clients wait ~90 ms). What a
poll gets back is decided by a *config provider* (the trace coordinator);
the endpoint itself only speaks the protocol and keeps the registry.

One thread serves every user's programs, so (docs/security.md):

- The socket directory is used only when every directory on its path and
  every symlink followed belongs to root or to us, and none is writable by
  group/other unless sticky; one gpulens creates gets its mode by
  ``fchmod`` whatever the umask (1733 for root, serving others; 0700
  otherwise). The socket is chmod 0666 only after ``lstat`` shows the path
  is a socket of ours; a stale one is removed only when it is a dead socket
  of ours; anything else there is refused, never followed.
- A poll or ``ctxt`` is recorded only when its kernel credentials
  (``SCM_CREDENTIALS``) show the sender is root, or is the claimed pid
  itself with that pid's uid: nobody makes another user's pid (or pid 1)
  traceable. The registry is capped (:mod:`gpulens.ipc.kineto.registry`).
- Replies are sent with ``MSG_DONTWAIT``: a client that never reads loses
  its own reply; the thread never blocks on it.
- The name held by someone else is an :class:`EndpointBusy` naming the
  holder's pid and uid, flagging a non-root other user as a possible squatter.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import socket
import stat
import struct
import threading
import time
from collections.abc import Callable

from gpulens.core.logbook import call_isolated
from gpulens.core.procfs import proc_uid, unix_socket_holder
from gpulens.core.safefs import PathProblem, UnsafePath
from gpulens.core.threads import start_thread, stop_thread
from gpulens.ipc.errors import EndpointBusy, IpcError, MalformedDatagram
from gpulens.ipc.kineto import codec
from gpulens.ipc.kineto.registry import PollingProcess, Registry
from gpulens.ipc.kineto.socketdir import open_socket_dir

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


def holder_of(socket_dir: str | None) -> tuple[int, str, int | None] | None:
    """(pid, comm, uid) of the process holding the daemon name, when /proc tells us."""
    held = unix_socket_holder(f"{socket_dir}/{SOCKET_NAME}" if socket_dir else "@dynolog@")
    return None if held is None else (held[0], held[2], held[1])


def is_possible_squatter(uid: int | None) -> bool:
    """A holder that is neither root nor us: another user may be catching trace requests."""
    return uid is not None and uid not in (0, os.geteuid())


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
        self._wake: tuple[int, ...] = ()
        """(read, write) ends of the pipe that wakes the serving thread to stop."""
        self._stop = threading.Event()
        self._bound: tuple[int, int] | None = None  # (st_dev, st_ino) of our socket file
        self.received = 0
        self.dropped = 0
        self.refused = 0  # polls whose credentials do not back their pid
        self.unsent = 0  # replies the client was not ready to take

    @property
    def address(self) -> str:
        """Where the endpoint listens, for messages."""
        return describe_address(self.socket_dir)

    # -- protocol ---------------------------------------------------------
    def handle_datagram(self, data: bytes, uid: int | None = None, pid: int | None = None) -> bytes | None:
        """Answer one client datagram; None (and a log line) for a malformed one.

        ``uid`` and ``pid`` are the sender's kernel credentials (the serving
        thread always passes them); both None means an in-process caller that
        vouches for the datagram. A poll whose credentials do not back its pid
        gets an empty answer and is not recorded.
        """
        self.received += 1
        try:
            msg = codec.decode(data)
        except MalformedDatagram as err:
            self.dropped += 1
            log.warning("dropped malformed Kineto datagram: %s", err)
            return None
        if isinstance(msg, codec.ContextRegistration):
            if not self._may_claim(msg.pid, uid, pid):
                return codec.encode_context_reply(0)
            return codec.encode_context_reply(self.registry.record_context(msg.job_id, msg.gpu, msg.pid, uid))
        if not msg.pids or msg.pids[0] <= 0:
            self.dropped += 1
            log.warning("dropped Kineto req without a valid pid: %r", msg.pids[:4])
            return None
        if not self._may_claim(msg.pids[0], uid, pid):
            return codec.encode_config_reply("")
        entry = self.registry.record_poll(msg.pids, msg.job_id, uid, msg.config_type)  # None: over a cap
        if entry is not None:
            for listener in self._listeners:
                call_isolated(log, "poll listener", listener, entry)
        config = ""
        if self._provider is not None:
            config = call_isolated(log, "config provider", self._provider, msg, uid) or ""
        try:
            return codec.encode_config_reply(config)
        except ValueError:
            log.exception("config text rejected by the codec")
            return codec.encode_config_reply("")

    def _may_claim(self, claimed: int, uid: int | None, pid: int | None) -> bool:
        """True when the sender may speak for process ``claimed``: root, or that process itself."""
        if (uid is None and pid is None) or uid == 0:
            return True
        # SCM_CREDENTIALS carries the sender's thread-group id, which an unprivileged sender
        # cannot fake; libkineto polls with getpid(), so a real poll always matches. (A
        # program in another pid namespace sends pids that mean nothing here: refused too.)
        if (pid is not None and pid != claimed) or uid is None or proc_uid(claimed) != uid:
            self.refused += 1
            if self.refused & (self.refused - 1) == 0:  # 1, 2, 4, 8, ...: a flood logs a few lines
                log.warning(
                    "ignored a Kineto message claiming pid %d from pid %s uid %s (%d such so far)",
                    claimed, pid, uid, self.refused,
                )
            return False
        return True

    # -- socket -------------------------------------------------------------
    def start(self, adopt: socket.socket | None = None) -> None:
        """Bind the daemon name (or serve ``adopt``, a socket already bound to it) from a daemon thread.

        ``adopt``: the bound socket a previous owner passed over (``SCM_RIGHTS``,
        :mod:`gpulens.ipc.handover`), or our own one back from :meth:`detach`;
        checked to be a datagram socket bound to this endpoint's name. The name
        is then never free between two owners.

        Raises:
            EndpointBusy: another process holds the name (message names it and its uid).
            UnsafePath: the socket directory, or what is at the socket's name, is not safe to use;
                or ``adopt`` is not bound to this endpoint's name.
            IpcError: the socket directory's path is too long for client names.
            OSError: the socket directory cannot be created or used.
        """
        if self._thread is not None:
            return
        if adopt is not None:
            self._bound = self._check_adopted(adopt)
            sock = adopt
        else:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            with contextlib.ExitStack() as undo:  # anything raised, Ctrl-C included: the socket is closed
                undo.callback(sock.close)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
                self._bind(sock)
                undo.pop_all()
        sock.setblocking(False)  # the thread polls; replies never wait for a slow reader
        self._sock = sock
        self._stop.clear()
        # The thread sleeps until a datagram or stop()'s byte: no wake-ups while idle.
        self._wake = os.pipe()
        self._thread = start_thread(self._serve, "gpulens-kineto")

    def _check_adopted(self, sock: socket.socket) -> tuple[int, int] | None:
        """Is ``sock`` a datagram socket bound to this endpoint's name? Its file's identity (a path name).

        Raises:
            UnsafePath: another kind of socket, or bound to another name, or (a path name) the
                socket file there is not a socket of root's, ours or the passer's kind.
        """
        if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_DGRAM:
            raise UnsafePath(f"the socket passed for {self.address} is not a Unix datagram socket",
                             problem=PathProblem.WRONG_SOCKET_KIND, component=self.address)
        name = sock.getsockname()
        if self.socket_dir is None:
            if name != ABSTRACT_NAME:
                raise UnsafePath(f"the socket passed is bound to {name!r}, not to {self.address}",
                                 problem=PathProblem.BOUND_ELSEWHERE, component=self.address)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            return None
        path = os.path.join(self.socket_dir, SOCKET_NAME)
        if os.fsdecode(name) != path:
            raise UnsafePath(f"the socket passed is bound to {os.fsdecode(name)!r}, not to {path}",
                             problem=PathProblem.BOUND_ELSEWHERE, component=path)
        dfd = open_socket_dir(self.socket_dir, 0o1733 if os.geteuid() == 0 else 0o700)
        try:
            st = os.stat(SOCKET_NAME, dir_fd=dfd, follow_symlinks=False)
        finally:
            os.close(dfd)
        if not stat.S_ISSOCK(st.st_mode):
            raise UnsafePath(f"{path} is not a socket; the socket passed for it is not used",
                             problem=PathProblem.NOT_A_SOCKET, component=path)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        return (st.st_dev, st.st_ino)

    def detach(self) -> socket.socket | None:
        """Stop serving but keep the name bound: the socket, for :meth:`start` (``adopt=``) here or in
        the next owner (the caller closes it once that owner serves it). None when not serving."""
        if self._sock is None:
            return None
        self._stop_thread()
        sock, self._sock = self._sock, None
        self._bound = None  # our stop() must not unlink the name the next owner serves
        return sock

    def _bind(self, sock: socket.socket) -> None:
        if self.socket_dir is None:
            try:
                sock.bind(ABSTRACT_NAME)
            except OSError as err:
                raise self._busy() from err
            return
        directory = self.socket_dir
        if len(os.fsencode(directory)) + CLIENT_NAME_BYTES > SUN_PATH_MAX:
            raise IpcError(
                f"socket dir {directory} is too long: libkineto's client sockets "
                f"(DIR/dynoconfigclient<uuid>) must fit in {SUN_PATH_MAX} bytes; use a shorter "
                "KINETO_IPC_SOCKET_DIR"
            )
        # Root serves programs of every user: they create client sockets here but cannot list it.
        dfd = open_socket_dir(directory, 0o1733 if os.geteuid() == 0 else 0o700)
        try:
            path = os.path.join(directory, SOCKET_NAME)
            self._clear_stale(dfd, path)
            try:
                sock.bind(path)
            except OSError as err:
                raise self._busy() from err
            self._open_up(dfd, path)
        finally:
            os.close(dfd)

    def _clear_stale(self, dfd: int, path: str) -> None:
        """Remove a dead socket of ours left by a crashed daemon; refuse anything else there."""
        try:
            st = os.stat(SOCKET_NAME, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(st.st_mode):
            link = stat.S_ISLNK(st.st_mode)
            kind = "a symbolic link" if link else "not a socket"
            raise UnsafePath(
                f"{path} is {kind} (uid {st.st_uid}); gpulens will not replace or follow it: "
                "remove it, or use another KINETO_IPC_SOCKET_DIR",
                problem=PathProblem.SYMLINK if link else PathProblem.NOT_A_SOCKET, component=path,
            )
        if is_live(path):
            raise self._busy()
        if st.st_uid != os.geteuid():
            raise UnsafePath(
                f"{path} is a dead socket of uid {st.st_uid}; gpulens removes only its own: "
                "remove it, or use another KINETO_IPC_SOCKET_DIR",
                problem=PathProblem.WRONG_OWNER, component=path,
            )
        os.unlink(SOCKET_NAME, dir_fd=dfd)

    def _open_up(self, dfd: int, path: str) -> None:
        """chmod 0666 the socket just bound (clients of other users send to it), never a link."""
        st = os.stat(SOCKET_NAME, dir_fd=dfd, follow_symlinks=False)
        if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.geteuid():
            raise UnsafePath(f"{path} is not the socket gpulens just bound (uid {st.st_uid}); not using it",
                             problem=PathProblem.REPLACED, component=path)
        # The directory passed open_socket_dir: nobody else can swap this entry after the lstat.
        try:
            os.chmod(SOCKET_NAME, 0o666, dir_fd=dfd, follow_symlinks=False)
        except NotImplementedError:  # an older libc: no lchmod; the check above stands
            os.chmod(SOCKET_NAME, 0o666, dir_fd=dfd)
        self._bound = (st.st_dev, st.st_ino)

    def _busy(self) -> EndpointBusy:
        owner = holder_of(self.socket_dir)
        if owner is None:
            return EndpointBusy(
                f"the Kineto daemon name {self.address} is already taken by another process "
                "(not found in /proc): stop it, or point both sides at another KINETO_IPC_SOCKET_DIR"
            )
        pid, comm, uid = owner
        whose = f"uid {uid}" if uid is not None else "unknown uid"
        holder = f"{comm} (pid {pid}, {whose})"
        if is_possible_squatter(uid):
            # comm and cmdline are the holder's to choose: only the uid means something here.
            hint = (
                "it belongs to another user, not root: possibly a squatter catching trace requests; "
                "stop it (or ask an admin to), or serve a KINETO_IPC_SOCKET_DIR only you can write"
            )
        elif comm.startswith("dynolog"):
            hint = "a dynolog daemon serves it; gpulens can send trace requests through its RPC port 1778"
        elif _is_gpulens(pid):
            holder = f"another gpulens (pid {pid}, {whose})"
            hint = "trace through that gpulens (its agent or TUI), or stop it first"
        else:
            hint = "stop it, or point both sides at another KINETO_IPC_SOCKET_DIR"
        return EndpointBusy(f"the Kineto daemon name {self.address} is already taken by {holder}: {hint}")

    def _serve(self) -> None:
        sock = self._sock
        assert sock is not None
        cmsg_size = socket.CMSG_SPACE(UCRED.size)
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        wake = self._wake[0] if self._wake else -1
        if wake >= 0:
            poller.register(wake, select.POLLIN)
        while not self._stop.is_set():
            ready = poller.poll(None if wake >= 0 else 200)
            if not ready or self._stop.is_set() or all(fd == wake for fd, _ in ready):
                continue
            try:
                data, ancdata, flags, addr = sock.recvmsg(codec.MAX_DATAGRAM_BYTES + 1, cmsg_size)
            except BlockingIOError:
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
            creds = _sender_creds(ancdata)
            if creds is None:  # SO_PASSCRED is on: the kernel always adds them
                self.received += 1
                self.dropped += 1
                log.warning("dropped a Kineto datagram without sender credentials")
                continue
            reply = self.handle_datagram(data, creds[1], creds[0])
            if reply is not None and addr:
                try:
                    sock.sendto(reply, socket.MSG_DONTWAIT, addr)
                except OSError as err:  # not reading (queue full), gave up waiting, or gone
                    self.unsent += 1
                    log.debug("reply to %r not sent: %s", addr, err)

    def _stop_thread(self) -> None:
        self._stop.set()
        if self._wake:
            with contextlib.suppress(OSError):
                os.write(self._wake[1], b"\0")
        stop_thread(self._stop, self._thread)
        self._thread = None
        if self._wake:
            for fd in self._wake:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._wake = ()

    def stop(self) -> None:
        """Stop serving, close the socket and remove our filesystem socket file."""
        self._stop_thread()
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            if self.socket_dir is not None and self._bound is not None:
                path = os.path.join(self.socket_dir, SOCKET_NAME)
                with contextlib.suppress(OSError):
                    st = os.lstat(path)
                    if (st.st_dev, st.st_ino) == self._bound:  # still ours, not a successor's
                        os.unlink(path)
                self._bound = None

    @property
    def running(self) -> bool:
        """True while the serving thread runs."""
        return self._thread is not None and self._thread.is_alive()


def _sender_creds(ancdata: list[tuple[int, int, bytes]]) -> tuple[int, int] | None:
    """(pid, uid) from SCM_CREDENTIALS: filled in by the kernel; unprivileged senders cannot lie."""
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(payload) >= UCRED.size:
            pid, uid, _gid = UCRED.unpack_from(payload)
            return int(pid), int(uid)
    return None


def _is_gpulens(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return b"gpulens" in fh.read(4096)
    except OSError:
        return False


def is_live(path: str | bytes) -> bool:
    """Does a socket answer at ``path`` (a datagram connect: someone holds the name)?"""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        probe.connect(path)
        return True
    except OSError:
        return False
    finally:
        probe.close()
