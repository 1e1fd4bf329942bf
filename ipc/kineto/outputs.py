"""Where trace files land: each pid's output place, prepared per request, and the file read back.

libkineto inserts ``_<pid>`` before ``.json`` and renames the finished file
into place (:func:`final_paths`); a file at the final name counts only once
its JSON is closed (:func:`~gpulens.ipc.kineto.tracefile.trace_complete`:
older libkineto wrote the final name as it went). The request itself
(:class:`~gpulens.ipc.kineto.requests.TraceRequest`) never carries a path.

The rules (a root agent writes nothing another user chose, and reads
nothing it did not check; docs/security.md):

- By default under ``/tmp/gpulens-<euid>/<random>/<pid>/`` (Kineto refuses
  on-demand log files outside /tmp). /tmp must be root's (or ours) and
  sticky, with no symlink on the way; the base ``gpulens-<euid>`` is used
  only when it is a real directory of ours (else a fresh
  ``gpulens-<euid>-<random>`` is made); modes are set with ``fchmod``
  (0711 for root, so the target can reach its leaf; 0700 otherwise), whatever
  the umask. Each request gets a fresh directory of 128 random bits; each pid
  a leaf made with ``mkdir`` at that directory's descriptor and handed to the
  target with ``fchown`` on its descriptor, mode 0700.
- When the target sets ``KINETO_ONDEMAND_TRACE_DIR`` (newer Kineto writes
  only there): it is used only when the target's uid owns it, with no
  symlink on its path, not writable by others unless sticky; then gpulens
  creates nothing there and Kineto writes ``gpulens-<random>_<pid>.json``
  into it. Any other directory (root's included: a root agent would create
  entries wherever the target pointed) is not touched: the trace goes to the
  default place above and the request's notes say so. Newer Kineto ignores a
  log file outside that directory and writes its default path
  ``/tmp/libkineto_activities_<pid>.json``, which is watched as well.
- Reading back: the watcher and the sender open the file with ``O_NOFOLLOW``
  and ``O_NONBLOCK`` and keep it only if ``fstat`` shows a regular file owned
  by the target's uid (recorded when the request was accepted,
  ``TraceResult.owners``); the leaf must still be the directory prepared.
  Kineto's default path ``/tmp/libkineto_activities_<pid>.json`` gets the
  same checks; another user's entry there is ignored, not read.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import secrets
import stat
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gpulens.core import safefs
from gpulens.core.safefs import PathProblem, UnsafePath
from gpulens.ipc.kineto.tracefile import trace_complete

log = logging.getLogger(__name__)
TRACE_ROOT = Path("/tmp")
KINETO_DEFAULT_DIR = Path("/tmp")  # libkineto's fallback: /tmp/libkineto_activities_<pid>.json
TRACE_DIR_ENV = "KINETO_ONDEMAND_TRACE_DIR"
# A trace the watcher accepts (and the sender may read): GPU traces reach a few GiB.
MAX_TRACE_FILE_BYTES = 16 << 30
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
KEEP_MARKER = ".gpulens-tracing"


@dataclass(frozen=True, slots=True)
class TraceOutput:
    """Where one pid's trace goes, as prepared for it.

    ``directory`` holds the file and ``dir_key`` is its ``(st_dev, st_ino)``
    when prepared: a directory found at that path later with another identity
    was swapped in and is refused. ``log`` is the ACTIVITIES_LOG_FILE handed to
    Kineto. ``owner_uid`` is the target's uid, captured when the request was
    accepted: the only uid whose file gpulens reads back. ``note``: why the
    place is not the one the target asked for (its ``KINETO_ONDEMAND_TRACE_DIR``
    cannot be used), for the request's result.
    """

    directory: Path
    dir_key: tuple[int, int]
    log: Path
    owner_uid: int
    note: str | None = None


@dataclass(frozen=True, slots=True)
class FileProbe:
    """What the watcher saw for one pid: the finished file, a refusal, or nothing yet.

    ``note`` is something seen but not taken (another user's entry at Kineto's
    default path), worth saying if the trace never comes.
    """

    path: str | None = None
    refused: str | None = None
    note: str | None = None


class OutputPlanner:
    """Prepares the output places of one request; use as a context manager.

    The request's fresh directory under the agent's base is made on first use
    and shared by its pids (one leaf each). Raises UnsafePath (or OSError)
    naming the path that cannot be used.
    """

    def __init__(self) -> None:
        self._run: tuple[Path, int] | None = None

    def __enter__(self) -> OutputPlanner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the request directory's descriptor."""
        if self._run is not None:
            os.close(self._run[1])
            self._run = None

    def place(self, pid: int, target_uid: int, target_env: Mapping[str, str] | None) -> TraceOutput:
        """Prepare the place of ``pid``'s trace; the target (``target_uid``) will write it.

        The target's ``KINETO_ONDEMAND_TRACE_DIR`` (in ``target_env``) is used only
        when that uid owns it; otherwise the default place is used and
        ``TraceOutput.note`` says why (logged too).
        """
        chosen = (target_env or {}).get(TRACE_DIR_ENV, "")
        if not chosen:
            return self._default_place(pid, target_uid)
        try:
            return _in_target_dir(chosen, target_uid)
        except UnsafePath as err:
            why = str(err)
        out = self._default_place(pid, target_uid)
        note = f"{why}: tracing into {out.directory}/ instead"
        if not os.path.normpath(out.directory).startswith(os.path.normpath(chosen).rstrip("/") + "/"):
            # Newer Kineto refuses an on-demand log file outside the directory it was given.
            note += (f" (a Kineto that writes only under {TRACE_DIR_ENV} puts it at "
                     f"{KINETO_DEFAULT_DIR}/libkineto_activities_{pid}.json, watched too)")
        log.warning("process %d: %s", pid, note)
        return dataclasses.replace(out, note=note)

    def _default_place(self, pid: int, target_uid: int) -> TraceOutput:
        run_path, run_fd = self._run_dir()
        # The run dir is fresh (128 random bits), ours, mode 0711/0700, under a base only we
        # can change: nobody else can create, rename or remove entries in it, so the leaf
        # made by mkdir is the one opened; the fstat check is defence in depth.
        os.mkdir(str(pid), 0o700, dir_fd=run_fd)
        return _adopt(run_fd, run_path, str(pid), target_uid)

    def _run_dir(self) -> tuple[Path, int]:
        if self._run is None:
            euid = os.geteuid()
            mode = 0o711 if euid == 0 else 0o700  # root's: traversable by the target writing the leaf
            with safefs.opened_dir(TRACE_ROOT) as root_fd:
                safefs.check_dir(root_fd, str(TRACE_ROOT), owners=tuple({0, euid}), shared_ok=True)
                base, base_fd = _own_base(root_fd, euid, mode)
            try:
                name, fd = safefs.make_unique_dir(base_fd, "", mode)
            finally:
                os.close(base_fd)
            self._run = (TRACE_ROOT / base / name, fd)
        return self._run


