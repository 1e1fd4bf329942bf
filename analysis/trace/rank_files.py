"""Which files make up a job's traces, and which rank each one is.

A directory stands for every ``*.json``, ``*.json.gz`` and
``*.pt.trace.json*`` file directly in it (hidden files skipped, sorted by
name). A rank comes from the trace's ``distributedInfo.rank``, else from
the file name (``rank-3``, ``rank_3``, ``rank3``), else from the file's
position in the list (skipping ranks other files claim).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from gpulens.analysis.trace.errors import TraceFileError, TraceProblem
from gpulens.core.sanitize import clean_text

MAX_FILES = 4096
"""Most files one analysis reads (a 4096-rank job); more is refused, not truncated."""
_RANK_IN_NAME = re.compile(r"rank[-_.]?(\d{1,7})(?!\d)", re.IGNORECASE)


def is_trace_name(name: str) -> bool:
    """True for a file name a trace directory's listing includes."""
    return not name.startswith(".") and (
        name.endswith((".json", ".json.gz")) or ".pt.trace.json" in name
    )


def trace_files(paths: Sequence[str]) -> list[str]:
    """Files named, and trace files in directories named, in order, without repeats.

    Raises:
        TraceFileError: a path that does not exist, a directory with no trace
            files, or more than :data:`MAX_FILES` files.
    """
    out: list[str] = []
    seen: set[str] = set()
    for p in paths:
        shown = clean_text(p)
        if os.path.isdir(p):
            try:
                names = sorted(n for n in os.listdir(p) if is_trace_name(n))
            except OSError as err:
                raise TraceFileError(f"{shown}: cannot list the directory: {err.strerror}",
                                     problem=TraceProblem.CANNOT_OPEN) from None
            files = [str(Path(p) / n) for n in names if os.path.isfile(Path(p) / n)]
            if not files:
                raise TraceFileError(f"{shown}: a directory with no trace files in it (*.json, *.json.gz, *.pt.trace.json*)",
                                     problem=TraceProblem.NO_TRACE_FILES)
        elif os.path.exists(p):
            files = [p]
        else:
            raise TraceFileError(f"{shown}: no such file or directory", problem=TraceProblem.CANNOT_OPEN)
        for f in files:
            key = os.path.realpath(f)
            if key not in seen:
                seen.add(key)
                out.append(f)
        if len(out) > MAX_FILES:
            raise TraceFileError(f"more than {MAX_FILES} trace files: name fewer files or directories",
                                 problem=TraceProblem.NO_TRACE_FILES)
    return out


def rank_from_name(path: str) -> int | None:
    """The rank a file name states (``rank-3.json`` -> 3), else None."""
    m = _RANK_IN_NAME.search(os.path.basename(path))
    return int(m.group(1)) if m else None


def rank_from_info(info: dict[str, object] | None) -> int | None:
    """``distributedInfo.rank`` when it is a non-negative integer."""
    r = info.get("rank") if info else None
    return r if isinstance(r, int) and not isinstance(r, bool) and r >= 0 else None


def assign_ranks(claims: Sequence[tuple[str, int | None, int | None]]) -> list[tuple[int, str]]:
    """``(path, rank from distributedInfo, rank from name)`` per file -> ``(rank, source)`` per file.

    Raises:
        TraceFileError: two files that claim the same rank.
    """
    out: list[tuple[int, str] | None] = []
    owner: dict[int, str] = {}
    for path, info_rank, name_rank in claims:
        rank, source = (info_rank, "distributedInfo") if info_rank is not None else (name_rank, "file name")
        if rank is None:
            out.append(None)
            continue
        if rank in owner:
            raise TraceFileError(
                f"{clean_text(owner[rank])} and {clean_text(path)} are both rank {rank} (from their {source}): "
                "analyse the ranks of one job together, or compare two runs with --diff", problem=TraceProblem.RANK_CLASH,
            )
        owner[rank] = path
        out.append((rank, source))
    nxt = 0
    result = []
    for item in out:
        if item is None:
            while nxt in owner:
                nxt += 1
            owner[nxt] = ""
            item = (nxt, "order")
        result.append(item)
    return result
