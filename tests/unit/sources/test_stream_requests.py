"""The viewer's one pending-request table, driven without sockets: frames go to a list, answers are fed in."""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from gpulens.ipc import stream
from gpulens.ipc.errors import ProtocolError, ProtocolProblem, RequestFailed
from gpulens.ipc.request_schema import HistoryParams, TraceParams
from gpulens.ipc.stream_decode import FrameDecoder
from gpulens.sources.stream import requests
from gpulens.sources.stream.downloads import SaveFailed
from gpulens.sources.stream.requests import RequestResult, RequestTable
from tests.fakes.request_source import RawParams

WAIT_S = 15.0


class Sent:
    """An in-memory transport: the table's ``send``, keeping the requests it was given."""

    def __init__(self, fail: OSError | None = None) -> None:
        self.requests: list[stream.Request] = []
        self.fail = fail

    def __call__(self, data: bytes) -> None:
        if self.fail is not None:
            raise self.fail
        for msg in FrameDecoder().feed(data):
            assert isinstance(msg, stream.Request)
            self.requests.append(msg)


def _table(tmp_path: Path, sent: Sent | None = None) -> tuple[RequestTable, Sent]:
    sent = sent or Sent()
    return RequestTable(sent, tmp_path / "dl", prefix="node/1"), sent


def _chunk(rid: int, name: str, data: bytes, *, offset: int = 0, last: bool = True) -> stream.FileChunk:
    return stream.FileChunk(id=rid, name=name, offset=offset, data=data, last=last)


def test_answer_brings_the_cleaned_result_files_and_samples(tmp_path: Path) -> None:
    table, sent = _table(tmp_path)
    fut = table.submit(HistoryParams(since=0), WAIT_S)
    (req,) = sent.requests
    assert (req.id, req.kind, req.params) == (1, "history", {"since": 0})
    sample: Any = object()  # the link decodes and checks samples; the table only keeps them
    table.add_samples(req.id, [sample])
    table.chunk(_chunk(req.id, "t.json", b"ab", last=False))
    table.chunk(_chunk(req.id, "t.json", b"cd", offset=2))
    table.respond(stream.Response(id=req.id, ok=True, result={"note": "fine\x1b[2J"}))
    res = fut.result(timeout=WAIT_S)
    assert isinstance(res, RequestResult) and res.samples == (sample,)
    assert isinstance(res.result, dict) and "\x1b" not in res.result["note"]
    # The prefix (maybe the peer's host name) never shapes the path.
    assert res.files == {"t.json": tmp_path / "dl" / "node_1-t.json"}
    assert res.files["t.json"].read_bytes() == b"abcd"
    assert table.pending() == 0


def test_ids_are_fresh_and_unknown_ids_are_ignored(tmp_path: Path) -> None:
    table, sent = _table(tmp_path)
    first, second = table.submit(RawParams("a"), WAIT_S), table.submit(RawParams("b"), WAIT_S)
    assert [r.id for r in sent.requests] == [1, 2]
    table.chunk(_chunk(99, "x", b"x"))
    table.respond(stream.Response(id=99, ok=True, result=None))
    table.add_samples(99, [object()])  # type: ignore[list-item]
    assert not first.done() and not second.done() and not (tmp_path / "dl").exists()
    table.respond(stream.Response(id=2, ok=True, result=[]))
    assert second.result(timeout=WAIT_S).result == [] and not first.done()


def test_error_answer_fails_the_request_and_deletes_its_files(tmp_path: Path) -> None:
    table, sent = _table(tmp_path)
    fut = table.submit(TraceParams(), WAIT_S)
    rid = sent.requests[0].id
    table.chunk(_chunk(rid, "t.json", b"x" * 10, last=False))
    table.respond(stream.Response(id=rid, ok=False, error="no such pid\x07"))
    with pytest.raises(RequestFailed, match=r"^no such pid$"):
        fut.result(timeout=WAIT_S)
    assert list((tmp_path / "dl").iterdir()) == []


