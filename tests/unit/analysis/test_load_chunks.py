"""stream_events cuts the events array into chunks: every cut, good or bad, gives exactly json.loads' events."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from gpulens.analysis.trace import load
from gpulens.analysis.trace.errors import TraceFileError, TraceProblem
from gpulens.analysis.trace.load import stream_events, trace_limits
from tests.paths import DATA


def _fields(e: Any) -> tuple[Any, ...]:
    return (e.ph, e.cat, e.name, e.pid, e.tid, e.ts, e.dur, e.args)


def _reference(doc: dict[str, Any]) -> list[tuple[Any, ...]]:
    out = []
    for e in doc["traceEvents"]:
        out.append((e.get("ph", ""), e.get("cat", ""), e.get("name", ""), e.get("pid", 0), e.get("tid", 0),
                    float(e.get("ts", 0.0)), float(e.get("dur", 0.0)), e.get("args")))
    return out


def _read(path: Path, **kw: Any) -> tuple[list[tuple[Any, ...]], load.TraceMeta]:
    got: list[Any] = []
    meta = stream_events(path, got.extend, keep_args=True, **kw)
    return [_fields(e) for e in got], meta


@pytest.mark.parametrize("chunk", [64, 300, 4096, 1 << 21])
def test_cuts_inside_strings_and_nested_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    monkeypatch.setattr(load, "CHUNK_BYTES", chunk)
    events = []
    for i in range(300):
        name = "op}, {fake" if i % 7 == 0 else f"op{i}"  # the boundary bytes inside a string
        args = {"nested": [{"a": i}, {"b": "x}, {y"}]} if i % 5 == 0 else {"External id": i}
        events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 2, "ts": i, "dur": 1, "args": args})
    doc = {"distributedInfo": {"rank": 3}, "traceEvents": events, "traceName": "t"}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc, indent=2))
    got, meta = _read(path)
    assert got == _reference(doc)
    assert meta.events == 300 and meta.distributed_info == {"rank": 3}


def test_real_trace_equals_json_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    path = DATA / "traces" / "sampled_rank-1.json.gz"
    with gzip.open(path) as f:
        doc = json.load(f)
    monkeypatch.setattr(load, "CHUNK_BYTES", 10_000)
    got, meta = _read(path)
    assert got == _reference(doc) and meta.events == len(doc["traceEvents"])


def test_bare_array_empty_array_and_not_an_array(tmp_path: Path) -> None:
    bare = tmp_path / "bare.json"
    bare.write_text('  [ {"ph": "X", "name": "a", "ts": 1, "dur": 2} ,\n {"ph": "X", "name": "b"} ]  \n')
    got, meta = _read(bare)
    assert [g[2] for g in got] == ["a", "b"] and meta.events == 2
    empty = tmp_path / "empty.json"
    empty.write_text('{"traceEvents": [ \n ]}')
    assert _read(empty)[1].events == 0
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": {"ph": "X"}}')
    with pytest.raises(TraceFileError) as info:
        _read(bad)
    assert info.value.problem is TraceProblem.NOT_A_TRACE


def test_event_limit_while_streaming(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(load, "CHUNK_BYTES", 200)
    path = tmp_path / "many.json"
    path.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": f"e{i}"} for i in range(500)]}))
    seen: list[Any] = []
    with pytest.raises(TraceFileError) as info:
        stream_events(path, seen.extend, limits=trace_limits(max_events=100))
    assert info.value.problem is TraceProblem.TOO_MANY_EVENTS
    assert len(seen) <= 100
