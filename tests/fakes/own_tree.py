"""The job pattern that matches this test process's own tree ID (its ancestors' comm, then its own)."""

from __future__ import annotations

import os
import re
from pathlib import Path


def own_tree_pattern() -> str:
    """A regex matching exactly the tree ID of the calling process, read from /proc."""
    names, pid = [], os.getpid()
    while pid > 0:
        names.append(Path(f"/proc/{pid}/comm").read_text().rstrip("\n"))
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return re.escape("/".join(reversed(names))) + "$"
