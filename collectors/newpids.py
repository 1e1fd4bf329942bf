"""Which processes are new since the last scan, without listing all of ``/proc`` each time a pid is handed out.

The fifth field of ``/proc/loadavg`` is the pid most recently allocated in this pid
namespace. The job scanner (:mod:`gpulens.collectors.jobs`) asks :class:`NewPids`
once a tick:

* the last pid did not move: no process or thread was created, nothing is new;
* it moved forward: only the processes whose pid lies in the range handed out are
  new. ``/proc`` lists processes (not threads) in pid order, and its directory
  offset of pid P is P plus a constant (``FIRST_PROCESS_ENTRY`` + 2 in
  fs/proc/base.c), so the listing is read from the first pid handed out on: one
  ``getdents`` that returns the new processes and the few with higher pids. Listing
  all of ``/proc`` with a thousand processes costs about 1.5 ms; this, tens of
  microseconds. Whether the offsets are the kernel's is tried when the scanner starts
  (reading from our own pid on must give our own pid first); where they are not (a
  test's fake tree, another kernel), ``/proc`` is listed whole;
* otherwise (it moved back: wrapped past pid_max; it cannot be read; ``/proc`` is
  another pid namespace's than ours, so its numbers are not the ones loadavg gives)
  ``/proc`` is listed whole, as it is every :data:`FULL_EVERY` ticks whatever
  happened, so that dead processes leave the scanner's cache.

A pid handed out again while a dead process with that pid is still cached is new all
the same: it is in the range handed out.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Collection
from dataclasses import dataclass

FULL_EVERY = 30
"""/proc is listed whole at least every this many ticks, to drop dead pids."""
OFFSET_BASE = 256
"""``FIRST_PROCESS_ENTRY``: /proc's directory offset of pid P is P + 258 (P + 257 before Linux 3.17,
which had no ``thread-self``); reading from ``OFFSET_BASE + P`` on gives the processes from P - 2 (or P - 1)."""


@dataclass(frozen=True, slots=True)
class Found:
    """What changed since the last tick.

    ``listed``: every entry of ``/proc`` when it was listed whole (dead pids are the cached ones not
    in it), else None; ``new``: pids (as /proc entry names) to read as new processes.
    """

    listed: frozenset[str] | None = None
    new: frozenset[str] = frozenset()


NOTHING = Found()


def _same_namespace(proc: str) -> bool:
    """Whether ``proc`` numbers processes as our pid namespace does (``<proc>/self`` is our pid).

    A tree without ``self`` (a test's fake /proc) numbers them as its own ``loadavg`` does."""
    try:
        return int(os.readlink(f"{proc}/self")) == os.getpid()
    except (OSError, ValueError):
        return True


class NewPids:
    """Tells the job scanner, tick by tick, which pids are new (see the module doc)."""

    __slots__ = ("_dir", "_loadavg", "_not_pids", "_prev", "_proc", "_quiet", "_seek")

    def __init__(self, proc: str, loadavg: Callable[[], bytes]) -> None:
        """``loadavg()``: ``<proc>/loadavg``'s bytes."""
        self._proc = proc
        self._loadavg = loadavg
        self._prev: int | None = None
        """The last pid at the last tick (None: unknown, so the next tick lists /proc whole)."""
        self._quiet = 0
        """Ticks since /proc was last listed whole."""
        self._not_pids: set[str] = set()  # /proc/self, /proc/net, ...
        self._dir: int | None = None
        """``proc`` opened as a directory, kept for reading its listing from an offset."""
        self._seek = False
        """Whether reading the listing from a pid's offset on works here (tried once)."""
        if _same_namespace(proc):
            me = os.getpid()
            with contextlib.suppress(OSError):
                self._seek = self._from(me, me) == [str(me)]
        if not self._seek:
            self.close()

    def close(self) -> None:
        """Close the kept directory (the next read from an offset opens it again)."""
        if self._dir is not None:
            fd, self._dir = self._dir, None
            os.close(fd)

    def __del__(self) -> None:  # a scanner dropped without close() does not leak its descriptor
        with contextlib.suppress(OSError):
            self.close()

    def last_pid(self) -> int | None:
        """The most recently allocated pid in our namespace (``/proc/loadavg`` field 5)."""
        try:
            return int(self._loadavg().split()[4])
        except (OSError, ValueError, IndexError):
            return None

    def forget(self) -> None:
        """Make the next tick list /proc whole (as if the pids handed out were not known)."""
        self._prev = None

    def allocated(self, pid: int, last_pid: int) -> bool:
        """Whether ``pid`` lies in (the last tick's last pid, ``last_pid``], wrapping at pid_max."""
        prev = self._prev
        if prev is None or prev == last_pid:
            return False
        if prev < last_pid:
            return prev < pid <= last_pid
        return pid > prev or pid <= last_pid  # wrapped past pid_max

    def _from(self, low: int, high: int) -> list[str] | None:
        """The processes with ``low`` <= pid <= ``high``, read from pid ``low``'s offset of the listing on;
        None when the listing there is not pids in order (not the kernel's offsets)."""
        if self._dir is None:
            self._dir = os.open(self._proc, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        os.lseek(self._dir, OFFSET_BASE + low, os.SEEK_SET)
        found: list[str] = []
        previous = -1
        with os.scandir(self._dir) as entries:  # a duplicate of the descriptor: it reads from the offset
            for entry in entries:
                name = entry.name
                if not name.isdigit() or int(name) <= previous:
                    return None
                previous = int(name)
                if previous > high:
                    break
                if previous >= low:
                    found.append(name)
        return found

    def _quick(self, last: int, prev: int | None) -> Found | None:
        """This tick without the full listing: nothing handed out, or only the pids after ``prev`` (None: list)."""
        if last == prev:
            self._quiet += 1
            return NOTHING
        if self._seek and prev is not None and prev < last:
            try:
                new = self._from(prev + 1, last)
            except OSError:
                new = None
            if new is not None:
                self._prev = last
                self._quiet += 1
                return Found(None, frozenset(new))
        return None

    def _reused(self, names: frozenset[str], known: Collection[str], prev: int, last: int) -> set[str]:
        """Pids handed out since the last tick: new processes even when a dead one with the same pid is still
        cached (pid_max wrapped)."""
        if 0 < last - prev <= len(known):
            return {name for name in map(str, range(prev + 1, last + 1)) if name in known and name in names}
        return {n for n in names if n in known and n.isdigit() and self.allocated(int(n), last)}

    def tick(self, known: Collection[str]) -> Found:
        """What is new since the last tick; ``known``: the pids (entry names) cached now.

        Raises:
            OSError: /proc had to be listed and cannot be.
        """
        # Read the last pid first: a process forked after it is found next tick.
        last, prev = self.last_pid(), self._prev
        if last is not None and self._quiet < FULL_EVERY:
            quick = self._quick(last, prev)
            if quick is not None:
                return quick
        names = frozenset(os.listdir(self._proc))
        new_names = names.difference(known, self._not_pids)  # set arithmetic stays in C
        odd = {name for name in new_names if not name.isdigit()}
        if odd:
            self._not_pids |= odd
            new_names -= odd
        if last is not None and prev is not None and last != prev:
            new_names |= self._reused(names, known, prev, last)
        self._prev, self._quiet = last, 0
        return Found(names, new_names)
