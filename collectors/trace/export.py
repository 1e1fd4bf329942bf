"""Copy a trace file to a user-chosen path, gzip-compressed when the name ends in .gz."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

from .errors import TraceFileError


def export_trace(src: str | Path, dest: str | Path) -> str:
    """Copy ``src`` to ``dest``; compress or decompress to match ``dest``'s ``.gz`` suffix.

    Returns the absolute destination path. Raises TraceFileError naming the
    path when either side cannot be read or written.
    """
    src_p, out = Path(src), Path(dest).expanduser()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        src_gz = src_p.open("rb").read(2) == b"\x1f\x8b"
        want_gz = out.name.endswith(".gz")
        opener = gzip.open if src_gz and not want_gz else open
        with opener(src_p, "rb") as fin:
            if want_gz and not src_gz:
                with gzip.open(out, "wb") as fout:
                    shutil.copyfileobj(fin, fout)
            else:
                with open(out, "wb") as fout:
                    shutil.copyfileobj(fin, fout)
    except OSError as err:
        raise TraceFileError(f"cannot export {src_p} to {out}: {err}") from err
    return str(out.resolve())
