"""The agent's GPU-memory flame graphs (issue 28): the ``gpumem`` request, and ``--gpumem``'s tracer.

With ``gpulens agent --gpumem`` the root agent probes the CUDA driver and
runtime files of this host (``ldconfig``'s, and any a job process maps from
elsewhere, e.g. a container's copy) for every process, from its start on:
a ``gpumem`` request is answered at once with the live bytes (or bytes
allocated) per Python stack of the processes it names. Without it, the
request traces those processes for ``duration_s`` and answers then. Either
way a viewer gets only the processes it may act for (root, or their owner:
:func:`~gpulens.agent.request_kinds.check_owner`), as traces and profiles.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from gpulens.agent.request_kinds import RequestConn, RequestError, check_owner, send_bytes
from gpulens.collectors.gpumem.libbpf import BpfError
from gpulens.collectors.gpumem.tracer import GpuMemTracer, folded, libraries, why_not
from gpulens.core.reasons import rendered
from gpulens.ipc.request_schema import GpuMemAnswer, GpuMemParams

log = logging.getLogger("gpulens.agent")

_LDCONFIG = re.compile(r"\s(lib(?:cuda|cudart)\.so[.0-9]*)\s.*=>\s*(\S+)$")


def host_libraries(lines: Iterable[str] | None = None) -> list[str]:
    """The CUDA driver and runtime files ``ldconfig -p`` knows on this host (each file once)."""
    if lines is None:
        try:
            out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=10, check=False)
            lines = out.stdout.splitlines()
        except (OSError, subprocess.SubprocessError):
            return []
    found: list[str] = []
    for line in lines:
        m = _LDCONFIG.search(line)
        if m is not None and m.group(2) not in found:
            found.append(m.group(2))
    return found


def gpumem_possible() -> bool:
    """Whether this agent can trace GPU memory at all (root, the BPF object, uprobes)."""
    return why_not() is None


class GpuMemService:
    """A system-wide tracer and the thread that reads its events (``--gpumem``)."""

    def __init__(self, paths: Iterable[str] = ()) -> None:
        why = why_not()
        if why is not None:
            raise BpfError(str(why))
        self.paths = list(dict.fromkeys(paths)) or host_libraries()
        self.since = time.time()
        self._seen_files: set[str] = set()
        # ldconfig names soname links (libcuda.so.1 -> libcuda.so.535.x, in root's own directories): the file
        # each points at is probed (the ELF reader refuses a link at the end of a name).
        self.tracer = GpuMemTracer(libraries=[os.path.realpath(p) for p in self.paths if self._first(p)])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpulens-gpumem", daemon=True)
        self._thread.start()

    def _first(self, path: str) -> bool:
        try:
            st = os.stat(path)
        except OSError:
            return False
        key = f"{st.st_dev}:{st.st_ino}"
        if key in self._seen_files:
            return False
        self._seen_files.add(key)
        return True

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.tracer.poll(200)
            except BpfError as err:
                log.warning("GPU memory tracing stopped: %s", err)
                return

    def cover(self, pid: int) -> None:
        """Make sure the libraries ``pid`` maps are probed (a container's own copy of libcuda)."""
        try:
            for path in libraries(pid).values():
                full = f"/proc/{pid}/root{path}"
                if self._first(full):
                    self.tracer.attach_library(full)
        except (OSError, BpfError) as err:
            log.info("pid %d: CUDA libraries not probed: %s", pid, err)
        self.tracer.watch(pid)

    def read(self, pids: Sequence[int]) -> Readout:
        """(live, total, why-not-Python per pid, live bytes seen per pid, events lost, since) of ``pids`` now."""
        for pid in pids:
            self.cover(pid)
        return _readout(self.tracer, pids, self.since)

    def live_pids(self) -> list[int]:
        """Processes holding GPU memory the probes saw them allocate."""
        return self.tracer.live_pids()

    def live_stacks(self, pid: int) -> dict[tuple[str, ...], int]:
        """Live bytes by stack of one process."""
        return self.tracer.snapshot([pid])[0]

    def close(self) -> None:
        """Stop reading and detach (idempotent)."""
        self._stop.set()
        self._thread.join(timeout=2.0)
        self.tracer.close()


Readout = tuple[dict[tuple[str, ...], int], dict[tuple[str, ...], int], dict[str, str | None], dict[int, int], int,
                float]
"""(live, total, why-not-Python per pid, live bytes seen per pid, events lost, since)."""


def _readout(tracer: GpuMemTracer, pids: Sequence[int], since: float) -> Readout:
    """What a tracer holds for ``pids`` now: the one reading for the service, the window and the TUI's own."""
    live, total = tracer.snapshot(list(pids))
    return (live, total, {str(p): rendered(tracer.python.get(p)) for p in pids},  # the reply: words
            {p: tracer.allocations.live_bytes(p) for p in pids}, tracer.lost, since)


class LocalGpuMemory:
    """The TUI's own GPU-memory flame graphs of this machine's processes, when it runs as root with no agent.

    One system-wide tracer (:class:`GpuMemService`), started at the first ask (the
    ``m`` key), kept while the TUI runs: each ask covers the processes named and
    reads their live bytes, so a graph refreshed every few seconds grows from the
    moment it was first asked for. The command line hands it to the local source
    (``sources.local.LocalSource``: sources never import the agent).
    """

    def __init__(self) -> None:
        self._service: GpuMemService | None = None
        self._lock = threading.Lock()

    def __call__(self, pids: list[int], gpu_used: Callable[[int], int | None]) -> tuple[str, dict[str, Any]]:
        """(folded live bytes, ``{"python", "lost", "since"}``) of ``pids``. Raises BpfError with why not."""
        with self._lock:
            if self._service is None:
                self._service = GpuMemService()
            service = self._service
        live, _total, python, tracked, lost, since = service.read(pids)
        text = folded(before_attach(live, pids, tracked, gpu_used).items())
        return text, {"python": python, "lost": lost, "since": since}

    def close(self) -> None:
        """Detach (idempotent)."""
        with self._lock:
            if self._service is not None:
                self._service.close()
                self._service = None


BEFORE = "<before attach: allocated before the probes attached (not attributed)>"


def before_attach(live: dict[tuple[str, ...], int], pids: Iterable[int], tracked: dict[int, int],
                  gpu_used: Callable[[int], int | None]) -> dict[tuple[str, ...], int]:
    """``live`` plus one frame per process for what NVML reports beyond what the probes saw,
    so that the live total adds up to what the GPU reports."""
    out = dict(live)
    for pid in pids:
        used = gpu_used(pid)
        if used is not None and used > tracked.get(pid, 0):
            out[(BEFORE,)] = out.get((BEFORE,), 0) + used - tracked.get(pid, 0)
    return out


def gpumem(conn: RequestConn, rid: int, p: GpuMemParams, service: GpuMemService | None, hostname: str,
           gpu_used: Callable[[int], int | None] = lambda pid: None) -> GpuMemAnswer:
    """Live bytes (``mode`` live) or bytes allocated (``total``) per Python stack of ``pids``, as one folded file.

    Live bytes also count, as one ``before attach`` frame, what NVML reports a process holds beyond
    what the probes saw it allocate (its CUDA context, what it allocated before they attached).
    """
    pids, mode = p.pids, p.mode
    check_owner(conn.principal, pids)
    if service is not None:
        live, total, python, tracked, lost, since = service.read(pids)
    else:
        why = why_not()
        if why is not None:
            raise RequestError(str(why))
        since = time.time()
        try:
            window = GpuMemTracer(pids)
        except BpfError as err:
            raise RequestError(str(err)) from None
        try:
            end = time.monotonic() + p.duration_s
            while time.monotonic() < end:
                window.poll(100)
            window.poll(0)
            live, total, python, tracked, lost, since = _readout(window, pids, since)
        finally:
            window.close()
    if mode == "live":
        live = before_attach(live, pids, tracked, gpu_used)
    text = folded((total if mode == "total" else live).items())
    name = f"gpumem-{hostname}-{int(time.time())}.bytes.folded"
    send_bytes(conn, rid, name, text.encode())
    return GpuMemAnswer(files=(name,), pids=pids, mode=mode, since=since, lost=lost, python=python)