_base_lock = threading.Lock()
_fallback_base: str | None = None


def _own_base(root_fd: int, euid: int, mode: int) -> tuple[str, int]:
    """Open (creating) ``/tmp/gpulens-<euid>``: ours, exactly ``mode``, no link; a fresh one if squatted."""
    global _fallback_base
    with _base_lock:
        name = _fallback_base or f"gpulens-{euid}"
        try:
            return name, safefs.ensure_dir_at(root_fd, name, mode, parent_path=str(TRACE_ROOT))
        except UnsafePath as err:
            # Someone else made (or linked) the name first: a random one they cannot guess
            # keeps tracing working, and this process keeps using it.
            fresh, fd = safefs.make_unique_dir(root_fd, f"gpulens-{euid}-", mode)
            log.warning("%s; traces go to %s/%s instead", err, TRACE_ROOT, fresh)
            _fallback_base = fresh
            return fresh, fd


def _in_target_dir(chosen: str, target_uid: int) -> TraceOutput:
    """The target's own ``KINETO_ONDEMAND_TRACE_DIR`` (newer Kineto writes only there); creates nothing.

    Raises:
        UnsafePath: naming why the directory is not used: not absolute, a link on
            its path, not the target uid's, or writable by others and not sticky.
    """
    path = Path(chosen)
    if not path.is_absolute():
        raise UnsafePath(f"{TRACE_DIR_ENV} {chosen} is not an absolute path",
                         problem=PathProblem.NOT_ABSOLUTE, component=chosen)
    try:
        with safefs.opened_dir(path) as dfd:  # no symlink anywhere on the path
            st = os.fstat(dfd)
            if st.st_uid != target_uid:
                # Root's (or anyone else's) directory: making an entry there for the target would
                # let any user have root create directories of hers wherever she names.
                raise UnsafePath(f"{TRACE_DIR_ENV} {path} belongs to uid {st.st_uid}, not to uid {target_uid}",
                                 problem=PathProblem.WRONG_OWNER, component=str(path))
            safefs.check_dir(dfd, f"{TRACE_DIR_ENV} {path}", owners=(target_uid,), shared_ok=True)
    except UnsafePath as err:
        text = str(err)
        # check_dir names the directory after the variable: the component is the path alone
        component = err.component.removeprefix(f"{TRACE_DIR_ENV} ") if err.component is not None else None
        raise UnsafePath(text if text.startswith(TRACE_DIR_ENV) else f"{TRACE_DIR_ENV}: {text}",
                         problem=err.problem, component=component) from err
    # The target's own directory: it can rename anything in it at any time (even between a
    # mkdir and an open), so root creates nothing here: Kineto writes a file of a random name
    # directly into it, and only a regular file of the target's is read back.
    name = f"gpulens-{secrets.token_hex(16)}.json"
    return TraceOutput(path, (st.st_dev, st.st_ino), path / name, target_uid)


