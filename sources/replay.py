"""A replayed recording (:class:`ReplaySource`) and its index, for a replay you can scrub.

A source that can be scrubbed offers an :attr:`~Scrubbable.index` (the TUI's
``tui/replay.py`` drives it: play, pause, seek, speed); screens ask for that
capability, never for the concrete class.

:class:`RecordingIndex` scans a recording once (in a thread: :meth:`build`)
and keeps, per record, its time and place (28 bytes a record: the offset of
its block, its place in the block and where it ends; the samples themselves
stay in the file and are read back with ``pread`` when the position reaches
them: version 1, the record alone; version 2, its block up to it, decompressed
once for all the records a read wants from it and kept for the next read of
the same thread, two blocks at most), plus when each host and job appears, so a job
that ran most of the recording is reachable from any position
(:meth:`find_job`). Every record is validated as it is indexed (the one
sample decoder), so a fault stops the index there and says where.

Memory while indexing is the index itself plus one record: records are framed
without building them and decoded from their bytes with only the fields a
record has (:func:`~gpulens.ipc.recording.decode_record_bytes`), so a large
field a newer gpulens added is skipped, never built: a 133 MiB recording whose
samples carry a 15 MiB unknown field is indexed in 83 MiB peak RSS (2174 MiB
when records were decoded whole).
"""

from __future__ import annotations

import bisect
import os
import threading
import time
from array import array
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import msgpack

from gpulens.core.errors import ConfigError, ConfigProblem, RecordingError, RecordingProblem
from gpulens.core.events import Emit, HostStatusEvent, SampleEvent, SourceEvent, SourceStatusEvent
from gpulens.core.limits import InputProblem
from gpulens.ipc.recording import (
    Place,
    decode_header_bytes,
    decode_record_bytes,
    decode_spans,
    decode_stream,
    open_recording,
    read_recording,
)
from gpulens.ipc.recording_blocks import MAX_RECORD_BYTES, BlockReader, read_block


@runtime_checkable
class Scrubbable(Protocol):
    """A source whose events are a recording the viewer moves through (position, seek, speed)."""

    path: str
    """The recording's file."""

    @property
    def index(self) -> RecordingIndex:
        """Where each record is and what ran when."""
        ...

    def build_index(self) -> RecordingIndex:
        """Start indexing in a thread (once); ``index.done`` is set when finished."""
        ...


CACHED_BLOCKS = 2
"""Version 2: the decompressed blocks an index keeps for the next read, per thread (playback on the app's
thread and a seek's rebuild in a worker each keep theirs)."""


@dataclass(frozen=True, slots=True)
class Span:
    """When something appears in a recording: first and last time (unix s)."""

    first: float
    last: float

    def clamp(self, t: float) -> float:
        """``t`` moved into the span."""
        return min(max(t, self.first), self.last)


@dataclass(frozen=True, slots=True)
class JobSpan:
    """A job of the recording: its key, user, pids and span."""

    key: str
    user: str
    pids: frozenset[int]
    span: Span


def _event_time(e: SourceEvent) -> float:
    if isinstance(e, SampleEvent):
        return e.sample.time
    if isinstance(e, (HostStatusEvent, SourceStatusEvent)):
        return e.time
    return float("nan")  # pragma: no cover - every event kind has a time


def read_header(path: str) -> dict[str, object]:
    """The recording's header, read and checked before the UI opens.

    Raises:
        RecordingError: not a regular file, unreadable, empty, not a gpulens recording, or one with
            nothing after its header (the replay would wait for samples forever).
    """
    fh = open_recording(path)
    with fh:
        framer = msgpack.Unpacker(max_buffer_size=MAX_RECORD_BYTES)  # skip() only: nothing is built
        held = bytearray()
        while True:
            chunk = fh.read(1 << 16)
            if not chunk:
                raise RecordingError("not a gpulens recording (the file ends inside its first record)" if held
                                     else "empty file: not a gpulens recording",
                                     problem=RecordingProblem.NOT_A_RECORDING if held else RecordingProblem.EMPTY)
            held += chunk
            try:
                framer.feed(chunk)
                framer.skip()
            except msgpack.OutOfData:
                continue
            except msgpack.BufferFull:
                raise RecordingError("not a gpulens recording (no header)",
                                     problem=RecordingProblem.NOT_A_RECORDING) from None
            except (ValueError, msgpack.UnpackException, TypeError) as err:
                raise RecordingError(f"not a gpulens recording ({err})",
                                     problem=RecordingProblem.NOT_A_RECORDING) from None
            head = decode_header_bytes(bytes(memoryview(held)[: framer.tell()]))
            if len(held) == framer.tell() and not fh.read(1):
                raise RecordingError("a gpulens recording with no samples (only its header): nothing to replay",
                                     problem=RecordingProblem.NO_SAMPLES)
            return head


