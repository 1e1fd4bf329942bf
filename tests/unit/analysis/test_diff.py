"""`gpulens analyze --diff A B` on two real traces: kernels against a plain-JSON count, ops against analyze_file."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from typing import Any

import pytest

from gpulens.analysis.trace.analyze import analyze_file
from gpulens.analysis.trace.diff import diff_files
from gpulens.analysis.trace.diff_text import diff_text
from tests.paths import DATA

A = DATA / "traces" / "sampled_rank-0.json.gz"
B = DATA / "traces" / "sampled_rank-1.json.gz"
GLOO_A = DATA / "traces" / "ddp_gloo" / "rank-0.json.gz"
GLOO_B = DATA / "traces" / "ddp_gloo" / "rank-1.json.gz"


def _kernels(path: Any) -> dict[str, tuple[int, float]]:
    calls: dict[str, int] = defaultdict(int)
    total: dict[str, float] = defaultdict(float)
    with gzip.open(path, "rt") as f:
        for e in json.load(f)["traceEvents"]:
            if e.get("ph") == "X" and e.get("cat") == "kernel":
                calls[e["name"]] += 1
                total[e["name"]] += e["dur"]
    return {n: (calls[n], total[n]) for n in calls}


def _steps(path: Any) -> int:
    with gzip.open(path, "rt") as f:
        return sum(1 for e in json.load(f)["traceEvents"] if e.get("name", "").startswith("ProfilerStep#"))


@pytest.fixture(scope="module")
def diff() -> Any:
    return diff_files(str(A), str(B))


def test_kernel_deltas_equal_a_plain_count(diff: Any) -> None:
    ka, kb = _kernels(A), _kernels(B)
    na, nb = _steps(A), _steps(B)
    assert diff.scale == "per step"
    rows = {d.name: d for d in diff.kernels}
    assert set(rows) == set(ka) | set(kb)
    for name, d in rows.items():
        ca, ta = ka.get(name, (0, 0.0))
        cb, tb = kb.get(name, (0, 0.0))
        assert d.calls_a == pytest.approx(ca / na) and d.calls_b == pytest.approx(cb / nb), name
        assert d.time_delta_us == pytest.approx(tb / nb - ta / na, abs=1e-6), name
    assert set(diff.new("kernels")) == set(kb) - set(ka)
    assert set(diff.vanished("kernels")) == set(ka) - set(kb)
    deltas = [abs(d.time_delta_us) for d in diff.kernels]
    assert deltas == sorted(deltas, reverse=True)


def test_op_deltas_follow_each_traces_own_op_table(diff: Any) -> None:
    sa, sb = analyze_file(A, top=10**9), analyze_file(B, top=10**9)
    ops_a = {o.name: o for p in sa.processes for o in p.cpu_ops}
    ops_b = {o.name: o for p in sb.processes for o in p.cpu_ops}
    na, nb = _steps(A), _steps(B)
    rows = {d.name: d for d in diff.ops}
    assert set(rows) == set(ops_a) | set(ops_b)
    for name in ("aten::_foreach_mul_", "forward"):
        d = rows[name]
        assert d.time_delta_us == pytest.approx(ops_b[name].self_cpu_us / nb - ops_a[name].self_cpu_us / na)
        assert d.calls_delta == pytest.approx(ops_b[name].calls / nb - ops_a[name].calls / na)
    assert set(diff.new("ops")) == set(ops_b) - set(ops_a)
    assert set(diff.vanished("ops")) == set(ops_a) - set(ops_b)


def test_step_time_delta_and_text(diff: Any) -> None:
    ref = json.loads((DATA / "traces" / "hta_sampled_ranks.json").read_text())["profiler_step_dur_us"]
    mean = {r: sum(v) / len(v) / 1000.0 for r, v in ref.items()}
    assert diff.mean_step_delta_ms == pytest.approx(mean["1"] - mean["0"])
    text = diff_text(diff, top=5)
    assert "step time: +" in text and "new ops (only in B) (" in text and "vanished kernels (only in A) (" in text


def test_cpu_traces_without_profiler_steps() -> None:
    d = diff_files(str(GLOO_A), str(GLOO_B))
    assert d.a.steps.source == d.b.steps.source == "optimizer step"
    assert d.scale == "per step" and d.kernels == ()
    assert d.a.mean_step_ms is not None and d.b.mean_step_ms is not None
    assert d.mean_step_delta_ms == pytest.approx(d.b.mean_step_ms - d.a.mean_step_ms)
    mm = {x.name: x for x in d.ops}["aten::mm"]
    assert mm.time_b_us > mm.time_a_us  # rank 1's extra matrix products


def _iterations_trace(path: Any, iterations: int, mms: int) -> None:
    """A CPU trace of ``iterations`` training iterations with ``mms`` aten::mm each and one
    Optimizer.step per iteration (no ProfilerStep, as an on-demand trace)."""
    events: list[dict[str, Any]] = [{"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "args": {"name": "python"}}]
    t = 1000.0
    for _ in range(iterations):
        for _k in range(mms):
            events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 7, "ts": t, "dur": 10.0,
                           "args": {}})
            t += 20.0
        events.append({"ph": "X", "cat": "user_annotation", "name": "Optimizer.step#SGD.step", "pid": 7, "tid": 7,
                       "ts": t, "dur": 5.0, "args": {}})
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::add_", "pid": 7, "tid": 7, "ts": t + 1.0,
                       "dur": 2.0, "args": {}})
        t += 50.0
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))


def test_per_step_counts_divide_by_iterations_not_optimizer_intervals(tmp_path: Any) -> None:
    # Issue 32, item 4: one extra mm per step read +1.111/step over 10 iterations (divided by the 9
    # intervals between the 10 optimizer steps).
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    _iterations_trace(a, 10, 1)
    _iterations_trace(b, 10, 2)
    d = diff_files(str(a), str(b))
    assert d.a.steps.source == "optimizer step" and len(d.a.steps.steps) == 9 and d.a.steps.count == 10
    assert d.scale == "per step"
    mm = {x.name: x for x in d.ops}["aten::mm"]
    assert mm.calls_delta == pytest.approx(1.0) and mm.calls_a == pytest.approx(1.0)
    assert mm.time_delta_us == pytest.approx(10.0)


def test_analyze_counts_steps_as_the_rank_report_and_the_tui_do() -> None:
    # Issue 32, item 4: the TUI's Analyze said "43 steps" where `gpulens analyze` said "no step markers".
    from gpulens.analysis.trace.load import trace_limits
    from gpulens.analysis.trace.ranks import load_rank

    for path in (GLOO_A, GLOO_B):
        proc = analyze_file(str(path)).processes[0]
        rank, _ = load_rank(str(path), trace_limits())
        assert rank.steps.source == "optimizer step"
        assert [s.dur_us for s in proc.steps] == list(rank.steps.durations_us) and proc.steps
        assert proc.steps_note.startswith(f"{len(rank.steps.steps)} steps between Optimizer.step calls")
        assert not any("no step markers" in f for f in proc.findings)
