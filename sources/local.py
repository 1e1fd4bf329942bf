"""Sources: this machine in-process, several at once; the recorder (a replayed recording: sources/replay.py).

Each runs its work in one daemon thread and hands events to ``emit``.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from concurrent.futures import Future
from typing import IO, TYPE_CHECKING, Any, TypeVar

from gpulens.core.config import Config
from gpulens.core.errors import GpulensError
from gpulens.core.events import (
    Emit,
    HostSampler,
    RequestParams,
    RequestResult,
    RequestSource,
    SampleEvent,
    Source,
    SourceEvent,
    SourceStatusEvent,
)
from gpulens.core.logbook import Failure, call_guarded
from gpulens.core.model import HostSample, JobInfo
from gpulens.core.processes import gpu_memory, order
from gpulens.core.units import size
from gpulens.ipc.recording import (
    EventEncoder,
    encode_event,
    header,
)
from gpulens.ipc.recording_out import RecordMode, open_for_recording
from gpulens.ipc.serialize import to_dict
from gpulens.sources.replay import Scrubbable

if TYPE_CHECKING:
    from gpulens.sources.profiling import LocalProfiler

ProcessListing = Callable[[Mapping[int, Mapping[str, int]]], tuple[tuple[JobInfo, ...], int]]
"""GPU memory per pid -> (every process of this machine, how many there were)."""
GpuMemReader = Callable[[list[int], Callable[[int], int | None]], tuple[str, dict[str, Any]]]
"""(pids, GPU memory NVML reports per pid) -> (folded live bytes by stack, a note): ``agent.gpumem.LocalGpuMemory``."""
log = logging.getLogger("gpulens.sources.local")
T = TypeVar("T")
EXPECTED = (OSError, GpulensError, re.error)
"""What this machine's readers raise (``collectors.sampler.Sampler``: a bad job pattern, /proc unreadable, a sample
out of bounds; the process lister and the GPU-memory reader: /proc, eBPF refused): the screen shows the message.
Anything else is a bug: it is shown too, then goes on to ``threading.excepthook`` with its traceback."""


def _escaping() -> str:
    """The exception leaving the ``finally`` block this is called from, as the screen shows it."""
    err = sys.exc_info()[1]
    return "stopped" if err is None else f"{type(err).__name__}: {err}"


def on_thread(name: str, work: Callable[[], T]) -> Future[T]:
    """``work()`` on a daemon thread of its own (it may block on /proc or eBPF; it never holds up exit),
    into a future that always resolves: with the result, or with the error."""
    fut: Future[T] = Future()

    def run() -> None:
        try:
            fut.set_result(work())
        except EXPECTED as err:  # the screen says why (eBPF refused, a process gone, /proc unreadable…)
            fut.set_exception(err)
        finally:
            if not fut.done():  # a bug: the caller is told, the excepthook gets the traceback
                fut.set_exception(RuntimeError(f"{name} failed: {_escaping()}"))

    threading.Thread(target=run, name=name, daemon=True).start()
    return fut


class LocalSource:
    """This machine, sampled in-process every ``cfg.interval_s`` seconds.

    The next sample is scheduled when the last one finishes, so samples
    never overlap however slow a collector is.
    """

    def __init__(self, cfg: Config, sampler_factory: Callable[[], HostSampler],
                 lister: ProcessListing | None = None, gpumem: GpuMemReader | None = None,
                 profiler: LocalProfiler | None = None) -> None:
        """``sampler_factory`` builds the sampler in the sampling thread (the command line
        passes ``collectors.sampler.Sampler``: sources never import collectors); ``lister``
        lists this machine's processes (``collectors.processes.ProcessLister.listing``; None: no table);
        ``gpumem`` reads their GPU memory by stack (``agent.gpumem.LocalGpuMemory``, given when the TUI
        runs as root and eBPF can load; None: ask an agent); ``profiler`` runs py-spy on this machine's
        processes (``agent.pyspy``; None: the TUI says py-spy is not available here)."""
        self._cfg = cfg
        self._factory = sampler_factory
        self._lister = lister
        self._gpumem = gpumem
        self._profiler = profiler
        self._latest: HostSample | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def name(self) -> str:
        """``local``."""
        return "local"

    @property
    def simulated(self) -> bool:
        """Never: this is real data."""
        return False

    @property
    def profiler(self) -> LocalProfiler | None:
        """py-spy on this machine (``sources.profiling.local_profiler`` finds it); None: not given."""
        return self._profiler

    def _make_sampler(self) -> HostSampler:
        return self._factory()

    def start(self, emit: Emit) -> None:
        """Start the sampling thread; returns at once."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, args=(emit,), name="gpulens-local",
                                        daemon=True)
        self._thread.start()

    def _run(self, emit: Emit) -> None:
        # Whatever a sampler raises is said in the header and logged (core.logbook.call_guarded): one bad
        # tick, or a bug in one, never ends sampling.
        sampler = call_guarded(log, "local sampler start", self._make_sampler)
        if isinstance(sampler, Failure):
            emit(SourceStatusEvent(message=f"local sampler failed: {sampler.message}", ok=False, time=time.time()))
            return
        failing = False
        try:
            while not self._stop.is_set():
                began = time.monotonic()
                sample = call_guarded(log, "local sample", sampler.sample)
                if isinstance(sample, Failure):
                    failing = True
                    emit(SourceStatusEvent(message=f"sampling failed: {sample.message}", ok=False, time=time.time()))
                else:
                    self._latest = sample
                    emit(SampleEvent(sample))
                    if failing:
                        emit(SourceStatusEvent(message="local sampling resumed", ok=True, time=time.time()))
                    failing = False
                spent = time.monotonic() - began
                self._stop.wait(max(0.0, self._cfg.interval_s - spent))
        finally:
            close = getattr(sampler, "close", None)
            if close is not None:
                close()

    def gpu_memory_stacks(self, pids: list[int]) -> Future[tuple[str, dict[str, Any]]] | None:
        """Folded live GPU memory by stack of this machine's ``pids`` and a note (None: this source cannot:
        not root, or no eBPF), read on a thread of its own."""
        reader, latest = self._gpumem, self._latest
        if reader is None:
            return None
        used = {pid: sum(per.values()) for pid, per in gpu_memory(latest).items()}  # NVML's, all GPUs
        return on_thread("gpulens-gpumem", lambda: reader(pids, used.get))

    def process_table(self, host: str, limit: int, pids: Collection[int] | None) -> Future[dict[str, Any]] | None:
        """This machine's process table, as an agent's ``processes`` request answers it (None: ``host``
        is not this machine's sampled host, or there is no lister); listed on a thread of its own."""
        latest, lister = self._latest, self._lister
        if lister is None or latest is None or latest.host != host:
            return None

        def run() -> dict[str, Any]:
            rows, total = lister(gpu_memory(latest))
            chosen = order(r for r in rows if pids is None or r.pid in pids)[:limit]
            return {"processes": [to_dict(r) for r in chosen], "total": total, "hidden": 0}

        return on_thread("gpulens-processes", run)

    def stop(self) -> None:
        """Stop sampling and wait (up to 2 s) for the thread; idempotent."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
            self._thread = None


class MultiSource:
    """Several sources shown together (``--replay A --prometheus URL``, ...)."""

    def __init__(self, sources: Sequence[Source]) -> None:
        self.sources = list(sources)

    @property
    def name(self) -> str:
        """The parts' names joined with ``+``."""
        return " + ".join(s.name for s in self.sources)

    @property
    def simulated(self) -> bool:
        """True if any part is simulated."""
        return any(s.simulated for s in self.sources)

    def expected_hosts(self) -> list[str]:
        """Every part's expected hosts (``host:port`` or names), for those that know them.

        Parts without ``expected_hosts`` (local, replay, demo) add none.
        """
        out: list[str] = []
        for s in self.sources:
            fn = getattr(s, "expected_hosts", None)
            if callable(fn):
                out.extend(h for h in fn() if h not in out)
        return out

    def request(self, host: str, params: RequestParams, timeout_s: float) -> Future[RequestResult]:
        """Send a request (profile, trace, history) to ``host`` through the part that serves it.

        Parts that are not a :class:`RequestSource` are skipped; a part that fails at once with
        "unknown host" hands over to the next. The future fails with
        RequestFailed when no part serves ``host``.
        """
        last: Future[RequestResult] | None = None
        for s in self.sources:
            if not isinstance(s, RequestSource):
                continue
            last = s.request(host, params, timeout_s)
            if not (last.done() and last.exception() is not None and "unknown host" in str(last.exception())):
                return last
        if last is not None:
            return last
        from gpulens.ipc.errors import RequestFailed

        fut: Future[RequestResult] = Future()
        fut.set_exception(RequestFailed(f"no source can send requests to {host!r} (connect to its agent)"))
        return fut

    def start(self, emit: Emit) -> None:
        """Start every part with the same ``emit``."""
        for s in self.sources:
            s.start(emit)

    def stop(self) -> None:
        """Stop every part (each is idempotent)."""
        for s in self.sources:
            s.stop()


