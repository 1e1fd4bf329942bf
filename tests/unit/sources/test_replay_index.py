"""The recording index behind a scrubbable replay: offsets read back exactly, spans, faults kept."""

from __future__ import annotations

from pathlib import Path

import msgpack

from gpulens.core.errors import RecordingProblem
from gpulens.core.events import SampleEvent
from gpulens.ipc.recording import read_recording
from gpulens.ipc.recording_blocks import block_start, frame
from gpulens.sources.replay import RecordingIndex
from tests.unit.tui.test_replay import JOB_FROM, JOB_TO, SECONDS, T0, record


def built(path: Path) -> RecordingIndex:
    index = RecordingIndex(str(path))
    index.build()
    assert index.done.is_set()
    return index


def test_events_between_read_back_what_the_file_holds(tmp_path: Path) -> None:
    path = record(tmp_path / "r.gpulens")
    _, events = read_recording(str(path))  # the sequential reader, independent of the index
    index = built(path)
    assert index.error is None and len(index) == len(events)
    assert index.start == T0 and index.end == T0 + SECONDS
    a, b = T0 + 40, T0 + 60
    want = sorted((e for e in events if isinstance(e, SampleEvent) and a < e.sample.time <= b),
                  key=lambda e: (e.sample.time, e.sample.host))
    got = index.events_between(a, b)
    assert sorted(got, key=lambda e: (e.sample.time, e.sample.host)) == want  # type: ignore[union-attr]
    assert index.count_between(a, b) == len(want)
    index.close()


def test_spans_of_jobs_and_hosts_and_lookup_by_pid(tmp_path: Path) -> None:
    index = built(record(tmp_path / "r.gpulens"))
    job = index.find_job("4711")
    assert job is not None and job.user == "alice" and 4711 in job.pids
    assert (job.span.first, job.span.last) == (T0 + JOB_FROM, T0 + JOB_TO)
    assert index.find_host("node-b") == ("node-b", index.hosts["node-b"])
    assert index.hosts["node-b"].first == T0 + 50
    assert index.find_job("999999") is None and index.find_host("nope") is None


def test_a_truncated_file_keeps_the_records_before_the_fault(tmp_path: Path) -> None:
    path = record(tmp_path / "r.gpulens")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 40])
    index = built(path)
    assert index.error is not None and index.problem is RecordingProblem.TRUNCATED
    _, complete = read_recording(str(record(tmp_path / "whole.gpulens")))
    assert 0 < len(index) < len(complete)
    assert index.events_between(index.start - 1, index.end)  # what was indexed still reads back


def test_a_hostile_record_stops_the_index_with_its_place(tmp_path: Path) -> None:
    path = record(tmp_path / "r.gpulens")
    with path.open("ab") as fh:  # a whole block, compressed as the recorder does: the sample decoder refuses it
        fh.write(block_start(99) + frame(msgpack.packb({"k": "s", "d": {"host": 5}})))
    whole = len(read_recording(str(record(tmp_path / "whole.gpulens")))[1])
    index = built(path)
    assert index.error is not None and "\n" not in index.error
    assert index.problem is RecordingProblem.BAD_SAMPLE and len(index) == whole  # every record before it kept
    assert index.end == T0 + SECONDS
