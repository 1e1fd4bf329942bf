"""The one trace flow through an agent (``gpulens.sources.tracing.fetch_trace``) and its two users.

``gpulens trace --host`` (and the local agent path) prints what the flow
reports; the TUI's ``RemoteTraceService`` turns it into TraceJobs. Both are
fed the same scripted agent answers here, without torch or sockets; the real
agents are in integration/test_trace_remote.py and unit/tui/test_tui_remote_profiler.py.
"""

from __future__ import annotations

import os
from concurrent.futures import Future
from pathlib import Path

import pytest

from gpulens.commands.trace_agent import trace_via
from gpulens.core.events import RequestParams
from gpulens.ipc.errors import RequestFailed
from gpulens.ipc.kineto.protocol import TraceService
from gpulens.ipc.kineto.requests import TraceRequest, TraceState
from gpulens.ipc.kineto.service import LocalTraceService
from gpulens.ipc.kineto.untraceable import Untraceable, UntraceableKind
from gpulens.ipc.request_schema import ProgressEvent, TraceAnswer, TraceStatusAnswer, answer_to_wire
from gpulens.sources.remote_trace import RemoteTraceService
from gpulens.sources.stream.requests import RequestResult
from gpulens.sources.tracing import Requester, fetch_trace
from tests.fakes.request_source import Answered, FakeAgent, Script

STATUS = [{"state": "waiting for poll", "detail": "config handed over"}, {"state": "tracing", "detail": "500 ms"}]


def scripted(answer: Answered | BaseException, status: list[dict[str, str]] | None = None) -> FakeAgent:
    """An agent answering ``trace`` with ``answer`` and ``trace_status`` with ``status`` (STATUS; []: unsupported)."""
    status = STATUS if status is None else status
    answers: dict[str, Script] = {"trace": answer}
    if status:
        events = tuple(ProgressEvent(state=e["state"], detail=e["detail"]) for e in status)
        answers["trace_status"] = TraceStatusAnswer(state=events[-1].state, first=0, events=events)
    return FakeAgent(answers)


def _answer(tmp_path: Path) -> Answered:
    """Files for pids 7 and 12, a malformed pid, a named file never sent, and a pid the agent says is gone."""
    files = {}
    for pid in (7, 12):
        files[f"{pid}-t.json"] = tmp_path / f"{pid}-t.json"
        files[f"{pid}-t.json"].write_text('{"traceEvents": []}')
    names = {"7": "7-t.json", "12": "12-t.json", "x": "7-t.json", "8": "8-t.json"}
    return Answered(TraceAnswer(files=names, missing={"9": "process 9 is gone"}), files)


def test_both_forms_are_trace_services() -> None:
    local: TraceService = LocalTraceService(use_dynolog=False)
    remote: TraceService = RemoteTraceService(scripted(RequestFailed("no")), "box", set)
    agent: Requester = scripted(RequestFailed("no"))
    assert isinstance(local, TraceService) and isinstance(remote, TraceService)
    assert isinstance(agent, Requester)
    assert remote.processes() == [] and remote.jobs() == []
    remote.stop()


def test_flow_reports_states_in_order_and_maps_the_files(tmp_path: Path) -> None:
    seen: list[tuple[str, str]] = []
    got = fetch_trace(scripted(_answer(tmp_path)), "box", TraceRequest(pids=(7,)), "t1",
                      lambda s, d: seen.append((s, d)))
    assert seen == [("waiting for poll", "config handed over"), ("tracing", "500 ms")]
    assert got.files == {"7": ("7-t.json", tmp_path / "7-t.json"), "12": ("12-t.json", tmp_path / "12-t.json")}
    assert got.missing == {"'x'": "the agent sent a malformed process id",
                           "8": "the agent named '8-t.json' but sent no such file", "9": "process 9 is gone"}
    assert got.named == 4


def test_cli_prints_files_then_missing_processes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = trace_via(scripted(_answer(tmp_path)), "box", TraceRequest(pids=(7,)), None)
    out, err = capsys.readouterr()
    assert rc == 1
    assert out.splitlines() == [f"12 {tmp_path / '12-t.json'}", f"7 {tmp_path / '7-t.json'}"]
    assert err.splitlines() == [f"gpulens trace: {line}" for line in (
        "waiting for poll: config handed over", "tracing: 500 ms",
        "received 12-t.json (19 bytes)", "received 7-t.json (19 bytes)",
        "process 'x': the agent sent a malformed process id",
        "process 8: the agent named '8-t.json' but sent no such file",
        "process 9: process 9 is gone", "done, with processes missing")]


