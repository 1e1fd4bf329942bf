"""Every profile format gpulens reads, and hostile or malformed input."""

from __future__ import annotations

import gzip
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from gpulens.analysis.flame.errors import FlameError, FlameFormatError, FlameProblem
from gpulens.analysis.flame.importers import group_from_bytes, load_profile
from gpulens.analysis.flame.kineto import kineto_memory, kineto_time
from gpulens.analysis.flame.query import function_table
from gpulens.cli import main
from tests.paths import DATA

STACKS = DATA / "stacks"
SNAPSHOT = DATA / "memory_snapshots" / "mini_snapshot.pickle"

# Exactly what `py-spy record --format raw` wrote for a small program here.
PYSPY_RAW = b"""<module> (hot.py:10);K.run (hot.py:9);hot (hot.py:4) 97
<module> (hot.py:10);K.run (hot.py:8) 2
<module> (hot.py:10);K.run (hot.py:9);hot (hot.py:3) 1
"""


def test_pyspy_raw_output() -> None:
    profile = group_from_bytes(PYSPY_RAW, "raw.txt").pick()
    assert profile.total == 100
    rows = {r.name: r for r in function_table(profile)}
    assert rows["hot"].self_value == 98  # lines 3 and 4 of one function merge
    assert rows["K.run"].total_value == 100 and rows["K.run"].self_value == 2
    labels = {profile.label(n) for n in range(1, profile.n_nodes)}
    assert {"<module>", "K > run", "hot"} <= labels
    node = next(n for n in range(1, profile.n_nodes) if profile.label(n) == "hot")
    assert profile.node_info(node).file == "hot.py" and profile.node_info(node).line in (3, 4)


def test_speedscope_sampled() -> None:
    doc = json.loads((STACKS / "simple-sampled.speedscope.json").read_text())
    prof = doc["profiles"][0]
    profile = load_profile(str(STACKS / "simple-sampled.speedscope.json"))
    assert profile.unit == "seconds"
    assert profile.total == sum(prof["weights"])
    names = [f["name"] for f in doc["shared"]["frames"]]
    leaf_c = sum(w for s, w in zip(prof["samples"], prof["weights"], strict=True) if names[s[-1]] == "c")
    assert {r.name: r.self_value for r in function_table(profile)}["c"] == leaf_c


def test_speedscope_evented() -> None:
    doc = json.loads((STACKS / "simple.speedscope.json").read_text())
    prof = doc["profiles"][0]
    # Independent: time with a non-empty stack between consecutive events.
    depth, last, busy = 0, prof["startValue"], 0
    for ev in prof["events"]:
        if depth:
            busy += ev["at"] - last
        depth += 1 if ev["type"] == "O" else -1
        last = ev["at"]
    profile = load_profile(str(STACKS / "simple.speedscope.json"))
    assert profile.total == busy


def test_speedscope_active_profile_index() -> None:
    doc = json.loads((STACKS / "two-sampled.speedscope.json").read_text())
    active = doc["profiles"][doc["activeProfileIndex"]]
    profile = load_profile(str(STACKS / "two-sampled.speedscope.json"))
    assert profile.total == sum(active["weights"])
    assert active["name"] in profile.title


def _kineto_doc() -> dict[str, object]:
    def x(name: str, ts: int, dur: int, cat: str = "python_function") -> dict[str, object]:
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}

    def mem(ts: int, n: int, dev: int = 1) -> dict[str, object]:
        return {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts,
                "args": {"Device Type": dev, "Device Id": 0, "Bytes": n, "Addr": 1}}

    return {"traceEvents": [
        x("train.py(10): main", 0, 100),
        x("train.py(20): step", 10, 60),
        x("aten::mm", 15, 20, "cpu_op"),
        x("model.py(5): Model.forward", 40, 25),
        x("train.py(30): save", 80, 10),
        mem(16, 4096), mem(45, 1024), mem(50, -1024), mem(85, 512), mem(86, 64, dev=0),
    ]}