def _adopt(parent_fd: int, parent: Path, name: str, target_uid: int) -> TraceOutput:
    """Open the directory we just made, check it is ours, hand it to the target, mode 0700."""
    fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            raise UnsafePath(f"{parent / name} was replaced while gpulens created it",
                             problem=PathProblem.REPLACED, component=str(parent / name))
        # Still ours (checked above): a fresh marker keeps gpulens' start-up pruning of
        # /tmp/gpulens-<euid> (which removes empty directories) off a leaf Kineto has yet to write.
        os.close(os.open(KEEP_MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                         dir_fd=fd))
        if target_uid != st.st_uid:
            os.fchown(fd, target_uid, -1)  # through the descriptor: never a path
        os.fchmod(fd, 0o700)
    finally:
        os.close(fd)
    directory = parent / name
    return TraceOutput(directory, (st.st_dev, st.st_ino), directory / "trace.json", target_uid)


def final_paths(log: Path, pid: int) -> list[Path]:
    """Where libkineto may write the finished trace for ``pid``, preferred first.

    The asked path with ``_<pid>`` inserted before ``.json``, then Kineto's
    default path (used when it refuses ours), with and without a second pid.
    """
    asked = log.with_name(f"{log.stem}_{pid}{log.suffix}")
    default = KINETO_DEFAULT_DIR / f"libkineto_activities_{pid}.json"
    return [asked, default, default.with_name(f"libkineto_activities_{pid}_{pid}.json")]


def probe_trace_file(out: TraceOutput, pid: int, since_wall: float) -> FileProbe:
    """Look for ``pid``'s finished trace (written after ``since_wall``) without following or blocking.

    The asked path: anything there that is not a regular file of the target's
    (a link, a FIFO, another uid's file) is refused at once. Kineto's default
    path in /tmp: entries of other users are noted, not taken (anyone may make
    names there); the target's own unsafe entries are refused.
    """
    asked, *defaults = final_paths(out.log, pid)
    try:
        with safefs.opened_dir(out.directory) as dfd:
            st = os.fstat(dfd)
            if (st.st_dev, st.st_ino) != out.dir_key:
                return FileProbe(refused=f"{out.directory} was replaced after gpulens prepared it; nothing read")
            found, note = _check_entry(dfd, asked, out.owner_uid, since_wall, shared=False)
            if found:
                return FileProbe(path=found)
        with safefs.opened_dir(KINETO_DEFAULT_DIR) as tfd:
            safefs.check_dir(tfd, str(KINETO_DEFAULT_DIR), owners=(0,), shared_ok=True)
            for path in defaults:
                found, seen = _check_entry(tfd, path, out.owner_uid, since_wall, shared=True)
                if found:
                    return FileProbe(path=found)
                note = note or seen
    except UnsafePath as err:
        return FileProbe(refused=str(err))
    return FileProbe(note=note)


def _check_entry(
    dfd: int, path: Path, owner: int, since_wall: float, *, shared: bool
) -> tuple[str | None, str | None]:
    """(the path when it holds a finished trace, a note); raises UnsafePath to refuse it."""
    try:
        lst = os.stat(path.name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return None, None
    if shared and lst.st_uid != owner:
        return None, f"{path} belongs to uid {lst.st_uid}, not to the traced process's uid {owner}; not read"
    if shared and lst.st_mtime < since_wall - 1.0:
        return None, None  # left over from before this request
    fd = _open_checked(dfd, path, owner, MAX_TRACE_FILE_BYTES)
    if fd is None:
        return None, None
    try:
        st = os.fstat(fd)
        if st.st_mtime < since_wall - 1.0:
            return None, None
        if not trace_complete(fd, st.st_size):
            return None, f"{path} is still being written (its JSON is not closed yet)"
    finally:
        os.close(fd)
    return str(path), None


def _open_checked(dfd: int, path: Path, owner: int | None, max_bytes: int) -> int | None:
    try:
        return safefs.open_regular_at(dfd, path.name, owner=owner, max_bytes=max_bytes)
    except UnsafePath as err:
        if err.problem is PathProblem.MISSING:
            return None
        text = str(err)  # safefs names what it opened: the bare name here; show the whole path
        component = str(path) if err.component == path.name else err.component
        raise UnsafePath(str(path) + text[len(path.name) :] if text.startswith(path.name) else text,
                         problem=err.problem, component=component) from err


def open_trace_file(path: str | Path, owner_uid: int | None, max_bytes: int = MAX_TRACE_FILE_BYTES) -> int:
    """Open a finished trace for reading (the sender's side of ``TraceResult.files``).

    No symlink anywhere on the path, a regular file (never a FIFO: the open
    does not block), owned by ``owner_uid`` (``TraceResult.owners[pid]``) when
    given, at most ``max_bytes``. Returns a blocking fd the caller closes.

    Raises:
        UnsafePath: naming the path and what is wrong with it.
    """
    p = Path(os.path.abspath(path))
    with safefs.opened_dir(p.parent) as dfd:
        fd = _open_checked(dfd, p, owner_uid, max_bytes)
    if fd is None:
        raise UnsafePath(f"{p} does not exist", problem=PathProblem.MISSING, component=str(p))
    return fd
