"""When a trace file Kineto is writing counts as finished (the watcher reads nothing before).

libkineto writes a Chrome trace to a temporary name and renames it into
place, but versions before December 2022 wrote the final name as they went;
:func:`trace_complete` tells a closed trace from one still being written by
its last bytes.
"""

from __future__ import annotations

import os
import re

TAIL_BYTES = 8192
"""How much of a trace's end :func:`trace_complete` reads (the closing keys hold a path, <= 4096)."""
_CLOSED = re.compile(rb'"traceName"\s*:\s*"[^"\n]*"[^{}\[\]"]*(?:"[^"\n]*"[^{}\[\]"]*)*}\s*$')


def trace_complete(fd: int, size: int) -> bool:
    """Does the file at ``fd`` (``size`` bytes) hold a finished trace, not one being written?

    libkineto writes ``"traceName"`` only when it finalizes a Chrome trace
    (``ChromeTraceLogger::finalizeTrace``), followed by at most a few flat
    keys (``displayTimeUnit``, ``baseTimeNanoseconds`` in 2024's versions)
    and the closing brace. Before December 2022 it wrote the final name as it
    went (no ``.tmp`` and rename), so a JSON file counts once that closing is
    there. Empty does not; a file that is not JSON at all is taken as it is.
    """
    if size <= 0:
        return False
    head = os.pread(fd, 64, 0).lstrip()
    if not head.startswith(b"{"):
        return bool(head)
    return _CLOSED.search(os.pread(fd, TAIL_BYTES, max(0, size - TAIL_BYTES))) is not None
