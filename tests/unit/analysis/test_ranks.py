"""Multi-rank analysis: HTA's numbers on its own two-rank fixture, a real DDP-over-gloo pair, steps, rank files."""

from __future__ import annotations

import gzip
import itertools
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpulens.analysis.trace.errors import TraceFileError, TraceProblem
from gpulens.analysis.trace.json_out import ranks_json
from gpulens.analysis.trace.rank_files import assign_ranks, rank_from_name, trace_files
from gpulens.analysis.trace.ranks import analyze_ranks
from gpulens.analysis.trace.steps import find_steps
from tests.paths import DATA

TRACES = DATA / "traces"
SAMPLED = [str(TRACES / "sampled_rank-0.json.gz"), str(TRACES / "sampled_rank-1.json.gz")]
GLOO = TRACES / "ddp_gloo"


def _hta() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((TRACES / "hta_sampled_ranks.json").read_text())
    return doc


@pytest.fixture(scope="module")
def sampled() -> Any:
    return analyze_ranks(SAMPLED)


def test_worker_processes_give_the_same_report(sampled: Any) -> None:
    """--jobs 2 in a fresh single-threaded process (forked workers) = the in-process report."""
    out = subprocess.run([sys.executable, "-m", "gpulens", "analyze", "--json", "--jobs", "2", *SAMPLED],
                         capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(out.stdout) == json.loads(json.dumps(ranks_json(sampled)))


def test_ranks_come_from_distributed_info(sampled: Any) -> None:
    assert [(r.rank, r.rank_source) for r in sampled.ranks] == [(0, "distributedInfo"), (1, "distributedInfo")]


def test_temporal_breakdown_equals_hta(sampled: Any) -> None:
    ref = {row["rank"]: row for row in _hta()["temporal_breakdown"]}
    for r in sampled.ranks:
        h, s = ref[r.rank], r.split
        assert r.basis == "GPU"
        assert s.window_us == pytest.approx(h["kernel_time(us)"], abs=1.0)
        assert s.idle_us == pytest.approx(h["idle_time(us)"], abs=1.0)
        assert s.compute_us == pytest.approx(h["compute_time(us)"], abs=1.0)
        # HTA's non-compute time is everything busy that is not a compute kernel
        assert s.exposed_comm_us + s.other_us == pytest.approx(h["non_compute_time(us)"], abs=1.0)


def test_comm_comp_overlap_equals_hta(sampled: Any) -> None:
    ref = {row["rank"]: row["comp_comm_overlap_pctg"] for row in _hta()["comm_comp_overlap"]}
    for r in sampled.ranks:
        assert r.overlap_pct is not None
        assert r.overlap_pct == pytest.approx(ref[r.rank], abs=0.01)  # HTA rounds to 2 decimals


def test_step_times_equal_hta_profiler_steps(sampled: Any) -> None:
    ref = _hta()["profiler_step_dur_us"]
    for r in sampled.ranks:
        assert r.steps.source == "ProfilerStep"
        assert r.step_times_ms == pytest.approx([d / 1000.0 for d in ref[str(r.rank)]])


def test_spread_and_gpu_breakdown(sampled: Any) -> None:
    means = {r.rank: sum(r.step_times_ms) / len(r.step_times_ms) for r in sampled.ranks}
    sp = sampled.spread
    assert sp is not None
    assert (sp.min_rank, sp.max_rank) == (min(means, key=means.__getitem__), max(means, key=means.__getitem__))
    assert sp.spread_ms == pytest.approx(max(means.values()) - min(means.values()))
    for r in sampled.ranks:
        assert r.gpu is not None and r.gpu.busy_us == pytest.approx(r.split.busy_us, rel=1e-9)


# --- a real job: 2-rank DDP over gloo under torchrun (tests/fakes/ddp_gloo_profile.py) ---------------


def _events(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt") as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def _covered(intervals: list[tuple[float, float]]) -> float:
    """Covered length by a sweep over +1/-1 edges (not the merge the product uses)."""
    edges = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals], key=lambda x: (x[0], -x[1]))
    depth, last, total = 0, 0.0, 0.0
    for t, d in edges:
        if depth > 0:
            total += t - last
        depth += d
        last = t
    return total


def test_gloo_ddp_steps_from_optimizer_and_collectives_independently() -> None:
    rep = analyze_ranks([str(GLOO)])
    assert [r.rank for r in rep.ranks] == [0, 1]
    for r in rep.ranks:
        evs = _events(GLOO / f"rank-{r.rank}.json.gz")
        opt = sorted((e["ts"] + e["dur"]) for e in evs if e["name"].startswith("Optimizer.step#"))
        assert r.basis == "CPU"
        assert r.steps.source == "optimizer step"
        assert r.step_times_ms == pytest.approx([(b - a) / 1000.0 for a, b in itertools.pairwise(opt)])
        gloo = [(e["ts"], e["ts"] + e["dur"]) for e in evs if e["name"].startswith(("gloo:", "c10d::"))]
        assert r.split.comm_us == pytest.approx(_covered(gloo), rel=1e-9)
        c10d = [e for e in evs if e["name"].startswith("c10d::")]
        assert r.collective_cpu_calls == len(c10d)


def test_gloo_ddp_straggler_is_the_rank_with_extra_compute() -> None:
    """Rank 1 runs extra matrix products each step; rank 0 waits for it in gloo:all_reduce."""
    rep = analyze_ranks([str(GLOO)])
    r0, r1 = rep.ranks
    assert r1.split.compute_us > 5 * r0.split.compute_us
    assert r0.split.exposed_comm_us > 5 * r1.split.exposed_comm_us
    assert [s.rank for s in rep.stragglers] == [1]
    s = rep.stragglers[0]
    assert s.by == "compute" and s.cause == "compute" and s.kind == "compute" and s.held_back
    assert s.compute_delta_ms > 0 > s.comm_delta_ms
    assert s.excess_ms > s.threshold_ms and rep.rule is not None and rep.rule.noise_measured


