"""A recording's index, for a replay you can scrub: where each record is, and what ran when.

:class:`RecordingIndex` scans a recording once (in a thread: :meth:`build`)
and keeps, per record, its time and byte offset (16 bytes a record; the
samples themselves stay in the file and are read back with ``pread`` when
the position reaches them), plus when each host and job appears, so a job
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
from array import array
from collections.abc import Iterator
from dataclasses import dataclass

import msgpack

from gpulens.core.errors import RecordingError
from gpulens.core.events import HostStatusEvent, SampleEvent, SourceEvent, SourceStatusEvent
from gpulens.ipc.recording import (
    MAX_RECORD_BYTES,
    decode_header_bytes,
    decode_record_bytes,
    decode_spans,
    open_recording,
)


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
                                     else "empty file: not a gpulens recording")
            held += chunk
            try:
                framer.feed(chunk)
                framer.skip()
            except msgpack.OutOfData:
                continue
            except msgpack.BufferFull:
                raise RecordingError("not a gpulens recording (no header)") from None
            except (ValueError, msgpack.UnpackException, TypeError) as err:
                raise RecordingError(f"not a gpulens recording ({err})") from None
            head = decode_header_bytes(bytes(memoryview(held)[: framer.tell()]))
            if len(held) == framer.tell() and not fh.read(1):
                raise RecordingError("a gpulens recording with no samples (only its header): nothing to replay")
            return head


class RecordingIndex:
    """Times and offsets of every record of one recording, sorted by time; built once, read by the app."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._times = array("d")
        self._offsets = array("q")
        self._sizes = array("l")
        self.hosts: dict[str, Span] = {}
        """Every host that appears, with its span."""
        self.jobs: dict[str, JobSpan] = {}
        """Every job that appears (by job key), with its span."""
        self.error: str | None = None
        """Why the index stopped early (the records before the fault are kept)."""
        self.done = threading.Event()
        """Set once :meth:`build` finished (whole or at a fault)."""
        self._fd: int | None = None
        self._lock = threading.Lock()

    # ---- building -----------------------------------------------------------
    def build(self) -> None:
        """Scan the file (call in a thread); ``done`` is set at the end, ``error`` says why it stopped."""
        times: list[tuple[float, int, int]] = []
        jobs: dict[str, tuple[str, set[int], float, float]] = {}
        try:
            fh = open_recording(self.path)
            with fh:
                for event, offset, size in self._records(fh):
                    t = _event_time(event)
                    if t != t:
                        continue
                    times.append((t, offset, size))
                    if isinstance(event, SampleEvent):
                        self._note(event, jobs)
        except OSError as err:
            self.error = f"{self.path}: cannot read: {err.strerror}"
        except RecordingError as err:
            self.error = f"{self.path}: {err}"
        times.sort()
        with self._lock:
            self._times = array("d", (t for t, _, _ in times))
            self._offsets = array("q", (o for _, o, _ in times))
            self._sizes = array("l", (s for _, _, s in times))
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

    @staticmethod
    def _records(fh: object) -> Iterator[tuple[SourceEvent, int, int]]:
        chunks = iter(lambda: fh.read(1 << 16), b"")  # type: ignore[attr-defined]
        for item, start, length in decode_spans(chunks):
            if not isinstance(item, dict):  # the header is checked, not indexed
                yield item, start, length

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

        Raises:
            RecordingError: the file changed under us or cannot be read any more.
        """
        with self._lock:
            lo = bisect.bisect_right(self._times, after)
            hi = bisect.bisect_right(self._times, upto)
            spots = [(self._offsets[i], self._sizes[i]) for i in range(lo, hi)]
            fd = self._open()
        out: list[SourceEvent] = []
        for offset, size in spots:
            try:
                data = os.pread(fd, size, offset)
            except OSError as err:
                raise RecordingError(f"{self.path}: cannot read: {err.strerror}") from err
            if len(data) != size:
                raise RecordingError(f"{self.path}: changed while replaying (it is shorter than it was)")
            try:
                out.append(decode_record_bytes(data, f"byte {offset}"))
            except RecordingError as err:
                raise RecordingError(f"{self.path}: changed while replaying ({err})") from err
        return out

    def _open(self) -> int:
        if self._fd is None:
            fh = open_recording(self.path)
            self._fd = os.dup(fh.fileno())
            fh.close()
        return self._fd

    def close(self) -> None:
        """Close the file; idempotent."""
        with self._lock:
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
