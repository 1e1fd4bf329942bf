"""Issue 33 item 3: a recording that cannot be read says why as a value (core.errors.RecordingProblem), the same
from every reader, and keeps it through a pickle; the tests compare the reason, not the sentence."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import BinaryIO

import msgpack
import pytest

from gpulens.core.errors import RecordingError, RecordingProblem
from gpulens.core.limits import InputProblem
from gpulens.ipc import recording
from gpulens.ipc.recording import header, read_recording
from gpulens.ipc.recording_blocks import block_start, frame
from gpulens.sources.replay import RecordingIndex, read_header

T0 = 1_700_000_000.0
NOT_A_RECORDING = RecordingProblem.NOT_A_RECORDING
TAIL = msgpack.packb({"k": "m", "message": "m", "ok": True, "time": T0})
"""One record after a header: read_header wants more than a header."""

FIRST_OBJECT = {
    "empty": (b"", RecordingProblem.EMPTY),
    "ends-inside-it": (b"\x85\xa6format", NOT_A_RECORDING),
    "a-number": (b"hello world", NOT_A_RECORDING),
    "not-msgpack": (b"\xc1" * 10, NOT_A_RECORDING),
    "a-list": (msgpack.packb([1, 2]), NOT_A_RECORDING),
    "keys-not-strings": (msgpack.packb({1: 2}), NOT_A_RECORDING),
    "another-format": (msgpack.packb({"format": "other", "version": 1}), NOT_A_RECORDING),
    "field-a-map": (msgpack.packb({"format": "gpulens-recording", "version": 1, "source": {"a": 1}}), NOT_A_RECORDING),
    "field-too-large": (msgpack.packb({"format": "gpulens-recording", "version": 1, "source": "s" * 70_000}),
                        NOT_A_RECORDING),
    "version-99": (msgpack.packb({"format": "gpulens-recording", "version": 99}), RecordingProblem.UNSUPPORTED_VERSION),
    "version-true": (msgpack.packb({"format": "gpulens-recording", "version": True}),
                     RecordingProblem.UNSUPPORTED_VERSION),
}


@pytest.mark.parametrize("name", sorted(FIRST_OBJECT))
def test_a_fault_in_the_first_object_has_one_reason_from_every_reader(tmp_path: Path, name: str) -> None:
    data, want = FIRST_OBJECT[name]
    path = tmp_path / "bad.gpulens"
    path.write_bytes(data + (TAIL if data else b""))
    got: list[RecordingProblem | None] = []
    for read in (read_recording, read_header):
        with pytest.raises(RecordingError) as err:
            read(str(path))
        got.append(err.value.problem)
    index = RecordingIndex(str(path))
    index.build()
    got.append(index.problem)
    assert got == [want] * 3, got


def test_a_header_and_nothing_after_it_has_no_samples(tmp_path: Path) -> None:
    path = tmp_path / "head.gpulens"
    path.write_bytes(header("x", False, T0))
    with pytest.raises(RecordingError) as err:
        read_header(str(path))
    assert err.value.problem is RecordingProblem.NO_SAMPLES


def test_a_file_the_input_guard_refuses_is_not_opened_and_says_why(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, refused in [(tmp_path / "nope", InputProblem.CANNOT_OPEN), (tmp_path, InputProblem.NOT_REGULAR),
                          (fifo, InputProblem.NOT_REGULAR)]:
        with pytest.raises(RecordingError) as err:
            read_recording(str(path))
        assert (err.value.problem, err.value.refused) == (RecordingProblem.NOT_OPENED, refused)


def test_a_read_that_fails_is_unreadable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Failing:
        def read(self, size: int) -> bytes:
            raise OSError(5, "Input/output error")

        def __enter__(self) -> Failing:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

    def failing(path: str) -> BinaryIO:
        return Failing()  # type: ignore[return-value]

    monkeypatch.setattr(recording, "open_recording", failing)
    with pytest.raises(RecordingError) as err:
        read_recording(str(tmp_path / "any.gpulens"))
    assert err.value.problem is RecordingProblem.UNREADABLE


def _rec(i: int) -> bytes:
    data: bytes = msgpack.packb({"k": "m", "message": f"m{i}", "ok": True, "time": T0 + i})
    return data


def _indexed(path: Path) -> tuple[RecordingIndex, bytes]:
    """A version-2 recording of three records in one block, indexed; and its bytes."""
    data = header("x", False, T0) + block_start(0) + frame(_rec(0)) + frame(_rec(1), _rec(0), [1]) \
        + frame(_rec(2), _rec(1), [1])
    path.write_bytes(data)
    index = RecordingIndex(str(path))
    index.build()
    assert (index.problem, len(index)) == (None, 3)
    return index, data


def test_a_file_changed_under_the_index_is_changed(tmp_path: Path) -> None:
    path = tmp_path / "r.gpulens"
    index, data = _indexed(path)
    start = len(header("x", False, T0) + block_start(0))
    for changed in (data[:start] + msgpack.packb([b"", [], b"p" * 500]),  # the block ends inside a record
                    data[: len(data) // 2],  # shorter
                    data[:start] + bytes(len(data) - start)):  # other bytes
        path.write_bytes(changed)
        index.close()
        with pytest.raises(RecordingError) as err:
            index.events_between(T0 - 1, T0 + 10)
        assert err.value.problem is RecordingProblem.CHANGED
    index.close()


def test_a_read_back_that_fails_is_unreadable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index, _ = _indexed(tmp_path / "r.gpulens")

    def failing(fd: int, size: int, offset: int) -> bytes:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "pread", failing)
    with pytest.raises(RecordingError) as err:
        index.events_between(T0 - 1, T0 + 10)
    assert err.value.problem is RecordingProblem.UNREADABLE
    index.close()


def test_the_reason_the_events_and_the_sentence_survive_a_pickle(tmp_path: Path) -> None:
    path = tmp_path / "cut.gpulens"
    path.write_bytes(header("x", False, T0, version=1) + _rec(0) + _rec(1)[:-3])
    with pytest.raises(RecordingError) as err:
        read_recording(str(path))
    again = pickle.loads(pickle.dumps(err.value))  # a worker process's error reaches the parent whole
    assert (again.problem, again.refused, again.events, str(again)) == (
        RecordingProblem.TRUNCATED, None, err.value.events, str(err.value))
    assert len(again.events) == 1
    with pytest.raises(RecordingError) as refused:
        read_recording(str(tmp_path / "nope"))
    again = pickle.loads(pickle.dumps(refused.value))
    assert (again.problem, again.refused) == (RecordingProblem.NOT_OPENED, InputProblem.CANNOT_OPEN)
