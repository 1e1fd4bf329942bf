"""Chrome ``.cpuprofile`` / ``.heapprofile`` and Firefox/Gecko profiles read as speedscope reads them (issue 32 item 10).

The files are speedscope's own samples; ``expected.json`` is its import of each, taken from its
jest snapshots (tests/data/SOURCES.md).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpulens.analysis.flame.errors import FlameFormatError, FlameProblem
from gpulens.analysis.flame.foreign import UnsupportedJson, UnsupportedJsonKind, unsupported_json
from gpulens.analysis.flame.importers import group_from_bytes, load_group, load_profile
from gpulens.analysis.flame.labels import parse_frame
from gpulens.analysis.flame.model import Profile
from tests.paths import DATA

HERE = DATA / "speedscope_chrome_firefox"
EXPECTED: dict[str, Any] = json.loads((HERE / "expected.json").read_text(encoding="utf-8"))
SCALE = {"us": 1e6, "ms": 1e3, "bytes": 1.0}  # profile unit (seconds or bytes) -> the snapshot's unit


def _observed(profile: Profile, scale: float) -> tuple[dict[str, float], dict[str, float]]:
    """Stacks (names joined by ';') and self weight per frame name, in the snapshot's unit."""
    stacks: dict[str, float] = {}
    selfs: dict[str, float] = {}
    for frames, value in profile.stacks():
        names = [parse_frame(f).name for f in frames]
        stacks[";".join(names)] = stacks.get(";".join(names), 0.0) + value * scale
        selfs[names[-1]] = selfs.get(names[-1], 0.0) + value * scale
    return stacks, selfs


def test_every_sample_has_an_expectation() -> None:
    files = {p.name for p in HERE.iterdir()} - {"expected.json", "extract_expected.py", "SOURCES.md", "LICENSE"}
    assert files == set(EXPECTED) and len(files) == 6


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_sample_equals_speedscope_import(name: str) -> None:
    want = EXPECTED[name]
    profile = load_profile(str(HERE / name))
    assert profile.unit == ("bytes" if want["unit"] == "bytes" else "seconds")
    scale = SCALE[want["unit"]]
    stacks, selfs = _observed(profile, scale)
    assert stacks.keys() == want["stacks"].keys()
    for stack, (value, tol) in want["stacks"].items():
        assert stacks[stack] == pytest.approx(value, abs=tol + 1e-6), stack
    # speedscope's frames are keyed by name, file, line and column: sum their exact self weights by name
    exact: dict[str, float] = {}
    for frame in want["frames"]:
        exact[frame["name"]] = exact.get(frame["name"], 0.0) + frame["self"]
    for fname, value in exact.items():
        assert selfs.get(fname, 0.0) == pytest.approx(value, rel=1e-9, abs=1e-6), fname
    busy = sum(exact.values())
    assert profile.total * scale == pytest.approx(busy, rel=1e-9)


def test_cpuprofile_frames_keep_file_and_one_based_line() -> None:
    profile = load_profile(str(HERE / "firefox63-simple-firefox.json"))
    infos = {parse_frame(f).name: parse_frame(f) for f in profile.frames}
    assert infos["alpha"].file is not None and infos["alpha"].file.endswith("simple.js")
    doc = {"nodes": [{"id": 1, "callFrame": {"functionName": "(root)", "url": "", "lineNumber": -1}, "children": [2]},
                     {"id": 2, "callFrame": {"functionName": "work", "url": "app.js", "lineNumber": 9,
                                             "columnNumber": 4}}],
           "samples": [2, 1, 2], "timeDeltas": [0, 1000, 500], "startTime": 0, "endTime": 2000}
    prof = group_from_bytes(json.dumps(doc).encode(), "t.cpuprofile").pick()
    assert prof.frames == ("work (app.js:10)",) and prof.total == pytest.approx(1000e-6)


def test_cpuprofile_gc_sits_on_the_previous_stack() -> None:
    def node(i: int, name: str, kids: tuple[int, ...] = ()) -> dict[str, object]:
        return {"id": i, "callFrame": {"functionName": name, "url": ""}, "children": list(kids)}

    doc = {"nodes": [node(1, "(root)", (2, 4)), node(2, "main", (3,)), node(3, "leaf"), node(4, "(garbage collector)")],
           "samples": [3, 4, 3, 3], "timeDeltas": [0, 10, 20, 30]}
    prof = group_from_bytes(json.dumps(doc).encode(), "gc.cpuprofile").pick()
    got = {";".join(f): v * 1e6 for f, v in prof.stacks()}
    assert got == pytest.approx({"main;leaf": 10 + 30, "main;leaf;(garbage collector)": 20})


def test_gecko_threads_are_parts_and_main_is_active() -> None:
    group = load_group(str(HERE / "firefox59-simple-firefox.json"))
    assert len(group) == 1 and group.parts[0].name.startswith("GeckoMain")


