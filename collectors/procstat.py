"""Host counters straight from /proc: one ``pread`` of a kept-open file per tick.

psutil reads the same files (``/proc/stat`` twice, ``/proc/meminfo`` twice and
``/proc/vmstat`` for swap in/out figures the collector does not use) and builds a
named tuple for every line; measured on the 2-core development VM, its six calls
took about 230 us a tick against about 40 us for these reads
(benchmarks/RESULTS.md, "Collector tick (issue #29 target)"). The parsers take only
the fields the host sample reports:

* ``/proc/stat``: each ``cpu`` line -> (busy, total) jiffies as ``top`` counts them
  (total is user + nice + system + idle + iowait + irq + softirq + steal, guest
  being inside user; busy leaves out idle and iowait);
* ``/proc/meminfo``: named fields in bytes (the kernel's kB x 1024, as psutil and
  ``free`` count them);
* ``/proc/net/dev``: each interface's received and sent bytes;
* ``/proc/diskstats``: read and written bytes (512-byte sectors, whatever the
  device's block size) of the devices a caller asks for.

Reads are bounded (:class:`ProcFile`), and a file that does not look as the kernel
writes it raises ValueError saying what is wrong: the caller turns it into a
reason, never into 0.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable

SECTOR_BYTES = 512
"""/proc/diskstats counts 512-byte sectors whatever the device's block size."""
MAX_PROC_BYTES = 4 << 20
"""Most bytes read of one file: /proc/stat of a 1,024-CPU machine is about 100 KiB."""

MAX_KEPT = 128
"""Most ``/proc/PID/stat`` files :class:`KeptStats` keeps open (the scan's shells and jobs are a few dozen)."""

Jiffies = tuple[int, int]
"""(busy jiffies, total jiffies) of one CPU or of the whole machine."""