def collects_here(source: Source) -> bool:
    """Whether this machine's own collector, in this process, is (part of) ``source``.

    A stream or Prometheus host that names itself like this machine is no
    proof that it is this machine: an impostor agent can (issue 27 item 6).
    """
    parts = source.sources if isinstance(source, MultiSource) else [source]
    return any(isinstance(s, LocalSource) for s in parts)


def sample_step(source: object, interval_s: float) -> float:
    """The seconds between two samples of a host: ``interval_s``, or the longest step a part samples at
    (a Prometheus source queries every ``step_s``, 5 s by default): the store's columns follow it, so a
    heatmap of 4 s columns over a 5 s scrape has no empty fifth column (issue 32 item 16)."""
    steps = [s for p in parts(source) if isinstance(s := getattr(p, "step_s", None), (int, float)) and s > 0]
    return max([interval_s, *steps])


def parts(source: object) -> Iterator[object]:
    """``source`` and every source it wraps (a recorder's ``inner``) or mixes (``sources``), depth first."""
    yield source
    inner = getattr(source, "inner", None)
    if inner is not None:
        yield from parts(inner)
    for part in getattr(source, "sources", ()):
        yield from parts(part)


def offered(source: object, capability: str) -> Iterator[Any]:
    """The ``capability`` attribute of each part of ``source`` that has one (not None), in :func:`parts` order:
    how screens find what a source can do (``process_table``, ``gpu_memory_stacks``, ``profiler``)."""
    for part in parts(source):
        own = getattr(part, capability, None)
        if own is not None:
            yield own