# --- steps and rank files ---------------------------------------------------------------------------


def test_steps_prefer_profiler_then_optimizer_then_annotation() -> None:
    prof = [("ProfilerStep#2", 100.0, 50.0), ("ProfilerStep#1", 0.0, 100.0)]
    opt = [("Optimizer.step#SGD.step", 80.0, 10.0), ("Optimizer.step#SGD.step", 180.0, 10.0),
           ("Optimizer.step#SGD.step", 182.0, 5.0)]  # the last is nested: recorded twice
    ann = [("train", 0.0, 90.0), ("train", 100.0, 95.0), ("train", 250.0, 40.0), ("fwd", 0.0, 10.0),
           ("fwd", 100.0, 10.0)]
    assert find_steps(prof, opt, ann).durations_us == (100.0, 50.0)
    st = find_steps([], opt, ann)
    assert (st.source, st.durations_us) == ("optimizer step", (100.0,))
    st = find_steps([], opt[:1], ann)
    assert (st.source, st.marker, st.durations_us) == ("user annotation", "train", (100.0, 150.0))
    assert find_steps([], [], [("once", 0.0, 5.0)]).source == "none"


def test_rank_from_file_name_and_order() -> None:
    assert rank_from_name("/x/rank-3.Apr_03.pt.trace.json.gz") == 3
    assert rank_from_name("worker_rank12.json") == 12
    assert rank_from_name("trace.json") is None
    got = assign_ranks([("a", None, None), ("b", 0, None), ("c", None, 5), ("d", None, None)])
    assert got == [(1, "order"), (0, "distributedInfo"), (5, "file name"), (2, "order")]
    with pytest.raises(TraceFileError) as info:
        assign_ranks([("a", 0, None), ("b", None, 0)])
    assert info.value.problem is TraceProblem.RANK_CLASH


def test_directory_listing_and_refusals(tmp_path: Path) -> None:
    for name in ("rank-0.json.gz", "rank-1.pt.trace.json", ".hidden.json", "notes.txt"):
        (tmp_path / name).write_bytes(b"{}")
    assert [Path(f).name for f in trace_files([str(tmp_path)])] == ["rank-0.json.gz", "rank-1.pt.trace.json"]
    with pytest.raises(TraceFileError) as info:
        trace_files([str(tmp_path / "missing")])
    assert info.value.problem is TraceProblem.CANNOT_OPEN
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(TraceFileError) as info:
        trace_files([str(empty)])
    assert info.value.problem is TraceProblem.NO_TRACE_FILES


def test_same_rank_twice_is_refused(tmp_path: Path) -> None:
    shutil.copy(SAMPLED[0], tmp_path / "a.json.gz")
    shutil.copy(SAMPLED[0], tmp_path / "b.json.gz")
    with pytest.raises(TraceFileError) as info:
        analyze_ranks([str(tmp_path)])
    assert info.value.problem is TraceProblem.RANK_CLASH


def _report(rank: int, steps_ms: list[float], compute: float, comm: float, idle: float) -> Any:
    from gpulens.analysis.trace.rank_report import RankReport, TimeSplit
    from gpulens.analysis.trace.steps import StepTimes
    from gpulens.analysis.trace.summary import Step

    w = compute + comm + idle
    split = TimeSplit(w * 1000, (compute + comm) * 1000, compute * 1000, comm * 1000, comm * 1000, 0.0, idle * 1000)
    steps = StepTimes("ProfilerStep", "", tuple(Step(f"s{i}", i, d * 1000) for i, d in enumerate(steps_ms)))
    return RankReport(rank, "order", f"r{rank}", 0, 0, "GPU", steps, tuple(steps_ms), split, split, None, "",
                      0.0, 0, 0, None, (), ())


def test_ranks_without_a_step_profile_are_judged_on_their_averages() -> None:
    """Reports without per-step parts (no ``arrival``) give one averaged step: the noise cannot be measured, so
    only an excess over half the median step names a rank (the rule before issue #32 named rank 3 here by step
    time, at +30 %)."""
    from gpulens.analysis.trace.ranks import find_stragglers, spread_of
    from gpulens.analysis.trace.stragglers import judge

    reports = [_report(r, [100.0, 100.0], 60.0, 30.0, 10.0) for r in range(3)]
    reports.append(_report(3, [130.0, 130.0], 65.0, 30.0, 35.0))
    assert find_stragglers(reports, threshold_pct=5.0) == []
    _, rule = judge(reports)
    assert not rule.noise_measured and rule.steps == 1 and rule.floor_ms == pytest.approx(50.0)
    assert "noise not measured" in rule.note
    sp = spread_of(reports)
    assert sp is not None and (sp.min_ms, sp.max_ms, sp.max_rank, sp.median_ms) == pytest.approx((100.0, 130.0, 3, 100.0))
    reports[3] = _report(3, [170.0, 170.0], 65.0, 30.0, 75.0)  # 65 ms more idle: over half a step
    got = find_stragglers(reports)
    assert [(s.rank, s.kind, s.by, s.cause) for s in got] == [(3, "late", "late arrival", "idle")]
    assert (got[0].value_ms, got[0].median_ms, got[0].excess_ms) == pytest.approx((75.0, 10.0, 65.0))
    assert (got[0].compute_delta_ms, got[0].comm_delta_ms) == pytest.approx((5.0, 0.0))
    assert got[0].noise_ms is None and not got[0].held_back  # no collective wait in these reports