def test_kineto_python_function_time() -> None:
    profile = kineto_time(_kineto_doc())
    assert profile.unit == "seconds"
    assert profile.total == pytest.approx(100e-6)
    rows = {r.name: r for r in function_table(profile)}
    assert rows["main"].self_value == pytest.approx(30e-6)  # 100 - 60 - 10
    assert rows["step"].self_value == pytest.approx(35e-6)  # 60 - 25
    assert rows["Model.forward"].label == "Model > forward"


def test_kineto_memory_events_by_stack() -> None:
    profile = kineto_memory(_kineto_doc())
    assert profile.unit == "bytes"
    assert profile.total == 4096 + 1024 + 512  # CUDA allocations only; frees ignored
    stacks = {tuple(f): v for f, v in profile.stacks()}
    assert stacks[("train.py(10): main", "train.py(20): step", "aten::mm")] == 4096
    assert stacks[("train.py(10): main", "train.py(20): step", "model.py(5): Model.forward")] == 1024
    assert kineto_memory(_kineto_doc(), device_type=0).total == 64


@pytest.mark.torch
def test_real_torch_trace_time_and_memory(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    prog = tmp_path / "prog.py"
    prog.write_text(
        "import sys, torch\n"
        "from torch.profiler import profile, ProfilerActivity\n"
        "def hot_alloc():\n"
        "    return [torch.ones(512, 512) for _ in range(4)]\n"
        "with profile(activities=[ProfilerActivity.CPU], with_stack=True, profile_memory=True) as p:\n"
        "    for _ in range(3):\n"
        "        hot_alloc()\n"
        "p.export_chrome_trace(sys.argv[1])\n"
    )
    trace = tmp_path / "trace.json"
    subprocess.run([sys.executable, str(prog), str(trace)], check=True, capture_output=True, timeout=120)
    mem = load_profile(str(trace), "memory")
    assert mem.unit == "bytes"
    assert mem.total >= 3 * 4 * 512 * 512 * 4
    hot = next(r for r in function_table(mem) if r.name == "hot_alloc")
    assert hot.total_value >= 3 * 4 * 512 * 512 * 4
    time = load_profile(str(trace), "time")
    assert time.unit == "seconds" and time.total > 0
    assert any(r.name == "hot_alloc" for r in function_table(time))


def test_memory_snapshot_views() -> None:
    profile = load_profile(str(SNAPSHOT), "allocated")
    assert profile.total > 0
    assert load_profile(str(SNAPSHOT), "live").total == 0
    assert "allocated" in load_profile(str(SNAPSHOT)).title  # auto: nothing live -> history


class _Boom:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, ("touch /tmp/gpulens-pwned-by-pickle",))


def test_restricted_unpickler_refuses_malicious_pickle(tmp_path: Path) -> None:
    marker = Path("/tmp/gpulens-pwned-by-pickle")
    marker.unlink(missing_ok=True)
    evil = tmp_path / "evil.pickle"
    evil.write_bytes(pickle.dumps({"segments": [], "x": _Boom()}, protocol=4))
    with pytest.raises(FlameFormatError) as info:
        load_profile(str(evil))
    assert info.value.problem is FlameProblem.UNSAFE
    assert not marker.exists()
    sneaky = tmp_path / "eval.pickle"
    sneaky.write_bytes(b"\x80\x04cbuiltins\neval\n(V1+1\ntR.")
    with pytest.raises(FlameFormatError, match=r"builtins\.eval") as info:  # names what it refused
        load_profile(str(sneaky))
    assert info.value.problem is FlameProblem.UNSAFE


