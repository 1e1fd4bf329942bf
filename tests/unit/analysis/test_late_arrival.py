"""HTA's late-arrival stragglers: gpulens against numbers HTA 0.5.0 computed on the same directories.

The reference (tests/data/traces/hta_late_arrival.json) was made by running
HTA's ``get_potential_stragglers`` (tests/fakes/hta_stragglers.py); the
6-rank job is rebuilt here from the two sampled HTA ranks by the same
function (tests/fakes/late_ranks.py) that built HTA's input.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from gpulens.analysis.trace.arrival import NotPlaced, NotPlacedKind, RankArrival
from gpulens.analysis.trace.json_out import ranks_json
from gpulens.analysis.trace.late_arrival import NoLateArrival, NoLateArrivalKind, late_arrival
from gpulens.analysis.trace.rank_text import ranks_text
from gpulens.analysis.trace.ranks import RanksReport, analyze_ranks
from tests.fakes import late_ranks
from tests.paths import DATA, ROOT

TRACES = DATA / "traces"
REF = json.loads((TRACES / "hta_late_arrival.json").read_text())
DOC = ROOT / "docs" / "analyze-json.md"


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, RanksReport]:
    tmp = tmp_path_factory.mktemp("late")
    sampled = tmp / "sampled"
    sampled.mkdir()
    for name in late_ranks.SOURCES:
        shutil.copy(TRACES / name, sampled / name)
    late_ranks.write_job(TRACES, tmp / "job6")
    late_ranks.write_nccl_job(TRACES, tmp / "nccl4")
    dirs = {"sampled": sampled, "job6": tmp / "job6", "nccl4": tmp / "nccl4", "ddp_gloo": TRACES / "ddp_gloo"}
    return {k: analyze_ranks([str(p)], jobs=1) for k, p in dirs.items()}


def _arrivals(rep: RanksReport) -> list[tuple[int, RankArrival]]:
    return [(r.rank, r.arrival) for r in rep.ranks if r.arrival is not None]


CASES = [(d, c) for d, v in REF["dirs"].items() for c in v["cases"]]
NS_DIRS = {"nccl4"}
"""Nanosecond traces: HTA rounds every event to whole microseconds (start up, end down:
``hta/common/trace_parser.py::round_down_time_stamps``), gpulens keeps the nanoseconds."""
NS_SLACK_US = 2.0


@pytest.mark.parametrize(("name", "case"), CASES, ids=[
    f"{d}-last{int(c['include_last_profiler_step'])}-k{c.get('num_candidates', 0)}" for d, c in CASES])
def test_equals_hta(jobs: dict[str, RanksReport], name: str, case: dict[str, Any]) -> None:
    k = case.get("num_candidates", 2)
    la = late_arrival(_arrivals(jobs[name]), candidates=k, include_last_step=case["include_last_profiler_step"])
    error = case.get("error", "")
    if error.startswith("ValueError") and "available profiler steps=[]" in error:
        assert la.why == NoLateArrival(NoLateArrivalKind.NO_STEPS) and la.stragglers == ()
        return
    assert la.why is None and la.note == ""
    rows = case["rows"]
    assert {r["kernel"] for r in rows} == {la.kernel}
    assert {r["stream"] for r in rows} == {la.stream}
    assert la.iterations == tuple(sorted({r["iteration"] for r in rows}))
    slack = NS_SLACK_US if name in NS_DIRS else 1e-9 * la.mean_iter_us  # us
    assert la.mean_iter_us == pytest.approx(rows[0]["mean_iter_us"], abs=slack)
    got = {r.rank: r for r in la.ranks}
    assert sorted(got) == sorted({r["rank"] for r in rows})
    for r in rows:
        start = got[r["rank"]].starts[la.iterations.index(r["iteration"])]
        assert start == pytest.approx(r["normalized_start"], abs=2 * slack / la.mean_iter_us)
    if error:  # HTA indexes the k-th largest of fewer than k values; gpulens takes them all
        assert error.startswith("IndexError") and k > len(got)
        assert sorted(la.stragglers) == sorted(got)
        return
    counts = {int(rk): n for rk, n in case["counts"].items()}
    assert {rk: r.flagged for rk, r in got.items()} == counts
    hta = case["stragglers"]
    assert len(la.stragglers) == len(hta) == min(k, len(counts))
    # HTA orders ties by numpy's (unstable) quicksort; gpulens by rank. The counts picked must agree,
    # and so must every rank above the cut.
    assert sorted(counts[r] for r in la.stragglers) == sorted(counts[r] for r in hta)
    cut = min(counts[r] for r in hta)
    assert {r for r in la.stragglers if counts[r] > cut} == {r for r in hta if counts[r] > cut}


def test_lateness_is_the_shift_the_job_was_built_with(jobs: dict[str, RanksReport]) -> None:
    """Ranks 0, 2 and 4 are copies of one rank moved by 0, 30 and 0 ms; rank 4's kernels by 80 ms more in step 552."""
    la = late_arrival(_arrivals(jobs["job6"]))
    by = {r.rank: r for r in la.ranks}
    assert by[2].late_ms == pytest.approx((late_ranks.SHIFT_US[2] / 1000.0,) * 2)
    assert by[0].late_ms == pytest.approx((0.0, 0.0))
    assert by[4].late_ms == pytest.approx((0.0, late_ranks.LATE_552_US / 1000.0))
    assert la.stragglers == (5, 3)


