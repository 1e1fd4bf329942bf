"""Copy a trace file to a user-chosen path, gzip-compressed when the name ends in .gz.

One copy for the TUI's Export and ``gpulens trace -o``. The source must be a
regular file (never a symlink, FIFO or device; owned by ``owner_uid`` when
given); the destination is written through a fresh, unpredictable temporary
name created with ``O_EXCL | O_NOFOLLOW`` (never a file or link planted
there) and renamed into place; decompression is streamed and stops at
:func:`output_limit`. The destination's directory must already exist:
nothing is created at a path the user mistyped.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import secrets
from pathlib import Path
from typing import BinaryIO

from gpulens.analysis.trace.errors import TraceFileError
from gpulens.core.safefs import UnsafePath, open_regular_at

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
    out = Path(os.path.abspath(Path(dest).expanduser()))
    if out.is_dir():
        raise TraceFileError(f"cannot export to {out}: it is a directory; give a file name")
    if not out.parent.is_dir():
        raise TraceFileError(f"cannot export to {out}: directory {out.parent} does not exist")
    try:
        rfd = open_regular_at(None, src, owner=owner_uid, max_bytes=1 << 62)
    except UnsafePath as err:
        raise TraceFileError(f"cannot export {src}: {err}") from err
    tmp = out.with_name(f".{out.name}.{secrets.token_hex(8)}.tmp")
    try:
        with os.fdopen(rfd, "rb") as fin:
            limit, why = output_limit(os.fstat(fin.fileno()).st_size)
            wfd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
            with os.fdopen(wfd, "wb") as fout:
                _stream(fin, fout, out.name.endswith(".gz"), limit, why, str(src))
        os.replace(tmp, out)
    except (OSError, EOFError, gzip.BadGzipFile) as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise TraceFileError(f"cannot write {out} from {src}: {err}") from err
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return str(out)


def output_limit(src_bytes: int) -> tuple[int, str]:
    """The most bytes a trace of ``src_bytes`` may expand to, and how the limit was set."""
    raw = os.environ.get(LIMIT_ENV, "").strip()
    if raw:
        if not raw.isdigit() or int(raw) <= 0:
            raise TraceFileError(f"{LIMIT_ENV}={raw!r}: expected a positive number of bytes")
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
                    f"set {LIMIT_ENV}=BYTES to allow more"
                )
            writer.write(chunk)
    finally:
        if writer is not fout:
            writer.close()  # writes the gzip trailer; fout itself is closed by the caller
