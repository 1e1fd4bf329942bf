"""`gpulens analyze`: torch-equal Self CPU numbers, GPU fixtures, bad files."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpulens.analysis.trace.analyze import analyze_file
from gpulens.analysis.trace.errors import TraceFileError, TraceProblem
from gpulens.analysis.trace.load import load_trace
from gpulens.analysis.trace.report import summary_text
from gpulens.analysis.trace.summary import to_dict
from tests.paths import DATA

TRACES = DATA / "traces"


@pytest.fixture(scope="module")
def torch_profile(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, tuple[int, float, float]], float]:
    """Profile a small training loop in process; export; keep key_averages' numbers."""
    torch = pytest.importorskip("torch", reason="needs the PyTorch CPU build")
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(10):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    path = tmp_path_factory.mktemp("prof") / "trace.json"
    prof.export_chrome_trace(str(path))
    rows = {e.key: (e.count, e.self_cpu_time_total, e.cpu_time_total) for e in prof.key_averages()}
    total = sum(e.self_cpu_time_total for e in prof.key_averages())
    return path, rows, total


def test_self_cpu_matches_torch_key_averages(torch_profile: tuple[Path, dict[str, tuple[int, float, float]], float]) -> None:
    path, torch_rows, torch_total = torch_profile
    summary = analyze_file(path, top=1000)
    assert len(summary.processes) == 1
    proc = summary.processes[0]
    assert proc.self_cpu_total_us == pytest.approx(torch_total, rel=0.02)
    ours = {op.name: op for op in proc.cpu_ops}
    assert set(ours) == set(torch_rows)
    for name, (calls, self_us, total_us) in torch_rows.items():
        op = ours[name]
        assert op.calls == calls, name
        assert op.self_cpu_us == pytest.approx(self_us, rel=0.02, abs=1.0), name
        assert op.cpu_total_us == pytest.approx(total_us, rel=0.02, abs=1.0), name
    selfs = [op.self_cpu_us for op in proc.cpu_ops]
    assert selfs == sorted(selfs, reverse=True)


# Written out here rather than imported, so the check below is independent of the code it checks:
# the categories torch builds CPU FunctionEvents from, and torch's _filter_name list.
TREE_CATS = {"cpu_op", "user_annotation", "python_function", "overhead", "cuda_runtime", "cuda_driver", "Operator",
             "Runtime", "Driver"}
DROPPED = {"[memory]", "[OutOfMemory]", "profiler::_record_function_enter", "profiler::_record_function_enter_new",
           "profiler::_record_function_exit", "aten::is_leaf", "aten::output_nr", "aten::_version"}


def _top_level_us(path: Path) -> dict[int | str, float]:
    """Per process, the summed duration of the events no other event (of its thread) contains."""
    threads: dict[tuple[int | str, int | str], list[tuple[int, int]]] = {}
    for e in load_trace(path).events:
        if e.ph == "X" and e.cat in TREE_CATS and e.name not in DROPPED:
            threads.setdefault((e.pid, e.tid), []).append((round(e.ts * 1000), -round(e.dur * 1000)))
    out: dict[int | str, float] = {}
    for (pid, _tid), spans in threads.items():
        root_end = None
        for start, negdur in sorted(spans):
            end = start - negdur
            if root_end is None or start >= root_end or end > root_end:
                root_end = end
                out[pid] = out.get(pid, 0.0) + -negdur / 1000
    return out


@pytest.mark.parametrize("name", ["nccl_data.json.gz", "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
                                  "mi250_minitoy_train_ROCm6_2_kineto.json.gz", "sampled_rank-0.json.gz",
                                  "benchmark_result_2869224_1695835535_trace.json.gz", "triton_example.json.gz"])
def test_real_traces_self_times_add_up_to_top_level_time(name: str) -> None:
    """Self times telescope: however events nest and merge, they sum to the top-level events' time."""
    s = analyze_file(TRACES / name, top=1_000_000)
    top = _top_level_us(TRACES / name)
    assert {p.pid for p in s.processes} == set(top)
    for p in s.processes:
        assert p.self_cpu_total_us == pytest.approx(top[p.pid], rel=1e-6)
        assert sum(op.self_cpu_us for op in p.cpu_ops) == pytest.approx(top[p.pid], rel=1e-6)
        # (a self time may be negative, as in torch, where siblings overlap in a sampled trace)
        assert all(op.self_cpu_us <= op.cpu_total_us + 1e-6 and op.calls > 0 for op in p.cpu_ops)
        assert not any(op.name.startswith("ProfilerStep#") for op in p.cpu_ops)
        steps = [op for op in p.cpu_ops if op.name == "ProfilerStep*"]
        assert sum(op.calls for op in steps) == len(p.steps)