def _doc_keys(obj: str) -> list[str]:
    keys, current = [], None
    for line in DOC.read_text().splitlines():
        m = re.match(r"^### `(\w+)`", line)
        if m:
            current = m.group(1)
            continue
        m = re.match(r"^\| `(\w+)` \|", line)
        if m and current == obj:
            keys.append(m.group(1))
    return keys


def test_json_and_text(jobs: dict[str, RanksReport]) -> None:
    d = ranks_json(jobs["job6"])
    assert d["schema_minor"] >= 1
    la = d["late_arrival"]
    assert sorted(la) == sorted(_doc_keys("late_arrival"))
    for r in la["ranks"]:
        assert sorted(r) == sorted(_doc_keys("late_rank"))
    assert la["stragglers"] == [5, 3] and la["stream"] == 84
    none = ranks_json(jobs["ddp_gloo"])["late_arrival"]
    assert none["note"] and none["kernel"] is None and none["stragglers"] == []
    text = ranks_text(jobs["job6"])
    assert "potential stragglers: rank 5, rank 3" in text and "+30.00 +30.00" in text
    assert "late arrival (HTA's get_potential_stragglers, 2 candidates): n/a: no ProfilerStep" in ranks_text(
        jobs["ddp_gloo"])


def test_rank_summary_stays_small(jobs: dict[str, RanksReport]) -> None:
    """Only the NCCL kernels launched in a step cross from the worker: 10 per sampled rank, of 1,154 kernels."""
    for r in jobs["sampled"].ranks:
        assert r.arrival is not None
        assert len(r.arrival.kernels) == 10 and len(r.arrival.steps) == 2
        assert all(k.name.startswith("ncclKernel") for k in r.arrival.kernels)


def test_no_kernels_long_enough(tmp_path: Path) -> None:
    from gpulens.analysis.trace.arrival import CommKernel, IterRange, StepSpan

    steps = (StepSpan(1, 0.0, 100.0),)
    short = RankArrival(steps, (IterRange(1, 0.0, 100.0),), (CommKernel(7, 1, "ncclKernel_x", 10.0, 0.5),))
    la = late_arrival([(0, short), (1, short)])
    assert la.why == NoLateArrival(NoLateArrivalKind.NO_LONG_KERNEL) and la.stragglers == ()
    single = RankArrival(steps, (IterRange(1, 0.0, 100.0),), (CommKernel(7, 1, "ncclKernel_x", 10.0, 5.0),))
    assert late_arrival([(0, single)]).why == NoLateArrival(NoLateArrivalKind.NO_SPREAD)


def test_overlapping_steps_are_placed_like_hta_and_bounded() -> None:
    """An event in two overlapping spans belongs to the later one in the file (HTA's loop keeps the last match);
    a hostile trace with very many overlapping spans is refused with a reason, not scanned for minutes."""
    from gpulens.analysis.trace.arrival import StepSpan, locator, rank_arrival
    from gpulens.analysis.trace.rank_reduce import RankFold

    steps = (StepSpan(1, 0.0, 100.0), StepSpan(2, 50.0, 100.0), StepSpan(3, 10.0, 20.0))
    find = locator(steps)
    assert [find(t) for t in (5.0, 15.0, 60.0, 149.0, 150.0)] == [0, 2, 1, 1, -1]
    fold = RankFold()
    fold.profiler = [(f"ProfilerStep#{i}", float(i), 1e6) for i in range(3000)]
    fold.cpu_starts.extend(float(i) for i in range(10_000))
    fold.cpu_ends.extend(float(i) + 1 for i in range(10_000))
    out = rank_arrival(fold)
    assert out.refused == NotPlaced(NotPlacedKind.SPANS_OVERLAP, spans=3000, events=10_000) and out.kernels == ()
    la = late_arrival([(0, out), (1, out)])
    assert la.why == NoLateArrival(NoLateArrivalKind.RANK_NOT_PLACED, rank=0, placed=out.refused)
    assert la.note == ("rank 0: 3000 ProfilerStep#N spans that overlap: too many to place 10000 events in them "
                       "(HTA scans every span for every event)")  # pinned on purpose: the one late-arrival sentence


def test_steps_without_time_say_so() -> None:
    from gpulens.analysis.trace.arrival import StepSpan

    empty = RankArrival((StepSpan(1, 5.0, 0.0),), (), ())
    assert late_arrival([(0, empty), (1, empty)]).why == NoLateArrival(NoLateArrivalKind.NO_TIME_SPAN)