def test_cli_copies_each_file_to_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    staged = tmp_path / "dl"
    staged.mkdir()
    (staged / "7-t.json").write_text('{"traceEvents": []}')
    answer = Answered(TraceAnswer(files={"7": "7-t.json"}, missing={}), {"7-t.json": staged / "7-t.json"})
    rc = trace_via(scripted(answer, status=[]), "box", TraceRequest(pids=(7,)), str(tmp_path / "o.json"))
    out, err = capsys.readouterr()
    assert rc == 0 and out == f"7 {tmp_path / 'o.json'}\n"
    assert (tmp_path / "o.json").read_text() == '{"traceEvents": []}'
    assert not (staged / "7-t.json").exists(), "the staging copy is removed"
    assert "no progress reports from this agent (unsupported request kind 'trace_status'); waiting" not in err
    assert err.endswith(f"gpulens trace: writing {tmp_path / 'o.json'}\ngpulens trace: done\n")


@pytest.mark.parametrize(("answer", "line"), [
    (RequestFailed("trace failed: 7: socket-dir mismatch"), "trace failed: 7: socket-dir mismatch"),
    (TimeoutError("trace request timed out"), "failed: the agent at box sent no trace within 61 s"),
])
def test_cli_failure_is_one_line_and_exit_1(answer: BaseException, line: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    rc = trace_via(scripted(answer), "box", TraceRequest(pids=(7,), timeout_s=1), None)
    out, err = capsys.readouterr()
    assert rc == 1 and out == ""
    assert err.splitlines()[-1] == f"gpulens trace: {line}"


def test_remote_service_gets_the_same_answer(tmp_path: Path) -> None:
    svc = RemoteTraceService(scripted(_answer(tmp_path)), "box", set)
    result = svc.request_trace(TraceRequest(pids=(7,))).result(timeout=10)
    assert result.files == {7: str(tmp_path / "7-t.json"), 12: str(tmp_path / "12-t.json")}
    assert result.missing == {8: "the agent named '8-t.json' but sent no such file", 9: "process 9 is gone"}
    (job,) = svc.jobs()
    assert job.state is TraceState.DONE and job.request_id == result.request_id
    assert job.detail.startswith("pid 8: the agent named") and "pid 9: process 9 is gone" in job.detail


def test_remote_service_names_the_timeout() -> None:
    svc = RemoteTraceService(scripted(TimeoutError("late")), "box", set)
    with pytest.raises(TimeoutError):
        svc.request_trace(TraceRequest(pids=(7,), timeout_s=1)).result(timeout=10)
    (job,) = svc.jobs()
    assert job.state is TraceState.FAILED
    assert job.detail == "the agent on box sent no trace within 61 s"
    why = svc.diagnose(7)
    assert why == Untraceable(UntraceableKind.AGENT_FAILED, 7, host="box", detail=job.detail)
    assert str(why) == f"the agent on box says: {job.detail}"  # the sentence the screens show


def test_cli_without_progress_reports_still_gets_the_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An older agent answers no trace_status: said once (while the trace runs), the files still come."""
    trace: Future[RequestResult] = Future()

    def status(host: str, params: RequestParams) -> RequestFailed:
        if not trace.done():
            answer = _answer(tmp_path)  # answered after the first status request
            trace.set_result(RequestResult(answer_to_wire(answer.answer), dict(answer.files)))
        return RequestFailed("unsupported request kind 'trace_status'")

    slow = FakeAgent({"trace": lambda host, params: trace, "trace_status": status})
    rc = trace_via(slow, "box", TraceRequest(pids=(7,)), None)
    err = capsys.readouterr().err
    assert rc == 1 and os.path.exists(tmp_path / "7-t.json")
    assert err.startswith("gpulens trace: no progress reports from this agent "
                          "(unsupported request kind 'trace_status'); waiting for the trace\n")