class Recorder:
    """Writes every event to a recording file (``--record FILE``); thread-safe.

    ``mode``: ``new`` refuses an existing name, ``append`` continues a recording
    (``--append``, in its own format version), ``overwrite`` replaces one of ours
    (``--force``); the file is never reached through a link and never a FIFO
    (``gpulens.ipc.recording_out``). Each event is written as it comes
    (version 2: compressed, in blocks) and the file is flushed at least every
    second while events come, and at close: a crash loses at most the last
    second's events (and a record cut off, which ``--append`` cuts away).

    Raises:
        ConfigError: the file cannot be created or used, in one line.
    """

    def __init__(self, path: str, source_name: str = "", simulated: bool = False, *,
                 mode: RecordMode = "new") -> None:
        self.path = path
        self._lock = threading.Lock()
        self.count = 0
        opened = open_for_recording(path, mode, simulated=simulated)
        self.bytes = opened.size
        """How much has been written (the header shows it beside REC); an appended file counts what it held."""
        self.continued = opened.continued
        """Whether this continues an existing recording (``--append``)."""
        self.cut = opened.cut
        """Bytes of a partial last record cut away before appending (a crash mid-write)."""
        self.version = opened.version
        """The format version written: ``VERSION``, or a continued file's own."""
        self._encoder = EventEncoder(opened.version)
        self._fh: IO[bytes] | None = os.fdopen(opened.fd, "wb")
        if not opened.continued:
            self.bytes += self._fh.write(header(source_name, simulated, time.time(), opened.version))
        self._last_flush = time.monotonic()

    def write(self, event: SourceEvent) -> None:
        """Append one event (flushed at least every second)."""
        record = encode_event(event)  # the costly part, outside the lock
        with self._lock:
            if self._fh is None:
                return
            self.bytes += self._fh.write(self._encoder.encode(event, record))
            self.count += 1
            if time.monotonic() - self._last_flush > 1.0:
                self._fh.flush()
                self._last_flush = time.monotonic()

    def wrap(self, emit: Emit) -> Emit:
        """An ``emit`` that records each event, then passes it on."""

        def recording_emit(event: SourceEvent) -> None:
            self.write(event)
            emit(event)

        return recording_emit

    def close(self) -> None:
        """Flush and close the file; idempotent."""
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None


def replays(source: object) -> bool:
    """Whether ``source`` is, or wraps, a replayed recording (``--replay F --record G``, a mix of sources):
    its pids are from then, and may name other processes now."""
    return any(isinstance(p, Scrubbable) for p in parts(source))


class RecordingSource:
    """Wraps a source so that every event it emits is also written by a :class:`Recorder`."""

    def __init__(self, inner: Source, recorder: Recorder) -> None:
        self.inner = inner
        self.recorder = recorder

    @property
    def name(self) -> str:
        """The inner source's name and how much is recorded: ``demo · REC 12.3MiB`` (short: a header at
        80 columns keeps its window and clock)."""
        return f"{self.inner.name} · REC {size(self.recorder.bytes)}"

    @property
    def simulated(self) -> bool:
        """The inner source's flag."""
        return self.inner.simulated

    def request(self, host: str, params: RequestParams, timeout_s: float) -> Future[RequestResult]:
        """The inner source's ``request`` (profile, trace, history); RequestFailed if it has none."""
        if isinstance(self.inner, RequestSource):
            return self.inner.request(host, params, timeout_s)
        return MultiSource([self.inner]).request(host, params, timeout_s)

    def start(self, emit: Emit) -> None:
        """Start the inner source with a recording ``emit``."""
        self.inner.start(self.recorder.wrap(emit))

    def stop(self) -> None:
        """Stop the inner source, then close the file."""
        self.inner.stop()
        self.recorder.close()
