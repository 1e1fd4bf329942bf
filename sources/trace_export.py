"""Copy a trace file to a user-chosen path, gzip-compressed when the name ends in .gz.

One copy for the TUI's Export and ``gpulens trace -o``. The source must be a
regular file (never a symlink, FIFO or device; owned by ``owner_uid`` when
given); the destination is written through a fresh, unpredictable temporary
name created with ``O_EXCL | O_NOFOLLOW`` (never a file or link planted
there) and renamed into place; decompression is streamed and stops at
:func:`output_limit`. The destination's directory must already exist:
nothing is created at a path the user mistyped (:func:`check_destination`
says why before any work, like ``gpulens profile -o``).

Several ranks (:func:`export_ranks`): a name ending in ``.tar.gz`` / ``.tgz``
/ ``.tar`` becomes one archive holding every rank's file as it is; any other
name is a directory, created only as that last component (its parent must
exist), holding one file per rank.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import tarfile
from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO

from gpulens.analysis.trace.errors import TraceFileError, TraceProblem
from gpulens.core.safefs import PathProblem, UnsafePath, new_file, open_regular_at


class ExportError(TraceFileError):
    """A destination that cannot be written (missing parent, a directory, a failed write); the message says why.

    ``problem``: BAD_DESTINATION, NO_TRACE_FILES, WRITE_FAILED, or REFUSED (a source's damaged gzip).
    """

    title = "cannot export"


def _unreadable(src: str | Path, err: UnsafePath) -> TraceFileError:
    """``cannot export SRC: WHY``: a source missing or unreadable (CANNOT_OPEN), or refused as unsafe (UNSAFE)."""
    # a file on the way (NOT_A_DIRECTORY) is as good as no such source
    missing = err.problem in (PathProblem.MISSING, PathProblem.CANNOT_OPEN, PathProblem.NOT_A_DIRECTORY)
    return TraceFileError(f"cannot export {src}: {err}",
                          problem=TraceProblem.CANNOT_OPEN if missing else TraceProblem.UNSAFE)


def _not_written(text: str, err: BaseException) -> ExportError:
    """A write that failed; a source's damaged gzip met on the way is that source's fault (REFUSED)."""
    damaged = isinstance(err, (EOFError, gzip.BadGzipFile))
    return ExportError(text, problem=TraceProblem.REFUSED if damaged else TraceProblem.WRITE_FAILED)


def _bad_destination(text: str) -> ExportError:
    return ExportError(text, problem=TraceProblem.BAD_DESTINATION)


MAX_OUTPUT_BYTES = 4 << 30
MAX_EXPANSION = 200
LIMIT_ENV = "GPULENS_MAX_TRACE_BYTES"
CHUNK_BYTES = 1 << 20


def export_trace(src: str | Path, dest: str | Path, *, owner_uid: int | None = None) -> str:
    """Copy ``src`` to ``dest``; compress or decompress to match ``dest``'s ``.gz`` suffix.

    Returns the absolute destination path.

    Raises:
        TraceFileError: unreadable, unsafe, corrupt, over the limit, or not writable (one line).
    """
    out = check_destination(dest)
    try:
        rfd = open_regular_at(None, src, owner=owner_uid, max_bytes=1 << 62)
    except UnsafePath as err:
        raise _unreadable(src, err) from err
    try:
        with os.fdopen(rfd, "rb") as fin:
            limit, why = output_limit(os.fstat(fin.fileno()).st_size)
            with new_file(out, 0o666) as fout:
                _stream(fin, fout, out.name.endswith(".gz"), limit, why, str(src))
    except (OSError, EOFError, gzip.BadGzipFile) as err:
        raise _not_written(f"cannot write {out} from {src}: {err}", err) from err
    return str(out)


ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar")


def is_archive(dest: str | Path) -> bool:
    """True when ``dest`` names a tar archive (``.tar.gz``, ``.tgz``, ``.tar``)."""
    return str(dest).lower().endswith(ARCHIVE_SUFFIXES)


def check_destination(dest: str | Path, *, directory: bool = False) -> Path:
    """The absolute path ``dest`` names, when it can be written without creating any parent.

    ``directory``: ``dest`` is a directory to hold several files (it may
    exist; else only it is created). Otherwise ``dest`` is a file name.

    Raises:
        ExportError: empty, its parent directory missing (or not a directory), a file
            name that is a directory, or a directory name that is a file (one line).
    """
    text = str(dest).strip()
    if not text:
        raise _bad_destination("cannot export: no path given")
    out = Path(os.path.abspath(Path(text).expanduser()))
    if directory:
        if out.exists() and not out.is_dir():
            raise _bad_destination(f"cannot export to {out}: it exists and is not a directory")
    elif out.is_dir():
        raise _bad_destination(f"cannot export to {out}: it is a directory; give a file name")
    if not out.parent.is_dir():
        raise _bad_destination(f"cannot export to {out}: directory {out.parent} does not exist "
                               "(gpulens creates no parent directories)")
    return out


def export_ranks(files: Mapping[str, str | Path], dest: str | Path, *,
                 owner_uids: Mapping[str, int] | None = None) -> list[str]:
    """Write every trace of ``files`` (member name -> source) to ``dest``: an archive or a directory.

    Member names are file names (``rank0-pid1234.json.gz``); a source keeps its
    compression in an archive, and in a directory gets the member's suffix.
    Returns the paths written (the archive alone, or each file).

    Raises:
        TraceFileError: no files, an unsafe member name, a missing parent, an unreadable
            source, or a write failure (nothing half-written is left behind).
    """
    if not files:
        raise ExportError("cannot export: no trace files", problem=TraceProblem.NO_TRACE_FILES)
    for name in files:
        if not name or "/" in name or name in (".", "..") or "\0" in name:
            raise _bad_destination(f"cannot export: bad member name {name!r}")
    uids = owner_uids or {}
    if is_archive(dest):
        return [_write_archive(files, check_destination(dest), uids)]
    out = check_destination(dest, directory=True)
    made = False
    if not out.exists():
        try:
            os.mkdir(out, 0o777)  # the one directory the user named; its parent exists
        except OSError as err:
            raise _not_written(f"cannot create {out}: {err.strerror or err}", err) from err
        made = True
    written: list[str] = []
    done = False
    try:
        for name, src in files.items():
            written.append(export_trace(src, out / name, owner_uid=uids.get(name)))
        done = True
    finally:
        if not done:  # whatever stopped it: nothing half-written is left behind
            for path in written:
                with contextlib.suppress(OSError):
                    os.unlink(path)
            if made:
                with contextlib.suppress(OSError):
                    os.rmdir(out)
    return written


def _write_archive(files: Mapping[str, str | Path], out: Path, uids: Mapping[str, int]) -> str:
    """One tar (gzip unless ``.tar``) of every source as it is, through an exclusive temporary name."""
    mode = "w" if str(out).lower().endswith(".tar") else "w:gz"
    try:
        with new_file(out, 0o666) as raw, tarfile.open(fileobj=raw, mode=mode) as tar:  # type: ignore[call-overload]
            for name, src in files.items():
                try:
                    rfd = open_regular_at(None, src, owner=uids.get(name), max_bytes=1 << 62)
                except UnsafePath as err:
                    raise _unreadable(src, err) from err
                with os.fdopen(rfd, "rb") as fin:
                    info = tarfile.TarInfo(name)
                    st = os.fstat(fin.fileno())
                    info.size, info.mtime, info.mode = st.st_size, int(st.st_mtime), 0o644
                    tar.addfile(info, fin)
    except (OSError, tarfile.TarError) as err:
        raise _not_written(f"cannot write {out}: {err}", err) from err
    return str(out)


def output_limit(src_bytes: int) -> tuple[int, str]:
    """The most bytes a trace of ``src_bytes`` may expand to, and how the limit was set."""
    raw = os.environ.get(LIMIT_ENV, "").strip()
    if raw:
        if not raw.isdigit() or int(raw) <= 0:
            raise TraceFileError(f"{LIMIT_ENV}={raw!r}: expected a positive number of bytes",
                                 problem=TraceProblem.BAD_LIMIT)
        return int(raw), f"{LIMIT_ENV}={raw}"
    limit = min(MAX_OUTPUT_BYTES, MAX_EXPANSION * src_bytes)
    return limit, f"{MAX_EXPANSION}x the {src_bytes}-byte input, at most {MAX_OUTPUT_BYTES >> 30} GiB"


def _stream(fin: BinaryIO, fout: BinaryIO, want_gz: bool, limit: int, why: str, shown: str) -> None:
    """Copy ``fin`` to ``fout`` in chunks, (de)compressing to match; stop past ``limit`` plain bytes."""
    src_gz = fin.read(2) == b"\x1f\x8b"
    fin.seek(0)
    reader: BinaryIO | gzip.GzipFile = gzip.GzipFile(fileobj=fin, mode="rb") if src_gz and not want_gz else fin
    writer: BinaryIO | gzip.GzipFile = gzip.GzipFile(fileobj=fout, mode="wb") if want_gz and not src_gz else fout
    total = 0
    try:
        while chunk := reader.read(CHUNK_BYTES):
            total += len(chunk)
            if total > limit:
                raise TraceFileError(
                    f"{shown} holds more than {limit} bytes of trace (the limit: {why}); not written: "
                    f"set {LIMIT_ENV}=BYTES to allow more", problem=TraceProblem.OVER_LIMIT,
                )
            writer.write(chunk)
    finally:
        if writer is not fout:
            writer.close()  # writes the gzip trailer; fout itself is closed by the caller
