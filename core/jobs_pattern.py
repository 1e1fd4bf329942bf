"""Job detection's defaults and its pattern matcher (shared by the collectors and the config).

A tree ID is built by any user who can fork: a chain of processes each
named by ``prctl(PR_SET_NAME)``. Python's ``re`` backtracks, and the
default pattern takes time cubic in the tree ID on such a chain (0.7 s for
one 512-deep ID named ``systemdpythonsh``, issue 27). So the pattern is
matched with RE2, whose time is linear in the input whatever the pattern,
and the tree ID keeps only the nearest :data:`MAX_TREE_DEPTH` names (the
cut shown as ``top/…/nearest``). A pattern RE2 refuses (lookaround,
backreferences) falls back to Python's ``re`` on that bounded ID, and the
config says so.
"""

from __future__ import annotations

import importlib
import re
import types
from collections.abc import Sequence
from typing import Any

DEFAULT_JOB_PATTERN = r"systemd.*/([a-z]*sh|containerd-shim-runc-v2|slurmstepd)/.*python[0-9.]*$"
"""Python started from a shell or in a container (Fixstars AIBooster's default), or by Slurm's
``slurmstepd`` directly (an ``srun`` task: ``systemd/slurmd/slurmstepd/python3``)."""

DEFAULT_JOB_KEY_ENV: tuple[str, ...] = (
    "SLURM_JOB_ID",
    "TORCHELASTIC_RUN_ID",
    "PBS_JOBID",
    "LSB_JOBID",
    "JOB_ID",
)
"""Environment variables read, in order, for a job key that joins hosts."""

MAX_TREE_DEPTH = 64
"""Names kept in a tree ID, the process's own included (real trees are a dozen deep)."""
CUT = "…"
"""Stands for the ancestors left out of a deeper tree ID: ``systemd/…/sh/sh/python3``."""


def _load_re2() -> types.ModuleType | None:
    try:
        return importlib.import_module("re2")  # google-re2: it ships no stubs, so its names are untyped
    except ImportError:
        return None


_RE2 = _load_re2()
RE2_AVAILABLE = _RE2 is not None
"""google-re2 imports (a dependency; missing only on a platform without its wheels)."""


def join_tree_id(names: Sequence[str], top: str | None = None) -> str:
    """The tree ID shown and matched: ``init/sshd/bash/python3``.

    ``names`` are the nearest names, oldest first, the process's own last;
    ``top`` is the oldest ancestor's name when ancestors between were cut.
    """
    nearest = "/".join(names)
    return nearest if top is None else f"{top}/{CUT}/{nearest}"


class JobPattern:
    """The job pattern, compiled once; :meth:`search` is what the scanner calls per process."""

    __slots__ = ("_search", "engine", "pattern", "why_not_re2")

    def __init__(self, pattern: str) -> None:
        """Raises re.error when Python's ``re`` refuses the pattern (callers: ConfigError)."""
        python = re.compile(pattern)
        self.pattern = pattern
        self.engine = "re"
        """``"re2"`` (linear time) or ``"re"`` (backtracking, on the bounded tree ID)."""
        self.why_not_re2: str | None = None
        """Why the pattern is matched with Python's ``re``, in a few words; None with RE2."""
        self._search: Any = python.search
        if _RE2 is None:
            self.why_not_re2 = "google-re2 is not installed"
            return
        options = _RE2.Options()
        options.log_errors = False  # RE2 would print its refusal on stderr, under the TUI
        options.never_capture = True  # only whether it matches counts
        try:
            self._search = _RE2.compile(pattern, options).search
            self.engine = "re2"
        except (_RE2.error, TypeError, ValueError) as err:  # re2.error (bytes message), or the wrapper's own
            msg = err.args[0] if err.args else err
            self.why_not_re2 = f"RE2 refuses it ({msg.decode(errors='replace') if isinstance(msg, bytes) else msg})"

    def search(self, tree_id: str) -> bool:
        """Whether the pattern occurs in ``tree_id`` (as ``re.search``)."""
        return self._search(tree_id) is not None


def compile_job_pattern(pattern: str) -> JobPattern:
    """:class:`JobPattern` for ``pattern``; raises re.error for a bad one."""
    return JobPattern(pattern)