class RecordingIndex:
    """Times and places of every record of one recording, sorted by time; built once, read by the app."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._times = array("d")
        self._blocks = array("q")
        self._ordinals = array("i")
        self._ends = array("q")
        self.version = 0
        """The recording's format version (0 until :meth:`build` read its header)."""
        self.hosts: dict[str, Span] = {}
        """Every host that appears, with its span."""
        self.jobs: dict[str, JobSpan] = {}
        """Every job that appears (by job key), with its span."""
        self.error: str | None = None
        """Why the index stopped early (the records before the fault are kept)."""
        self.problem: RecordingProblem | None = None
        """The reason of :attr:`error` as a value (None while there is none)."""
        self.done = threading.Event()
        """Set once :meth:`build` finished (whole or at a fault)."""
        self._fd: int | None = None
        self._lock = threading.Lock()
        self._local = threading.local()  # .blocks: this thread's kept blocks, of .generation
        self._generation = 0

    # ---- building -----------------------------------------------------------
    def build(self) -> None:
        """Scan the file (call in a thread); ``done`` is set at the end, ``error`` says why it stopped (``problem``:
        its reason)."""
        places: list[tuple[float, int, int, int]] = []
        jobs: dict[str, tuple[str, set[int], float, float]] = {}
        try:
            fh = open_recording(self.path)
            with fh:
                for event, place in self._records(fh):
                    t = _event_time(event)
                    if t != t:
                        continue
                    places.append((t, *place))
                    if isinstance(event, SampleEvent):
                        self._note(event, jobs)
        except OSError as err:
            self.error, self.problem = f"{self.path}: cannot read: {err.strerror}", RecordingProblem.UNREADABLE
        except RecordingError as err:
            self.error, self.problem = f"{self.path}: {err}", err.problem
        places.sort()
        with self._lock:
            self._times = array("d", (p[0] for p in places))
            self._blocks = array("q", (p[1] for p in places))
            self._ordinals = array("i", (p[2] for p in places))
            self._ends = array("q", (p[3] for p in places))
            self.jobs = {k: JobSpan(k, user, frozenset(pids), Span(a, b)) for k, (user, pids, a, b) in jobs.items()}
        self.done.set()

    def _note(self, event: SampleEvent, jobs: dict[str, tuple[str, set[int], float, float]]) -> None:
        s = event.sample
        span = self.hosts.get(s.host)
        self.hosts[s.host] = Span(s.time, s.time) if span is None else Span(min(span.first, s.time),
                                                                            max(span.last, s.time))
        for j in s.jobs:
            key = j.job_key or f"{s.host}:{j.pid}"
            got = jobs.get(key)
            if got is None:
                jobs[key] = (j.user, {j.pid}, s.time, s.time)
            else:
                if len(got[1]) < 4096:
                    got[1].add(j.pid)
                jobs[key] = (got[0], got[1], min(got[2], s.time), max(got[3], s.time))

    def _records(self, fh: object) -> Iterator[tuple[SourceEvent, Place]]:
        chunks = iter(lambda: fh.read(1 << 16), b"")  # type: ignore[attr-defined]
        for item, place in decode_spans(chunks):
            if isinstance(item, dict):  # the header is checked, not indexed
                self.version = int(item["version"])
            else:
                yield item, place

    # ---- reading ------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._times)

    @property
    def start(self) -> float:
        """The first record's time (NaN while empty)."""
        return self._times[0] if self._times else float("nan")

    @property
    def end(self) -> float:
        """The last record's time (NaN while empty)."""
        return self._times[-1] if self._times else float("nan")

    def count_between(self, after: float, upto: float) -> int:
        """How many records lie in ``(after, upto]``."""
        return bisect.bisect_right(self._times, upto) - bisect.bisect_right(self._times, after)

    def events_between(self, after: float, upto: float) -> list[SourceEvent]:
        """The events with ``after < time <= upto``, in time order, read back from the file.

        Version 2: each block they lie in is read and decompressed once, up to the last of them
        (continuing a block kept from the last read where it can).

        Raises:
            RecordingError: the file changed under us or cannot be read any more.
        """
        with self._lock:
            lo = bisect.bisect_right(self._times, after)
            hi = bisect.bisect_right(self._times, upto)
            spots = [(self._blocks[i], self._ordinals[i], self._ends[i]) for i in range(lo, hi)]
            fd = self._open()
        if self.version < 2:
            return [self._decode(self._pread(fd, offset, end - offset), f"byte {offset}")
                    for offset, _, end in spots]
        upto_end: dict[int, int] = {}
        for block, _, end in spots:
            upto_end[block] = max(end, upto_end.get(block, end))
        records = {block: self._block(fd, block, end) for block, end in upto_end.items()}
        out: list[SourceEvent] = []
        for block, n, _ in spots:
            if n >= len(records[block]):
                raise RecordingError(f"{self.path}: changed while replaying (the block at byte {block} holds "
                                     f"{len(records[block])} records, not {n + 1})", problem=RecordingProblem.CHANGED)
            out.append(self._decode(records[block][n], f"record {n} of the block at byte {block}"))
        return out

    def _pread(self, fd: int, offset: int, size: int) -> bytes:
        try:
            data = os.pread(fd, size, offset)
        except OSError as err:
            raise RecordingError(f"{self.path}: cannot read: {err.strerror}", problem=RecordingProblem.UNREADABLE) from err
        if len(data) != size:
            raise RecordingError(f"{self.path}: changed while replaying (it is shorter than it was)",
                                 problem=RecordingProblem.CHANGED)
        return data

    def _decode(self, data: bytes, where: str) -> SourceEvent:
        try:
            return decode_record_bytes(data, where)
        except RecordingError as err:
            raise RecordingError(f"{self.path}: changed while replaying ({err})",
                                 problem=RecordingProblem.CHANGED) from err

    def _block(self, fd: int, start: int, end: int) -> list[bytes]:
        """The records of the block at ``start``, at least up to the one ending at ``end`` (version 2)."""
        local = self._local
        if getattr(local, "generation", None) != self._generation:
            local.generation, local.blocks = self._generation, OrderedDict()
        kept: OrderedDict[int, BlockReader] = local.blocks
        reader = kept.pop(start, None)
        if reader is None:
            reader = BlockReader()
        if reader.end < end:  # read (on): a new reader's end is -1
            at = start if reader.start < 0 else reader.end
            data = self._pread(fd, at, end - at)
            try:
                read_block(reader, data, at, f"the block at byte {start}")
            except RecordingError as err:
                raise RecordingError(f"{self.path}: changed while replaying ({err})",
                                     problem=RecordingProblem.CHANGED) from err
        kept[start] = reader
        while len(kept) > CACHED_BLOCKS:
            kept.popitem(last=False)
        return reader.records

    def _open(self) -> int:
        if self._fd is None:
            fh = open_recording(self.path)
            self._fd = os.dup(fh.fileno())
            fh.close()
        return self._fd

    def close(self) -> None:
        """Close the file and drop the blocks kept (every thread's); idempotent."""
        with self._lock:
            self._generation += 1
            self._local.blocks = None
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def find_job(self, text: str) -> JobSpan | None:
        """A job of the recording by key or by the pid of any of its processes."""
        job = self.jobs.get(text)
        if job is not None or not text.isdigit():
            return job
        pid = int(text)
        return next((j for j in self.jobs.values() if pid in j.pids), None)

    def find_host(self, text: str) -> tuple[str, Span] | None:
        """A host of the recording by name, else the first whose name contains ``text``."""
        if text in self.hosts:
            return text, self.hosts[text]
        name = next((h for h in sorted(self.hosts) if text in h), None)
        return (name, self.hosts[name]) if name is not None else None