def _processed(threads: list[dict[str, Any]]) -> bytes:
    return json.dumps({"meta": {"interval": 1.0, "preprocessedProfileVersion": 48, "version": 29},
                       "threads": threads, "shared": {"stringArray": ["main", "work", "app.js", "idle"]}}).encode()


def test_processed_firefox_profile() -> None:
    thread = {"name": "GeckoMain", "tid": 1, "pid": "7",
              "samples": {"stack": [1, 1, 0, None], "time": [0.0, 2.0, 5.0, 6.0], "length": 4},
              "stackTable": {"prefix": [None, 0], "frame": [0, 1], "length": 2},
              "frameTable": {"func": [0, 1], "line": [None, 12], "length": 2},
              "funcTable": {"name": [0, 1], "fileName": [None, 2], "length": 2}}
    other = {**thread, "name": "Worker", "tid": 2}
    group = group_from_bytes(_processed([other, thread]), "p.json")
    assert len(group) == 2 and group.active == 1
    got = {";".join(f): v * 1e3 for f, v in group.pick().stacks()}
    assert got == pytest.approx({"main;work (app.js:12)": 5.0, "main": 1.0})


def test_gecko_broken_stack_table_is_a_bad_reference() -> None:
    thread = {"name": "T", "samples": {"stack": [5], "time": [0.0]}, "stackTable": {"prefix": [None], "frame": [0]},
              "frameTable": {"func": [0]}, "funcTable": {"name": [0]}}
    with pytest.raises(FlameFormatError) as info:  # a sample on stack 5 of a table of 1
        group_from_bytes(_processed([thread]), "p.json").pick()
    assert (info.value.problem, info.value.at) == (FlameProblem.BAD_REFERENCE, "T: stackTable")  # thread T's table


@pytest.mark.parametrize(("doc", "kind"), [
    ({"version": 1, "recording": {"sampleStackTraces": []}}, UnsupportedJsonKind.SAFARI),
    ({"mode": "cpu", "frames": {}, "raw": [], "raw_timestamp_deltas": []}, UnsupportedJsonKind.STACKPROF),
    ({"program": "x", "rts_arguments": ["-pj"], "initial_capabilities": 0, "profile": {}}, UnsupportedJsonKind.GHC),
    ({"code": [], "functions": [], "ticks": []}, UnsupportedJsonKind.V8_LOG),
    ({"head": {"callFrame": {}}}, UnsupportedJsonKind.V8_TREE),
])
def test_known_json_formats_are_named_in_the_refusal(doc: dict[str, Any], kind: UnsupportedJsonKind) -> None:
    assert unsupported_json(doc) == UnsupportedJson(kind)
    with pytest.raises(FlameFormatError) as info:
        group_from_bytes(json.dumps(doc).encode(), "x.json")
    assert info.value.problem is FlameProblem.UNSUPPORTED
    assert str(info.value) == f"x.json: {UnsupportedJson(kind)}"  # the refusal names the format


def test_an_unsupported_json_refusal_says_what_it_is_and_how_to_convert_it() -> None:
    """Pinned on purpose: the one sentence of the JSON formats gpulens names but does not read."""
    assert str(UnsupportedJson(UnsupportedJsonKind.STACKPROF)) == (
        "stackprof (Ruby) profile: not supported (fold it with `stackprof --stackcollapse FILE > out.folded`, "
        "or open it in speedscope (https://www.speedscope.app) and export speedscope JSON, which gpulens reads)")
    assert unsupported_json({"profiles": []}) is None and unsupported_json([1]) is None


@pytest.mark.parametrize(("data", "named"), [
    (b"PERFILE2" + b"\x00" * 64, r"Linux perf.data \(binary\): not supported \(convert it with `perf script"),
    (b"memray\x00\x01" + b"\x00" * 64, "memray capture .*: not supported .*memray flamegraph"),
    (b"v8-version,11,3,244\nshared-library,\"node\"\n", r"V8 log \(`node --prof`\): not supported"),
    (b"PK\x03\x04" + b"\x00" * 26 + b"simple.trace/form.template", "Instruments .trace bundle .*: not supported"),
    (b"\tThu Oct 25 10:51 2018 Time and Allocation Profiling Report  (Final)\n", "GHC .prof text report: not supported"),
    (b"Running Time\tSelf (ms)\t\tSymbol Name\n", "Instruments deep copy: not supported"),
    (b"# callgrind format\nevents: Ir\n", "callgrind profile: not supported"),
])
def test_known_binary_and_text_formats_are_named(data: bytes, named: str) -> None:
    with pytest.raises(FlameFormatError, match=named) as info:  # the format's name is the point: kept
        group_from_bytes(data, "f")
    assert info.value.problem is FlameProblem.UNSUPPORTED
