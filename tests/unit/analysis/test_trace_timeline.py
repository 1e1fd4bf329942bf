"""analysis/trace/timeline.py: lanes titled by thread name + tid, ranks side by side, folding, clamping, ticks."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import pytest

from gpulens.analysis.trace.load import load_trace
from gpulens.analysis.trace.timeline import (
    axis_unit,
    build_rank_timeline,
    build_timeline,
    clamp_view,
    fold_rows,
    lane_title,
    ticks,
)
from tests.paths import DATA

TRACES = DATA / "traces"


@dataclass
class Ev:
    """The fields of a loaded event the timeline reads."""

    ph: str
    name: str
    pid: Any
    tid: Any
    ts: float = 0.0
    dur: float = 0.0
    cat: str = "cpu_op"
    args: Any = None


def thread(pid: int, tid: int, name: str) -> Ev:
    return Ev("M", "thread_name", pid, tid, args={"name": name})


def test_lanes_are_thread_name_and_tid_never_twice_the_same() -> None:
    """Two threads Kineto names alike (and a tid reused by another process) get distinct titles."""
    events = [
        thread(10, 1, "thread 1 (pt_main_thread)"), thread(10, 2, "thread 2 (pt_main_thread)"),
        thread(20, 1, "thread 1 (pt_main_thread)"),
        Ev("X", "a", 10, 1, 0, 5), Ev("X", "b", 10, 2, 1, 5), Ev("X", "c", 20, 1, 2, 5),
    ]
    tl = build_timeline(events)
    assert tl.lanes == ["pt_main_thread 1 [10]", "pt_main_thread 2 [10]", "pt_main_thread 1 [20]"]
    assert len(set(tl.lanes)) == len(tl.lanes)
    # One process: no pid needed; the same name on two tids still differs by tid.
    one = build_timeline([thread(10, 1, "worker"), thread(10, 2, "worker"), Ev("X", "a", 10, 1, 0, 1),
                          Ev("X", "b", 10, 2, 0, 1)])
    assert one.lanes == ["worker 1", "worker 2"]


def test_identical_keys_from_odd_traces_are_numbered() -> None:
    events = [Ev("X", "a", "p", "t", 0, 1), Ev("X", "b", "p", "t ", 0, 1)]  # str tids that print alike
    tl = build_timeline(events)
    assert len(set(tl.lanes)) == 2


def test_real_trace_lane_titles() -> None:
    tl = build_timeline(load_trace(TRACES / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz", keep_args=True).events)
    assert "pt_main_thread 1102" in tl.lanes and "pt_autograd_0 1262" in tl.lanes
    assert "GPU 0 stream 7" in tl.lanes
    assert len(set(tl.lanes)) == len(tl.lanes)
    gpu = build_timeline(load_trace(TRACES / "benchmark_result_2869224_1695835535_trace.json.gz").events)
    streams = [t for t in gpu.lanes if t.startswith("GPU")]
    assert streams[:2] == ["GPU 0 stream 7", "GPU 0 stream 20"]  # numeric order, after the CPU lanes
    assert gpu.lanes.index(streams[0]) > 0


@pytest.mark.parametrize(("tname", "gpu", "want"), [
    ("thread 7 (pt_main_thread)", False, "pt_main_thread 7"),
    ("", False, "thread 7"),
    (None, False, "thread 7"),
    ("stream 7 ", True, "GPU 0 stream 7"),
    (None, True, "GPU 0 stream 7"),
])
def test_lane_title(tname: str | None, gpu: bool, want: str) -> None:
    assert lane_title(0, 7, tname.strip() if tname else tname, gpu) == want


def nested(depth: int) -> list[Ev]:
    """One stack ``depth`` calls deep on one thread."""
    return [Ev("X", f"f{d}", 1, 1, float(d), 100.0 - 2 * d) for d in range(depth)]


def test_deep_stacks_keep_their_rows_and_fold_with_a_count() -> None:
    tl = build_timeline(nested(20))
    assert [r.depth for r in tl.rows] == list(range(20))  # nothing folded away by default
    folded = fold_rows(tl.rows, 8)
    assert len(folded) == 8 and folded[-1].folded == 12  # the eighth row holds depths 7..19
    assert {s.name for s in folded[-1].spans} == {f"f{d}" for d in range(7, 20)}
    assert folded[-1].starts == sorted(folded[-1].starts)
    assert fold_rows(tl.rows, 0) is tl.rows
    capped = build_timeline(nested(20), max_depth=5)
    assert len(capped.rows) == 5 and capped.rows[-1].folded == 15


def test_clamp_view_never_leaves_the_trace() -> None:
    assert clamp_view(-50, 10, 0, 100) == (0, 60)  # panned before the start: shifted, width kept
    assert clamp_view(90, 130, 0, 100) == (60, 100)  # after the end
    assert clamp_view(-500, 500, 0, 100) == (0, 100)  # zoomed out past the trace: the whole trace
    assert clamp_view(50, 50, 0, 100, min_width_us=1.0) == (50, 51)
    assert clamp_view(5, 6, 5, 5) == (5, 6)  # an empty trace still has a 1 us view


def test_one_unit_per_axis() -> None:
    assert axis_unit(500) == ("us", 1.0) and axis_unit(5_000) == ("ms", 1e3) and axis_unit(5e6) == ("s", 1e6)
    unit, marks = ticks(1000.0, 6000.0, 1000.0, 100)
    assert unit == "ms"
    labels = [label for _, label in marks]
    values = [float(lb) for lb in labels]
    assert values[0] == 0 and 4.5 <= values[-1] <= 5  # 1-2-5 steps over 0..5 ms
    assert {round(b - a, 6) for a, b in itertools.pairwise(values)} == {0.5}
    assert all("us" not in lb and "ms" not in lb for lb in labels)  # the unit is said once
    cols = [c for c, _ in marks]
    assert cols == sorted(cols) and cols[0] == 0 and all(b - a >= 10 for a, b in itertools.pairwise(cols))
    # Tick values are times since the origin: a view starting 2.5 ms in starts its ticks there.
    _, later = ticks(3500.0, 4500.0, 1000.0, 100)
    assert float(later[0][1]) >= 2.5


def test_ranks_side_by_side_on_one_axis() -> None:
    r0 = [thread(5, 5, "thread 5 (pt_main_thread)"), Ev("X", "step", 5, 5, 1000, 50), Ev("X", "k", 0, 7, 1010, 5, "kernel")]
    r1 = [thread(9, 9, "thread 9 (pt_main_thread)"), Ev("X", "step", 9, 9, 1002, 60), Ev("X", "k", 0, 7, 1012, 5, "kernel")]
    tl = build_rank_timeline([("rank 0", r0), ("rank 1", r1)])
    assert tl.lanes == ["rank 0 / pt_main_thread 5", "rank 0 / GPU 0 stream 7",
                        "rank 1 / pt_main_thread 9", "rank 1 / GPU 0 stream 7"]
    assert tl.start_us == 1000 and tl.end_us == 1062 and tl.note == ""
    last = tl.rows[-1].spans[0]
    assert tl.details(last)["name"] == "k" and tl.events[last.index] is r1[2]  # indices reach each rank's events


def test_ranks_whose_clocks_never_overlap_are_drawn_from_their_own_start() -> None:
    r0 = [Ev("X", "a", 1, 1, 1000, 10)]
    r1 = [Ev("X", "b", 2, 2, 9_000_000, 10)]
    tl = build_rank_timeline([("rank 0", r0), ("rank 1", r1)])
    assert "own start" in tl.note
    assert tl.start_us == 0 and tl.end_us == 10