@pytest.mark.parametrize(
    ("data", "problem", "at"),
    [
        (b"a;b 1\na;c 2\na;d\na;e\na;f\na;g\na;h\n", FlameProblem.MALFORMED, "line 3"),  # mostly bad: refused (a few are skipped)
        (b"a;b 1\na;c -2\na;d -1\na;e -3\n", FlameProblem.MALFORMED, "line 2"),
        (b"a;b 1\nfoo bar\nfoo baz\nqux quux\n", FlameProblem.MALFORMED, "line 2"),
        (b"a;b\x00 1\n", FlameProblem.UNSUPPORTED, None),  # the whole file: no place in it
        (b'{"shared": {"frames": [{"name": "a"}]}, "profiles": [{"type": "sampled", "samples": [[0, 3]], "weights": [1]}]}', FlameProblem.BAD_REFERENCE, "profiles[0].samples[0]"),
        (b'{"shared": {"frames": [{"nom": "a"}]}, "profiles": []}', FlameProblem.MALFORMED, "shared.frames[0]"),
        (b'{"shared": {"frames": [{"name": "a"}, {"name": "b"}]}, "profiles": [{"type": "evented", "events": [{"type": "O", "frame": 0, "at": 0}, {"type": "C", "frame": 1, "at": 1}]}]}', FlameProblem.MALFORMED, "profiles[0].events[1]"),
        (b'{"shared": {"frames": []}, "profiles": [{"type": "weird"}]}', FlameProblem.MALFORMED, "profiles[0].type"),
        (b'{"traceEvents": [{"ph": "X", "cat": "python_function", "name": "f", "ts": "x", "dur": 1}]}', FlameProblem.MALFORMED, "traceEvents[0]"),
        (b'{"traceEvents": []}', FlameProblem.NO_SAMPLES, None),
        (b'{"shared": {"frames": [{"name": "a"}]}, "profiles": [{"type": "sampled", "samples": [[0]], "weights": [Infinity]}]}', FlameProblem.MALFORMED, "profiles[0].samples[0]"),
        (b'{"traceEvents": [{"name": "[memory]", "ts": 1, "args": {"Bytes": "x"}}]}', FlameProblem.MALFORMED, "traceEvents[0].args"),
        (b'{"traceEvents": [', FlameProblem.NOT_JSON, "line 1 column 18"),  # where the decoder stopped
        (b"[" * 200_000 + b"]" * 200_000, FlameProblem.NOT_JSON, None),
        (b"\x80\x04\x95", FlameProblem.TRUNCATED, None),
        (b"\x80\x04\xff.", FlameProblem.UNSUPPORTED, "byte 2"),  # an opcode pickle does not have
        (pickle.dumps([1, 2, 3]), FlameProblem.UNSUPPORTED, None),
        (pickle.dumps({"segments": [{"blocks": [{"size": "big"}]}]}), FlameProblem.MALFORMED, "segments[0].blocks[0]"),
    ],
)
def test_malformed_input_is_refused_with_its_reason_and_place(data: bytes, problem: FlameProblem, at: str | None) -> None:
    with pytest.raises(FlameFormatError) as info:
        group_from_bytes(data, "bad-input").pick()
    assert (info.value.problem, info.value.at) == (problem, at)
    again = pickle.loads(pickle.dumps(info.value))  # a worker process's error reaches the parent whole
    assert (type(again), again.problem, again.at, str(again)) == (FlameFormatError, problem, at, str(info.value))


def test_broken_gzip_and_missing_file(tmp_path: Path) -> None:
    bad = tmp_path / "x.json.gz"
    bad.write_bytes(gzip.compress(b'{"traceEvents": []}')[:-12])
    with pytest.raises(FlameFormatError) as info:
        load_profile(str(bad))
    assert info.value.problem is FlameProblem.TRUNCATED
    with pytest.raises(FlameError) as missing:
        load_profile(str(tmp_path / "missing.txt"))
    assert type(missing.value) is FlameError  # not a format error: the file is not there


def test_gzipped_folded(tmp_path: Path) -> None:
    path = tmp_path / "p.txt.gz"
    path.write_bytes(gzip.compress(PYSPY_RAW))
    assert load_profile(str(path)).total == 100