def test_nccl_trace_kernels_memcpy_and_comm() -> None:
    s = analyze_file(TRACES / "nccl_data.json.gz")
    (p,) = s.processes
    assert p.rank == 0 and p.name == "python3.10"
    assert p.gpu is not None and 0 < p.gpu.comm_us < p.gpu.busy_us <= p.gpu.window_us
    assert p.gpu.compute_us > 0 and p.gpu.memcpy_us > 0
    assert any("ncclKernel_AllReduce" in k.name for k in p.kernels)
    assert sum(k.calls for k in p.kernels) <= 2700
    dtod = next(m for m in p.memcpy if m.kind == "Memcpy DtoD")
    assert dtod.count == 960 and dtod.total_bytes > 0 and dtod.gbps is not None and dtod.gbps > 0
    assert p.launch is not None and p.launch.count > 0 and p.launch.mean_delay_us is not None
    assert len(p.steps) == 3 and "3 steps" in p.steps_note
    assert any(op.self_cuda_us > 0 for op in p.cpu_ops)
    assert 2 <= len(p.findings) <= 4 and any("communication" in f for f in p.findings)


def test_ns_resolution_trace_keeps_fractional_microseconds() -> None:
    s = analyze_file(TRACES / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")
    p = s.processes[0]
    assert len(p.steps) == 5
    assert any(st.dur_us != int(st.dur_us) for st in p.steps)
    assert p.gpu is not None and p.gpu.busy_us > 0 and sum(k.calls for k in p.kernels) > 0


def test_amd_trace_is_vendor_neutral() -> None:
    s = analyze_file(TRACES / "mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    p = s.processes[0]
    assert p.gpu is not None and p.kernels
    assert p.launch is not None and p.launch.count > 0  # hipLaunchKernel counts as a launch
    htod = next(m for m in p.memcpy if "HtoD" in m.kind)
    assert htod.gbps is None  # AMD writes no byte counts: n/a, not 0


def test_cpu_only_trace_has_no_gpu_section() -> None:
    s = analyze_file(TRACES / "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
    p = s.processes[0]
    assert p.gpu is None and not p.kernels and p.rank == 34
    assert "GPU: no GPU activity" in summary_text(s)


def test_trace_without_step_markers_says_so() -> None:
    s = analyze_file(TRACES / "benchmark_result_2869224_1695835535_trace.json.gz")
    p = s.processes[0]
    assert p.steps_note == "no step markers"
    assert any("no step markers" in f or "GPU idle" in f for f in p.findings)


def test_triton_cuda_driver_launch() -> None:
    p = analyze_file(TRACES / "triton_example.json.gz").processes[0]
    assert p.launch is not None and p.launch.count == 1
    assert p.kernels[0].name.startswith("triton_")


def test_bare_array_with_several_processes_and_begin_end() -> None:
    s = analyze_file(TRACES / "multiprocess.json")
    assert len(s.processes) >= 2
    assert all(p.cpu_ops for p in s.processes)


def test_truncated_file_is_a_clear_error() -> None:
    with pytest.raises(TraceFileError) as info:
        analyze_file(TRACES / "simple-partial.json")
    assert info.value.problem is TraceProblem.TRUNCATED
    size = (TRACES / "simple-partial.json").stat().st_size  # the sentence, pinned once
    assert str(info.value) == (f"{TRACES / 'simple-partial.json'}: truncated: the JSON ends early after {size} bytes "
                               "(still being written, or a copy was cut short)")


def test_truncated_gzip_and_garbage_and_limits(tmp_path: Path) -> None:
    raw = (TRACES / "triton_example.json.gz").read_bytes()
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(TraceFileError) as info:
        analyze_file(cut)
    assert info.value.problem is TraceProblem.REFUSED  # damaged gzip: refused before parsing
    junk = tmp_path / "junk.json"
    junk.write_text("{not json")
    with pytest.raises(TraceFileError) as info:
        analyze_file(junk)
    assert info.value.problem is TraceProblem.NOT_JSON
    with pytest.raises(TraceFileError) as info:
        analyze_file(TRACES / "nccl_data.json.gz", max_bytes=1 << 20)
    assert info.value.problem is TraceProblem.REFUSED
    with pytest.raises(TraceFileError) as info:
        analyze_file(tmp_path / "missing.json")
    assert info.value.problem is TraceProblem.CANNOT_OPEN
    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(gzip.compress(b" " * (8 << 20)))
    with pytest.raises(TraceFileError) as info:
        analyze_file(bomb, max_bytes=4 << 20)
    assert info.value.problem is TraceProblem.REFUSED
    empty = tmp_path / "empty.json"
    empty.write_text("  ")
    with pytest.raises(TraceFileError) as info:
        analyze_file(empty)
    assert info.value.problem is TraceProblem.EMPTY


def test_odd_field_types_are_tolerated(tmp_path: Path) -> None:
    doc = {"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 0, "dur": 10},
        {"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "ts": "2", "dur": 3, "args": {"x": 1}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": "1", "dur": 2, "args": {"stream": 7, "correlation": 5}},
        {"ph": "X", "cat": "cpu_op", "name": ["odd"], "pid": 1, "tid": 1, "ts": 5, "dur": 1},
    ]}
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(doc))
    p = analyze_file(path).processes[0]
    ops = {o.name: o for o in p.cpu_ops}
    assert ops["a"].self_cpu_us == pytest.approx(7.0) and ops["b"].self_cpu_us == pytest.approx(3.0)
    assert p.kernels[0].name == "k" and p.gpu is not None and p.gpu.busy_us == pytest.approx(2.0)


def test_progress_is_reported() -> None:
    seen: list[tuple[float, str]] = []
    analyze_file(TRACES / "nccl_data.json.gz", progress=lambda f, what: seen.append((f, what)))
    assert seen and all(0.0 <= f <= 1.0 for f, _ in seen)
    assert any(w == "reading" for _, w in seen) and any(w == "parsing" for _, w in seen)


def test_load_trace_keeps_all_args_for_the_timeline() -> None:
    t = load_trace(TRACES / "triton_example.json.gz", keep_args=True)
    kernel = next(e for e in t.events if e.cat == "kernel")
    assert isinstance(kernel.args, dict) and "grid" in kernel.args


def test_cli_json_and_text(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "gpulens", "analyze", "--json", str(TRACES / "nccl_data.json.gz")],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    proc = doc["processes"][0]
    assert proc["pid"] == 2910249 and proc["self_cpu_total_us"] > 0
    op = proc["cpu_ops"][0]
    assert {"name", "calls", "self_cpu_us", "cpu_total_us"} <= set(op)
    assert proc["gpu"]["busy_pct"] > 0 and proc["findings"]
    text = subprocess.run([sys.executable, "-m", "gpulens", "analyze", str(TRACES / "nccl_data.json.gz")],
                          capture_output=True, text=True, timeout=60).stdout
    for col in ("Self CPU %", "Self CPU", "CPU total", "Self CUDA", "# of Calls", "Self CPU time total:"):
        assert col in text
    bad = subprocess.run([sys.executable, "-m", "gpulens", "analyze", str(TRACES / "simple-partial.json")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "truncated" in bad.stderr and "Traceback" not in bad.stderr
    assert to_dict(analyze_file(TRACES / "multiprocess.json"))["processes"]


def test_timeline_lanes_depths_and_painting() -> None:
    from gpulens.analysis.trace.timeline import build_timeline, paint_row

    t = load_trace(TRACES / "multiprocess.json", keep_args=True)
    tl = build_timeline(t.events)
    assert tl.rows and tl.end_us > tl.start_us
    nested = load_trace(TRACES / "triton_example.json.gz", keep_args=True)
    tl = build_timeline(nested.events)
    cpu_rows = [r for r in tl.rows if not r.gpu]
    gpu_rows = [r for r in tl.rows if r.gpu]
    assert gpu_rows and max(r.depth for r in cpu_rows) >= 1  # nested ops get deeper rows
    assert all(r.lane >= max(c.lane for c in cpu_rows) for r in gpu_rows)  # GPU streams last
    row = cpu_rows[0]
    cells = paint_row(row, tl.start_us, tl.end_us, 80)
    assert len(cells) == 80 and any(c is not None for c in cells)
    assert paint_row(row, tl.end_us + 10, tl.end_us + 20, 10) == [None] * 10
    span = row.spans[0]
    d = tl.details(span)
    assert d["name"] == span.name and d["dur_us"] == span.dur_us and isinstance(d["args"], dict)


@pytest.mark.parametrize("target", ["/dev/zero", "dir"])
def test_analyze_refuses_devices_and_directories_at_once(gpulens_exe: str, tmp_path: Path, target: str) -> None:
    path = str(tmp_path) if target == "dir" else target
    out = subprocess.run([gpulens_exe, "analyze", path], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert ("not a regular file" in out.stderr) or ("a directory" in out.stderr)


def test_grouping_by_input_shape_splits_rows_and_shows_them(tmp_path: Path) -> None:
    from gpulens.analysis.trace.report import op_table_text

    ev = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 10,
         "args": {"Input Dims": [[2, 3], [3, 4]]}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 20, "dur": 5,
         "args": {"Input Dims": [[8, 8], [8, 8]]}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::cat", "pid": 1, "tid": 1, "ts": 30, "dur": 5,
         "args": {"Input Dims": [[[2, 2], [2, 2]], []]}},  # a tensor list: [] in torch's key
        {"ph": "X", "cat": "user_annotation", "name": "block", "pid": 1, "tid": 1, "ts": 0, "dur": 40},
    ]
    path = tmp_path / "shapes.json"
    path.write_text(json.dumps({"traceEvents": ev}))
    plain = {(o.name, o.input_shapes): o.calls for o in analyze_file(path).processes[0].cpu_ops}
    assert plain == {("aten::mm", ""): 2, ("aten::cat", ""): 1, ("block", ""): 1}
    p = analyze_file(path, group_by_input_shape=True).processes[0]
    grouped = {(o.name, o.input_shapes): o.calls for o in p.cpu_ops}
    assert grouped == {("aten::mm", "[[2, 3], [3, 4]]"): 1, ("aten::mm", "[[8, 8], [8, 8]]"): 1,
                       ("aten::cat", "[[], []]"): 1, ("block", "[]"): 1}
    text = "\n".join(op_table_text(p))
    assert "Input Shapes" in text and "[[8, 8], [8, 8]]" in text


def test_torch_tree_rules_on_a_hand_made_trace(tmp_path: Path) -> None:
    """The rules of docs/analyze.md, each on a case small enough to count by hand."""
    def x(cat: str, name: str, ts: float, dur: float) -> dict[str, object]:
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}

    ev = [
        # same-name only child: the inner "a" disappears, "a" adopts "b"
        x("cpu_op", "a", 0, 100), x("cpu_op", "a", 10, 80), x("cpu_op", "b", 20, 30),
        # an annotation whose only child is the op of its name absorbs it
        x("user_annotation", "aten::mul", 200, 50), x("cpu_op", "aten::mul", 210, 20),
        # a name torch drops: its time stays in its parent's self time
        x("cpu_op", "c", 300, 40), x("cpu_op", "aten::is_leaf", 310, 10),
        # Python functions are nodes; two children of one name do not merge
        x("python_function", "f.py(1): g", 400, 60), x("cpu_op", "d", 410, 10), x("cpu_op", "d", 430, 10),
        x("user_annotation", "ProfilerStep#7", 500, 30), x("user_annotation", "ProfilerStep#8", 540, 30),
        # a child ending exactly at its parent's end, where float sums say it ends 1 ulp later
        x("cpu_op", "p", 5258570561313.141, 9336.754), x("cpu_op", "q", 5258570562990.868, 7659.027),
    ]
    path = tmp_path / "rules.json"
    path.write_text(json.dumps({"traceEvents": ev}))
    p = analyze_file(path, top=100).processes[0]
    rows = {(o.name, o.user_annotation): (o.calls, o.self_cpu_us, o.cpu_total_us) for o in p.cpu_ops}
    assert rows[("a", False)] == (1, 70, 100)
    assert rows[("b", False)] == (1, 30, 30)
    assert rows[("aten::mul", True)] == (1, 50, 50) and ("aten::mul", False) not in rows
    assert rows[("c", False)] == (1, 40, 40) and not any(n == "aten::is_leaf" for n, _ in rows)
    assert rows[("f.py(1): g", False)] == (1, 40, 60) and rows[("d", False)] == (2, 20, 20)
    assert rows[("ProfilerStep*", True)] == (2, 60, 60) and [s.name for s in p.steps] == ["ProfilerStep#7", "ProfilerStep#8"]
    assert rows[("p", False)][0] == 1 and rows[("p", False)][1] == pytest.approx(9336.754 - 7659.027)
    assert p.self_cpu_total_us == pytest.approx(100 + 50 + 40 + 60 + 60 + 9336.754)
