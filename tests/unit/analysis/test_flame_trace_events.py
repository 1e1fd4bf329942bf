"""Chrome trace events (B/E/X, samples) read as speedscope reads them: its 30 sample traces, against its results.

tests/data/speedscope_trace_event/ holds speedscope's sample traces and
``expected.json``: speedscope's own import of each (from its jest snapshot,
and for the one file the snapshot lacks, from running its importer); see
SOURCES.md there. Frames compare by what gpulens reads from their text
(name, file, line): Hermes frames carry their url and line in the text.
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

import pytest

from gpulens.analysis.flame.errors import FlameFormatError, FlameProblem
from gpulens.analysis.flame.group import ProfileGroup
from gpulens.analysis.flame.importers import group_from_bytes, load_group
from gpulens.analysis.flame.jsvalues import number_text, stringify, to_number
from gpulens.analysis.flame.labels import parse_frame
from gpulens.analysis.flame.model import Profile
from gpulens.core.limits import InputLimits
from tests.paths import DATA

SPEEDSCOPE = DATA / "speedscope_trace_event"
EXPECTED: dict[str, Any] = json.loads((SPEEDSCOPE / "expected.json").read_text(encoding="utf-8"))


def _observed(profile: Profile) -> tuple[dict[str, float], dict[str, tuple[float, float]], dict[str, tuple[Any, Any]]]:
    """Stacks (names joined by ';', µs), self and total µs per frame name, and (file, line) per name."""
    stacks: dict[str, float] = {}
    self_us: dict[str, float] = {}
    total_us: dict[str, float] = {}
    where: dict[str, tuple[Any, Any]] = {}
    for frames, seconds in profile.stacks():
        infos = [parse_frame(f) for f in frames]
        names = [i.name for i in infos]
        us = seconds * 1e6
        stacks[";".join(names)] = stacks.get(";".join(names), 0.0) + us
        self_us[names[-1]] = self_us.get(names[-1], 0.0) + us
        for name in set(names):  # a recursive frame counts once per stack, as speedscope's totals do
            total_us[name] = total_us.get(name, 0.0) + us
        for info in infos:
            where[info.name] = (info.file, info.line)
    return stacks, {n: (self_us.get(n, 0.0), total_us[n]) for n in total_us}, where


def _bytes(events: Any) -> bytes:
    return json.dumps(events).encode()


def test_every_sample_trace_has_an_expectation() -> None:
    files = {p.name for p in SPEEDSCOPE.glob("*.json")} - {"expected.json"}
    assert files == set(EXPECTED) and len(files) == 30
    assert sum(e["from"] == "snapshot" for e in EXPECTED.values()) == 29


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_sample_trace_equals_speedscope_import(name: str) -> None:
    group = load_group(str(SPEEDSCOPE / name))
    want = EXPECTED[name]["profiles"]
    assert group.names == tuple(p["name"] for p in want)
    for i, expected in enumerate(want):
        profile = group.pick(i)
        assert profile.unit == "seconds"
        stacks, frames, where = _observed(profile)
        # Stacks: the snapshot prints each weight with 2 decimals; tol is the rounding of the lines summed.
        assert stacks.keys() == expected["stacks"].keys()
        for stack, (us, tol) in expected["stacks"].items():
            assert stacks[stack] == pytest.approx(us, abs=tol + 1e-6), stack
        # Frames: exact self and total weights; a frame that never had time is not in the graph.
        timed = [f for f in expected["frames"] if f["total_us"] > 0]
        assert len({f["name"] for f in timed}) == len(timed)
        assert frames.keys() == {f["name"] for f in timed}
        for f in timed:
            assert frames[f["name"]] == pytest.approx((f["self_us"], f["total_us"]), abs=1e-6), f["name"]
            assert where[f["name"]] == (f["file"], f["line"])
        # Time with no frame open (speedscope's empty stack) is not counted: the total is the frames' self time.
        busy = sum(f["self_us"] for f in expected["frames"])
        assert profile.total * 1e6 == pytest.approx(busy, abs=1e-6)
        assert profile.node_self[0] == 0


def test_issue_simple_trace_nests_x_inside_b_e() -> None:
    """simple.json spans 14 µs: gamma (X) and epsilon (X with only tdur) under alpha;beta (B/E)."""
    group = load_group(str(SPEEDSCOPE / "simple.json"))
    profile = group.pick(0)
    assert profile.total == pytest.approx(14e-6)
    stacks = {tuple(parse_frame(f).name for f in frames): w for frames, w in profile.stacks()}
    assert stacks[("alpha", "beta", 'gamma {"detail":"foobar"}')] == pytest.approx(5e-6)
    assert stacks[("alpha", "beta", "epsilon")] == pytest.approx(4e-6)
    assert all(frames[:2] == ("alpha", "beta") for frames in stacks if len(frames) > 2)


def _nested(rng: random.Random, lo: int, hi: int, depth: int, out: list[tuple[int, int]]) -> None:
    """Intervals strictly inside (lo, hi), not overlapping, each with its own children."""
    t = lo + 1
    while depth < 6 and t + 2 < hi and ((depth == 1 and t == lo + 1) or rng.random() < 0.9):
        a = rng.randint(t, min(hi - 2, t + (hi - lo) // 4))
        b = rng.randint(a + 1, min(hi - 1, a + (hi - lo) // 2))
        out.append((a, b))
        _nested(rng, a, b, depth + 1, out)
        t = b + rng.randint(0, 3)


@pytest.mark.parametrize("seed", range(20))
def test_mixed_b_e_and_x_on_one_thread_count_once(seed: int) -> None:
    """Like Chrome DevTools traces: one thread's nested intervals, each written as B/E or X, in shuffled order.

    Independent reference: a stack's self time is its interval minus its children, from the intervals.
    """
    rng = random.Random(seed)
    spans: list[tuple[int, int]] = [(0, 1000)]
    _nested(rng, 0, 1000, 1, spans)
    events: list[dict[str, Any]] = []
    for k, (a, b) in enumerate(spans):
        if rng.random() < 0.5:
            events.append({"ph": "X", "name": f"f{k}", "ts": a, "dur": b - a, "pid": 7, "tid": 7})
        else:
            events.append({"ph": "B", "name": f"f{k}", "ts": a, "pid": 7, "tid": 7})
            events.append({"ph": "E", "name": f"f{k}", "ts": b, "pid": 7, "tid": 7})
    rng.shuffle(events)
    want: dict[tuple[str, ...], float] = {}
    for a, b in spans:
        path = tuple(f"f{j}" for j, (c, d) in enumerate(spans) if c <= a and b <= d)
        inner = sum(d - c for c, d in spans if a < c and d < b
                    and not any(a < e < c and d < f < b for e, f in spans))
        if b - a - inner:
            want[path] = (b - a - inner) * 1e-6
    profile = group_from_bytes(_bytes(events), "mixed.json").pick(0)
    got = dict((tuple(frames), w) for frames, w in profile.stacks())
    assert got.keys() == want.keys()
    assert all(got[k] == pytest.approx(want[k]) for k in want)
    assert profile.total == pytest.approx(1000e-6)  # the outer interval, counted once


def test_same_process_and_thread_names_in_two_pids_get_two_titles() -> None:
    """Issue item 12: the pid is in every profile name."""
    events = [{"ph": "M", "name": "process_name", "pid": p, "tid": 1, "args": {"name": "python"}} for p in (10, 20)]
    events += [{"ph": "M", "name": "thread_name", "pid": p, "tid": 1, "args": {"name": "MainThread"}} for p in (10, 20)]
    events += [{"ph": "X", "name": "work", "pid": p, "tid": 1, "ts": 0, "dur": 5} for p in (20, 10)]
    group = group_from_bytes(_bytes(events), "two.json")
    assert group.names == ("python (pid 10), MainThread (tid 1)", "python (pid 20), MainThread (tid 1)")
    assert "pid 20" in group.pick(1).title


def test_cut_off_array_is_read_and_says_so() -> None:
    group = load_group(str(SPEEDSCOPE / "simple-partial-trailing-comma.json"))
    assert "not closed properly" in group.title
    assert group.pick(0).total == pytest.approx(14e-6)
    with pytest.raises(FlameFormatError) as info:
        group_from_bytes(b'{"traceEvents": [{"ph": "B", "ts": 0},', "cut.json")  # only bare arrays are closed
    assert info.value.problem is FlameProblem.NOT_JSON
    with pytest.raises(FlameFormatError) as info:
        group_from_bytes(b'[{"ph": "B", "ts": 0', "cut.json")  # cut inside an event: not just the ']'
    assert info.value.problem is FlameProblem.NOT_JSON
    closed = group_from_bytes(b'[{"ph": "X", "ts": 0, "dur": 2, "name": "a"}],\n', "comma.json")
    assert closed.pick(0).total == pytest.approx(2e-6)


def test_many_ends_at_one_timestamp_stay_fast() -> None:
    """Ends listed outermost first at one ts: each must be matched with the innermost open frame.

    Scanning the ends at that timestamp for each one (speedscope) is quadratic; the index is not.
    """
    n = 20_000
    events = [{"ph": "B", "name": f"f{i}", "ts": 0, "pid": 1, "tid": 1} for i in range(n)]
    events += [{"ph": "E", "name": f"f{i}", "ts": 1, "pid": 1, "tid": 1} for i in range(n)]
    start = time.perf_counter()
    profile = group_from_bytes(_bytes(events), "deep.json").pick(0)
    assert time.perf_counter() - start < 20
    (frames, weight), = list(profile.stacks())
    assert frames == [f"f{i}" for i in range(n)] and weight == pytest.approx(1e-6)


def test_stack_frames_past_max_events_are_refused() -> None:
    """Deep stacks that each had time: the frames laid out are bounded like every other record."""
    events = [{"ph": "B", "name": f"f{i}", "ts": i, "pid": 1, "tid": 1} for i in range(60)]
    events.append({"ph": "E", "name": "f59", "ts": 60, "pid": 1, "tid": 1})
    group = group_from_bytes(_bytes(events), "deep.json", limits=InputLimits(max_bytes=1 << 20, max_events=1000))
    with pytest.raises(FlameFormatError) as info:
        group.pick(0)
    assert info.value.problem is FlameProblem.TOO_LARGE


def test_bad_timestamps_are_malformed_events_named_by_index() -> None:
    for events, at in (([{"ph": "B", "ts": 0}, {"ph": "X", "ts": 1, "dur": -3}], "traceEvents[1]"),
                       ([{"ph": "E", "ts": "soon"}], "traceEvents[0]")):
        with pytest.raises(FlameFormatError) as info:
            group_from_bytes(_bytes(events), "bad.json")
        assert (info.value.problem, info.value.at) == (FlameProblem.MALFORMED, at)


def _samples_doc(samples: list[dict[str, Any]], frames: dict[str, Any]) -> bytes:
    return _bytes({"traceEvents": [{"ph": "M", "name": "thread_name", "pid": 3, "tid": "4", "args": {"name": "js"}}],
                   "samples": samples, "stackFrames": frames})


def test_samples_out_of_order_are_sorted_and_broken_frames_refused() -> None:
    frames = {"1": {"name": "root"}, "2": {"name": "leaf", "parent": 1}}
    samples = [{"pid": 3, "tid": "4", "ts": "30", "sf": 2}, {"pid": 3, "tid": 4, "ts": 10, "sf": "1"},
               {"pid": 3, "tid": 4, "ts": "40", "sf": 1}]
    group: ProfileGroup = group_from_bytes(_samples_doc(samples, frames), "s.json")
    assert group.names == ("js (pid 3, tid 4)",)
    assert {tuple(f): w for f, w in group.pick(0).stacks()} == {("root",): pytest.approx(20e-6),
                                                                ("root", "leaf"): pytest.approx(10e-6)}
    with pytest.raises(FlameFormatError) as missing:  # a sample on frame 9, which is not there
        group_from_bytes(_samples_doc([*samples, {"pid": 3, "tid": 4, "ts": 50, "sf": 9}], frames), "s.json").pick(0)
    assert (missing.value.problem, missing.value.at) == (FlameProblem.BAD_REFERENCE, "stackFrames")
    loop = {"1": {"name": "a", "parent": 2}, "2": {"name": "b", "parent": 1}}
    with pytest.raises(FlameFormatError) as looped:
        group_from_bytes(_samples_doc(samples, loop), "s.json").pick(0)
    assert (looped.value.problem, looped.value.at) == (FlameProblem.BAD_REFERENCE, "stackFrames['1']")  # its parents loop


def test_pyspy_frames_keep_file_and_line() -> None:
    group = load_group(str(DATA / "traces" / "pyspy-chrometrace.json"))
    assert group.names == ("pid 24964, tid 139925229665152",)
    infos = [parse_frame(f) for frames, _ in group.pick(0).stacks() for f in frames]
    assert infos and all(i.file and i.line for i in infos)


@pytest.mark.parametrize(
    ("value", "text"),
    [(1.0, "1"), (1e21, "1e+21"), (1e-7, "1e-7"), (0.000001, "0.000001"), (12345678901234567890, "12345678901234567000"),
     (-2.5e-9, "-2.5e-9"), (1e16, "10000000000000000"), (0.1 + 0.2, "0.30000000000000004"),
     (2.0**60, "1152921504606847000"), (9314514151246416.0, "9314514151246416"), (1e-5, "0.00001"),
     (-1.5e-300, "-1.5e-300")],
)
def test_numbers_print_as_javascript_does(value: float, text: str) -> None:
    """Checked against node's String(); frame names built from args use the same text."""
    assert number_text(value) == text


def test_args_print_as_json_stringify() -> None:
    # Checked against node: integer-like keys first, in numeric order; no spaces; non-ASCII kept.
    value = {"b": 1, "2": [1.0, None, True], "1": {"z": "é\n", "010": 0, "0": 1}, "4294967295": 1}
    assert stringify(value) == '{"1":{"0":1,"z":"é\\n","010":0},"2":[1,null,true],"b":1,"4294967295":1}'
    assert to_number(" 0x10 ") == 16 and to_number("") == 0 and to_number(None) == 0


def test_args_nested_as_deep_as_json_allows_still_name_the_frame() -> None:
    depth = 900
    data = (b'[{"ph": "X", "ts": 0, "dur": 3, "name": "deep", "args": {"a": ' + b"[" * depth + b"1.0" + b"]" * depth
            + b"}}]")
    (frames, weight), = list(group_from_bytes(data, "deep.json").pick(0).stacks())
    assert frames == ['deep {"a":' + "[" * depth + "1" + "]" * depth + "}"] and weight == pytest.approx(3e-6)
