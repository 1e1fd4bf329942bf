"""Reading a process's container, pod and Slurm job from this machine (the parsing is ``core.workload``).

:func:`read_workload` reads ``/proc/PID/cgroup`` and ``/proc/PID/status``
(bounded), once per process and start time (the job scanner caches it with
the command line). :class:`PodNames` names pods by UID from the kubelet's
log directories, ``/var/log/pods/<namespace>_<pod>_<uid>``, listed at most
every :data:`POD_LIST_S` seconds; the directory names are the kubelet's,
not the pod's processes'. Where the directory is absent, :attr:`PodNames.why`
says so and pods are known by UID only.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from gpulens.core.model import Workload
from gpulens.core.workload import MAX_CGROUP_BYTES, pod_log_dirs, workload_of

POD_LIST_S = 10.0
"""``/var/log/pods`` is listed again at most this often."""
MAX_POD_DIRS = 10_000
"""Entries of ``/var/log/pods`` read at most (a node runs at most a few hundred pods)."""
MAX_STATUS_BYTES = 8 * 1024


def _read(path: str, limit: int) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        return os.read(fd, limit)
    finally:
        os.close(fd)


def read_workload(base: str, environ: bytes | None) -> Workload | None:
    """The workload of the process at ``base`` (``/proc/PID``); None when it has nothing to say or is gone."""
    try:
        cgroup = _read(f"{base}/cgroup", MAX_CGROUP_BYTES)
        status = _read(f"{base}/status", MAX_STATUS_BYTES)
    except OSError:
        return None
    found = workload_of(cgroup, status, environ)
    return None if found == Workload() else found


class PodNames:
    """pod UID -> (namespace, pod name), from ``<root>/var/log/pods``; relisted at most every ``POD_LIST_S``."""

    def __init__(self, root: str = "/", clock: Callable[[], float] = time.monotonic) -> None:
        self.directory = os.path.join(root, "var/log/pods")
        self._clock = clock
        self._at = -POD_LIST_S
        self._names: dict[str, tuple[str, str]] = {}
        self.why: str | None = None
        """Why pods have no names here (no such directory), or None."""

    def names(self) -> dict[str, tuple[str, str]]:
        """The pods known now (listing again when the last listing is older than ``POD_LIST_S``)."""
        now = self._clock()
        if now - self._at < POD_LIST_S:
            return self._names
        self._at = now
        try:
            with os.scandir(self.directory) as it:
                entries = [e.name for _, e in zip(range(MAX_POD_DIRS), it, strict=False)]
        except OSError as err:
            self.why = (f"pod names unknown: {self.directory}: {err.strerror or err}: pods are shown by UID "
                        "(the kubelet's PodResources API names pods, but not by UID)")
            self._names = {}
            return self._names
        self.why = None
        self._names = pod_log_dirs(entries)
        return self._names