def test_malformed_answer_fails_the_request(tmp_path: Path) -> None:
    table, sent = _table(tmp_path)
    fut = table.submit(TraceParams(), WAIT_S)
    deep: Any = []
    for _ in range(100):
        deep = [deep]
    table.respond(stream.Response(id=sent.requests[0].id, ok=True, result={"deep": deep}))
    with pytest.raises(RequestFailed, match="malformed"):
        fut.result(timeout=WAIT_S)


def test_timeout_fails_with_timeout_error_and_deletes_the_partial_file(tmp_path: Path) -> None:
    table, sent = _table(tmp_path)
    fut = table.submit(TraceParams(), 0.05)
    table.chunk(_chunk(sent.requests[0].id, "t.json", b"x", last=False))
    with pytest.raises(TimeoutError, match=r"trace request timed out after 0\.05 s"):
        fut.result(timeout=WAIT_S)
    assert list((tmp_path / "dl").iterdir()) == [] and table.pending() == 0


def test_close_fails_every_request_and_refuses_new_ones(tmp_path: Path) -> None:
    table, sent = _table(tmp_path)
    futs = [table.submit(TraceParams(), WAIT_S) for _ in range(3)]
    table.chunk(_chunk(sent.requests[0].id, "t.json", b"x", last=False))
    table.close("the agent closed the connection")
    table.close("a second reason is ignored")
    for fut in futs:
        with pytest.raises(RequestFailed, match=r"^connection lost: the agent closed the connection$"):
            fut.result(timeout=WAIT_S)
    assert list((tmp_path / "dl").iterdir()) == []
    with pytest.raises(RequestFailed, match="connection lost: the agent closed"):
        table.submit(TraceParams(), WAIT_S).result(timeout=WAIT_S)
    assert len(sent.requests) == 3  # nothing sent once closed


def test_send_failure_fails_only_that_request(tmp_path: Path) -> None:
    table, _sent = _table(tmp_path, Sent(fail=BrokenPipeError(32, "Broken pipe")))
    with pytest.raises(RequestFailed, match=r"cannot send the request: .*Broken pipe"):
        table.submit(TraceParams(), WAIT_S).result(timeout=WAIT_S)
    assert table.pending() == 0


def test_local_save_failure_fails_only_that_request(tmp_path: Path) -> None:
    (tmp_path / "dl").write_text("a file where the download directory should be")
    table, sent = _table(tmp_path)
    doomed, other = table.submit(TraceParams(), WAIT_S), table.submit(HistoryParams(), WAIT_S)
    table.chunk(_chunk(sent.requests[0].id, "t.json", b"x"))
    with pytest.raises(SaveFailed, match="download directory"):
        doomed.result(timeout=WAIT_S)
    table.respond(stream.Response(id=sent.requests[1].id, ok=True, result={}))
    assert other.result(timeout=WAIT_S).files == {}


def test_protocol_breaks_end_the_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Unsafe names, chunks out of order and oversized history raise: the link then ends the session."""
    table, sent = _table(tmp_path)
    table.submit(TraceParams(), WAIT_S)
    rid = sent.requests[0].id
    with pytest.raises(ProtocolError) as err:
        table.chunk(_chunk(rid, "../evil", b"x"))
    assert err.value.problem is ProtocolProblem.UNSAFE_NAME
    with pytest.raises(ProtocolError) as err:
        table.chunk(_chunk(rid, "t.json", b"x", offset=5))
    assert err.value.problem is ProtocolProblem.OUT_OF_ORDER
    monkeypatch.setattr(requests, "MAX_REQUEST_SAMPLES", 2)
    samples: list[Any] = [object() for _ in range(3)]
    table.add_samples(rid, samples[:2])
    with pytest.raises(ProtocolError) as err:
        table.add_samples(rid, samples[2:])
    assert err.value.problem is ProtocolProblem.ANSWER_TOO_LARGE
    table.close("ended")
    assert not (tmp_path / "evil").exists()


def test_a_cancelled_future_is_left_alone(tmp_path: Path) -> None:
    table, sent = _table(tmp_path)
    fut: Future[RequestResult] = table.submit(TraceParams(), WAIT_S)
    assert fut.cancel()
    table.respond(stream.Response(id=sent.requests[0].id, ok=False, error="late"))
    table.close("ended")
    assert fut.cancelled()