_REFUSED: dict[InputProblem | None, ConfigProblem] = {
    InputProblem.CANNOT_OPEN: ConfigProblem.UNREADABLE, InputProblem.NOT_REGULAR: ConfigProblem.NOT_REGULAR,
}
"""The input guard's reasons for not opening a recording, as --replay's; read but not one: NOT_A_RECORDING."""


def _refused(path: str, problem: ConfigProblem, detail: str) -> ConfigError:
    """``--replay PATH: DETAIL``, with the reason as a value."""
    return ConfigError(where=f"--replay {path}", expected="a gpulens recording file", got=path, problem=problem,
                       detail=detail)


class ReplaySource:
    """Replays a recording made with ``--record``.

    The TUI scrubs it through :attr:`index` (play, pause, seek, speed: see
    ``tui/replay.py``) and never calls :meth:`start`. Other readers call
    :meth:`start`: ``speed=0`` (default) hands every event over at once, as
    backfill; ``speed=1`` replays in real time. A corrupt or truncated file
    shows what was read plus an error in the header.

    Raises:
        ConfigError: the path is missing, a directory, not a regular file, or
            not a gpulens recording (at construction, before the UI opens).
    """

    def __init__(self, path: str, speed: float = 0.0) -> None:
        if not os.path.lexists(path):
            raise _refused(path, ConfigProblem.UNREADABLE, "no such file")
        if os.path.isdir(path):
            found = sorted(n for n in os.listdir(path) if n.endswith(".gpulens"))[:3] if os.access(path, os.R_OK) else []
            hint = f" (in it: {', '.join(found)})" if found else ""
            raise _refused(path, ConfigProblem.NOT_REGULAR, f"is a directory; give one recording file{hint}")
        if not os.path.isfile(path):
            raise _refused(path, ConfigProblem.NOT_REGULAR, "not a regular file (a FIFO or device)")
        try:
            head = read_header(path)
        except RecordingError as err:
            raise _refused(path, _REFUSED.get(err.refused, ConfigProblem.NOT_A_RECORDING), str(err)) from None
        self.path = path
        self.speed = speed
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._simulated = bool(head.get("simulated", False))
        self.index = RecordingIndex(path)
        """Where each record is and what ran when, built by :meth:`build_index` (in a thread)."""
        self._indexing: threading.Thread | None = None

    def build_index(self) -> RecordingIndex:
        """Start indexing the file in a thread (once); ``index.done`` is set when it is finished."""
        if self._indexing is None:
            self._indexing = threading.Thread(target=self.index.build, name="gpulens-replay-index", daemon=True)
            self._indexing.start()
        return self.index

    @property
    def name(self) -> str:
        """``replay FILE``."""
        return f"replay {os.path.basename(self.path)}"

    @property
    def simulated(self) -> bool:
        """True when the recording was made from the demo fleet."""
        return self._simulated

    def load(self) -> tuple[list[SourceEvent], str | None]:
        """Every event in the file and an error message (None when the file is whole)."""
        try:
            head, events = read_recording(self.path)
        except RecordingError as err:
            return list(err.events), str(err)
        self._simulated = bool(head.get("simulated", False))
        return events, None

    def start(self, emit: Emit) -> None:
        """Start replaying in a thread; returns at once."""
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, args=(emit,), name="gpulens-replay",
                                        daemon=True)
        self._thread.start()

    def _run(self, emit: Emit) -> None:
        # Streamed: a recording of any length replays in bounded memory.
        n = 0
        last: float | None = None
        error: str | None = None
        try:
            with open_recording(self.path) as fh:
                for item in decode_stream(iter(lambda: fh.read(1 << 16), b"")):
                    if self._stop.is_set():
                        return
                    if isinstance(item, dict):
                        self._simulated = bool(item.get("simulated", False))
                        continue
                    if isinstance(item, SampleEvent):
                        n += 1
                        if self.speed > 0:
                            if last is not None and item.sample.time > last:
                                self._stop.wait((item.sample.time - last) / self.speed)
                            last = item.sample.time
                        else:
                            item = SampleEvent(item.sample, backfill=True)
                    emit(item)
        except OSError as err:
            error = f"{self.path}: cannot read: {err.strerror}"
        except RecordingError as err:
            error = f"{self.path}: {err}"
        if error is not None:
            emit(SourceStatusEvent(message=f"{error} (showing the {n} samples read)", ok=False,
                                   time=time.time()))
        else:
            emit(SourceStatusEvent(message=f"replayed {n} samples", ok=True, time=time.time()))

    def stop(self) -> None:
        """Stop replaying; idempotent."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
            self._thread = None
        self.index.close()
