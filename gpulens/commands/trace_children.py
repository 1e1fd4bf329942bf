"""``gpulens trace --pid PARENT --children``: which descendants to trace (issue 32 item 1).

A 4-rank torchrun traced 2 of 4 ranks, one twice, or only torchrun itself:
the choice stopped at the first descendant that polled and counted a polling
launcher (torchrun inherits ``KINETO_USE_DAEMON=1``). Now:

* the ranks are the polling descendants of the parent that have no polling
  descendant of their own: a launcher (torchrun, its elastic agent, a
  wrapper shell running python) is left out while its children poll; a
  parent with no polling descendant stands for itself;
* where the launcher says how many it starts (``--nproc-per-node N`` /
  ``--nproc_per_node N`` on its command line), the set is taken once it has
  that many, or at the deadline; otherwise once it has stayed the same for
  :data:`SETTLE_S` (ranks start their Kineto polling seconds apart);
* a set smaller than the launcher's count is traced with a warning naming
  both, never silently.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

SETTLE_S = 3.0
"""A set of ranks unchanged this long is complete (3 polls at Kineto's 1 s on-demand interval)."""
_NPROC = re.compile(rb"--nproc[-_]per[-_]node(?:=|\0)(\d{1,4})(?:\0|$)")


@dataclass(frozen=True, slots=True)
class Ranks:
    """The processes to trace for one parent, and what to say about them."""

    parent: int
    pids: tuple[int, ...]
    expected: int | None
    """How many the launcher starts (None: it does not say)."""

    def warning(self) -> str | None:
        """``3 of 4 ranks of 4711 poll …`` when fewer than the launcher's count, else None."""
        if self.expected is None or len(self.pids) >= self.expected:
            return None
        return (f"warning: {len(self.pids)} of {self.expected} ranks of process {self.parent} poll the Kineto "
                f"endpoint (its --nproc-per-node is {self.expected}); tracing those: the others are missing "
                "from the window")


def ranks_of(parent: int, polling: Mapping[int, Iterable[int]]) -> tuple[int, ...]:
    """The leaves among ``parent``'s polling descendants (``polling``: pid -> its ancestors), or the parent itself."""
    below = {pid: set(anc) for pid, anc in polling.items() if pid != parent and parent in set(anc)}
    leaves = tuple(sorted(pid for pid in below if not any(pid in anc for anc in below.values())))
    if leaves:
        return leaves
    return (parent,) if parent in polling else ()


def expected_ranks(cmdline: bytes) -> int | None:
    """The rank count a launcher's command line (NUL-separated, as /proc has it) asks for."""
    m = _NPROC.search(cmdline)
    return int(m.group(1)) if m else None


def read_cmdline(pid: int) -> bytes:
    """``/proc/PID/cmdline`` (first 64 KiB), or b'' when gone or unreadable."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read(65536)
    except OSError:
        return b""


def wait_for_ranks(parents: Iterable[int], polling: Callable[[], Mapping[int, Iterable[int]]],
                   deadline_s: float, cmdline: Callable[[int], bytes] = read_cmdline,
                   clock: Callable[[], float] = time.monotonic,
                   sleep: Callable[[float], None] = time.sleep, every_s: float = 0.2) -> list[Ranks]:
    """The ranks of each parent once their sets have settled (see the module doc), or at ``deadline_s``;
    ``polling`` is asked every ``every_s``."""
    parents = tuple(parents)
    expected = {p: expected_ranks(cmdline(p)) for p in parents}
    end = clock() + deadline_s
    last: dict[int, tuple[int, ...]] = {}
    since = clock()
    while True:
        now_polling = polling()
        found = {p: ranks_of(p, now_polling) for p in parents}
        if found != last:
            last, since = found, clock()
        counted = all((n := expected[p]) is not None and len(found[p]) >= n for p in parents)
        # A launcher that says how many it starts is waited for (to the deadline); else a set unchanged for a while.
        settled = all(found.values()) and clock() - since >= SETTLE_S and all(expected[p] is None for p in parents)
        if counted or settled or clock() >= end:
            return [Ranks(p, found[p], expected[p]) for p in parents]
        sleep(every_s)