def test_cli_top_json(capsys: pytest.CaptureFixture[str]) -> None:
    path = STACKS / "perf-java-faults-01-collapsed-all.txt"
    lines = [ln.rsplit(" ", 1) for ln in path.read_text().splitlines() if ln.strip()]
    leaf_self: dict[str, int] = {}
    for stack, count in lines:
        leaf = stack.split(";")[-1]
        leaf_self[leaf] = leaf_self.get(leaf, 0) + int(count)
    assert main(["flame", str(path), "--top", "3", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["unit"] == "samples"
    assert doc["total"] == sum(int(c) for _, c in lines)
    assert len(doc["frames"]) == 3
    expected = sorted(leaf_self.items(), key=lambda kv: -kv[1])[:3]
    assert [(f["name"], f["self"]) for f in doc["frames"]] == expected
    for f in doc["frames"]:
        assert f["total"] == sum(int(c) for s, c in lines if f["name"] in s.split(";"))


def test_cli_exports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = STACKS / "perf-vertx-stacks-01-collapsed-all.txt"
    folded, ss = tmp_path / "out.folded", tmp_path / "out.json"
    assert main(["flame", str(src), "--export-folded", str(folded), "--export-speedscope", str(ss)]) == 0
    original = load_profile(str(src))
    assert sorted(load_profile(str(folded)).stacks()) == sorted(original.stacks())
    assert sorted(load_profile(str(ss)).stacks()) == sorted(original.stacks())


def test_cli_bad_file_is_one_clear_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("a;b 1\nnot a count here x\nnor x\nnor y\n")  # one bad line alone is skipped
    assert main(["flame", str(bad), "--json"]) == 2
    err = capsys.readouterr().err
    assert "line 2" in err and "malformed profile" in err


def test_flame_collectors_do_not_import_textual() -> None:
    code = (
        "import sys, gpulens.analysis.flame.importers, gpulens.analysis.flame.pyspy, "
        "gpulens.analysis.flame.query, gpulens.analysis.flame.exporters; "
        "print(any(m.split('.')[0] in ('textual', 'rich') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_snapshot_live_blocks_by_frames(tmp_path: Path) -> None:
    """A hand-built snapshot in the _dump_snapshot layout, with live blocks (frames innermost first)."""
    def frames(*names: str) -> list[dict[str, object]]:
        return [{"name": n, "filename": "model.py", "line": i + 1} for i, n in enumerate(names)]

    doc = {
        "segments": [
            {"device": 0, "address": 0, "total_size": 1 << 30, "blocks": [
                {"address": 0, "size": 512 << 20, "requested_size": 512 << 20, "state": "active_allocated",
                 "frames": frames("GPUModelRunner._allocate_kv_cache_tensors", "GPUModelRunner.initialize_kv_cache", "<module>")},
                {"address": 1, "size": 256 << 20, "requested_size": 256 << 20, "state": "active_allocated",
                 "frames": frames("LlamaMLP.__init__", "<module>")},
                {"address": 2, "size": 128 << 20, "requested_size": 0, "state": "inactive", "frames": []},
            ]},
        ],
        "device_traces": [[]],
    }
    path = tmp_path / "live.pickle"
    path.write_bytes(pickle.dumps(doc, protocol=4))
    profile = load_profile(str(path))
    assert "live" in profile.title
    assert profile.total == (512 + 256) << 20
    rows = {r.name: r for r in function_table(profile)}
    assert rows["GPUModelRunner._allocate_kv_cache_tensors"].self_value == 512 << 20
    assert rows["GPUModelRunner._allocate_kv_cache_tensors"].label == "GPUModelRunner > _allocate_kv_cache_tensors"
    assert rows["LlamaMLP.__init__"].label == "LlamaMLP > __init__"
    assert rows["<module>"].total_value == (512 + 256) << 20 and rows["<module>"].self_value == 0