class ProcFile:
    """A /proc file kept open and read from its start on each :meth:`read` (one ``pread``).

    /proc files are generated when read, so a kept descriptor gives fresh figures
    each time and saves the open and close of every tick. The file is opened on the
    first read; a failed read closes it, so the next read opens it again.
    """

    __slots__ = ("_enough", "_fd", "_limit", "_size", "path")

    def __init__(self, path: str, size: int = 16 << 10, *, limit: int = MAX_PROC_BYTES,
                 enough: bytes | None = None) -> None:
        """``size``: the first buffer (grown while the file fills it); ``limit``: the most
        bytes read; ``enough``: a marker after which nothing more is needed (``/proc/stat``
        needs its cpu lines only)."""
        self.path = path
        self._fd: int | None = None
        self._size = max(1, min(size, limit))
        self._limit = limit
        self._enough = enough

    def read(self) -> bytes:
        """The file's bytes from offset 0.

        Raises:
            OSError: the file cannot be opened or read.
            ValueError: it is larger than the limit (and ``enough`` was not found).
        """
        if self._fd is None:
            # O_NONBLOCK: a FIFO put in the file's place gives an error, not a hang.
            self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        size = self._size
        try:
            while True:
                data = os.pread(self._fd, size, 0)
                if len(data) < size or (self._enough is not None and self._enough in data):
                    return data
                if size >= self._limit:
                    raise ValueError(f"larger than {self._limit} bytes")
                size = self._size = min(size * 4, self._limit)
        except OSError:
            self.close()
            raise

    def close(self) -> None:
        """Close the kept descriptor (the next read opens the file again)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def __del__(self) -> None:  # a collector dropped without close() does not leak its descriptors
        with contextlib.suppress(OSError):
            self.close()


class OncePerTick:
    """A :class:`ProcFile` read at most once between two :meth:`fresh` calls: one ``pread`` of
    ``/proc/loadavg`` a tick gives the sampler both the load average (host) and the last pid handed
    out (the job scan's :class:`~gpulens.collectors.newpids.NewPids`)."""

    __slots__ = ("_data", "file")

    def __init__(self, file: ProcFile) -> None:
        self.file = file
        self._data: bytes | None = None

    def fresh(self) -> None:
        """A new tick: the next :meth:`read` reads the file again."""
        self._data = None

    def read(self) -> bytes:
        """The file's bytes as first read since :meth:`fresh`.

        Raises:
            OSError, ValueError: as :meth:`ProcFile.read` (and again on the next read: nothing is kept).
        """
        data = self._data
        if data is None:
            data = self._data = self.file.read()
        return data


class KeptStats:
    """``/proc/PID/stat`` of processes read tick after tick (shells, young processes, jobs), kept open.

    A kept descriptor answers with one ``pread``. It stays bound to the process it
    was opened on, and a live process's pid is never another's: while the process
    lives a kept read gives what a read by path would, and once it is gone the
    kept read fails (ESRCH) and the file is read by its path again. Reads by path
    go through ``read_path(path, size)``; after one with ``keep``, the file is
    opened to be kept (had the pid changed hands in between, the next read shows
    the other process's start time, as a read by path would). At most ``limit``
    are kept (the rest are read by path each time), and :meth:`sweep` closes those
    not read since the last sweep.
    """

    __slots__ = ("_fds", "_limit", "_proc", "_read_path", "_read_since")

    def __init__(self, proc: str, read_path: Callable[[str, int], bytes], limit: int = MAX_KEPT) -> None:
        self._proc = proc
        self._read_path = read_path
        self._limit = limit
        self._fds: dict[str, int] = {}
        self._read_since: set[str] = set()

    def read(self, name: str, keep: bool, size: int = 4096) -> bytes:
        """``/proc/<name>/stat`` (at most ``size`` bytes); ``keep``: keep it open for the next read.

        Raises:
            OSError: the process is gone or unreadable.
        """
        fd = self._fds.get(name)
        if fd is not None:
            try:
                data = os.pread(fd, size, 0)
            except OSError:  # its process is gone: the pid may be another's now, read by path
                self.forget(name)
            else:
                self._read_since.add(name)
                return data
        path = f"{self._proc}/{name}/stat"
        data = self._read_path(path, size)
        if keep and len(self._fds) < self._limit:
            with contextlib.suppress(OSError):  # gone since: read by path next time
                self._fds[name] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                self._read_since.add(name)
        return data

    def forget(self, name: str) -> None:
        """Close the kept file of ``name`` if there is one."""
        fd = self._fds.pop(name, None)
        if fd is not None:
            os.close(fd)

    def sweep(self) -> None:
        """Close the kept files not read since the last sweep."""
        for name in self._fds.keys() - self._read_since:
            self.forget(name)
        self._read_since.clear()

    def close(self) -> None:
        """Close every kept file."""
        for name in list(self._fds):
            self.forget(name)

    def __del__(self) -> None:  # a scanner dropped without close() does not leak its descriptors
        with contextlib.suppress(OSError):
            self.close()


def _cpu_jiffies(line: bytes) -> Jiffies:
    values = list(map(int, line.split()[1:9]))  # user nice system idle iowait irq softirq steal
    if len(values) < 4:
        raise ValueError(f"cpu line with {len(values)} counters: {line[:80]!r}")
    total = sum(values)
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return total - idle, total


def parse_cpu_lines(data: bytes) -> tuple[Jiffies, tuple[Jiffies, ...]]:
    """``/proc/stat`` -> (busy, total) jiffies of the machine, then of each CPU in order.

    Raises:
        ValueError: no aggregate ``cpu`` first line, or a cpu line that is not counters.
    """
    end = data.find(b"\nintr ")  # the cpu lines come first; intr's (one count per interrupt) can be long
    lines = (data if end < 0 else data[:end]).split(b"\n")
    first = lines[0]
    if not first.startswith(b"cpu "):
        raise ValueError(f"first line is not the aggregate 'cpu' line: {first[:80]!r}")
    cores = []
    for line in lines[1:]:
        if not line.startswith(b"cpu"):
            break  # intr, ctxt, ...: the cpu lines come first
        cores.append(_cpu_jiffies(line))
    return _cpu_jiffies(first), tuple(cores)


def parse_meminfo(data: bytes, keys: Iterable[bytes]) -> dict[bytes, int]:
    """The ``keys`` (``b"MemTotal"``, ...) of ``/proc/meminfo`` in bytes; a key not in the file is left out.

    Raises:
        ValueError: a key's line holds no number.
    """
    text = b"\n" + data
    out: dict[bytes, int] = {}
    for key in keys:
        at = text.find(b"\n" + key + b":")
        if at < 0:
            continue
        start = at + len(key) + 2
        end = text.find(b"\n", start)
        value = text[start : end if end >= 0 else len(text)].split()
        if not value:
            raise ValueError(f"{key.decode()} has no value")
        out[key] = int(value[0]) * 1024
    return out


def parse_net_dev(data: bytes) -> list[tuple[bytes, int, int]]:
    """``/proc/net/dev`` -> (interface name, received bytes, sent bytes) per interface.

    Raises:
        ValueError: a line that is not ``name: counters``.
    """
    out: list[tuple[bytes, int, int]] = []
    for line in data.split(b"\n")[2:]:  # two header lines
        colon = line.rfind(b":")
        if colon <= 0:
            if line.strip():
                raise ValueError(f"not an interface line: {line[:80]!r}")
            continue
        fields = line[colon + 1 :].split()
        if len(fields) < 9:
            raise ValueError(f"interface line with {len(fields)} counters: {line[:80]!r}")
        out.append((line[:colon].strip(), int(fields[0]), int(fields[8])))
    return out


def parse_diskstats(data: bytes, name_of: Callable[[bytes], str | None]) -> dict[str, tuple[int, int]]:
    """``/proc/diskstats`` -> disk -> (read bytes, written bytes), for the devices
    ``name_of`` names (it returns None for a device to leave out).

    Raises:
        ValueError: a kept device's line is not counters.
    """
    out: dict[str, tuple[int, int]] = {}
    for line in data.split(b"\n"):
        head = line.split(None, 3)  # major, minor, name, the counters
        if len(head) < 4:
            if line.strip():
                raise ValueError(f"not a device line: {line[:80]!r}")
            continue
        name = name_of(head[2])
        if name is None:
            continue
        counters = head[3].split()
        if len(counters) == 11 or len(counters) >= 15:  # Linux 2.6+: 11 counters, 15 since 4.18, 17 since 5.5
            read, written = counters[2], counters[6]
        elif len(counters) == 4:  # a partition on Linux 2.6 before 2.6.25: reads, sectors read, writes, written
            read, written = counters[1], counters[3]
        else:
            raise ValueError(f"device line with {len(counters)} counters: {line[:80]!r}")
        out[name] = (int(read) * SECTOR_BYTES, int(written) * SECTOR_BYTES)
    return out
