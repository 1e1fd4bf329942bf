"""Issue 32 item 13: pprof in and out; ``go tool pprof`` (Debian golang-go) reads what gpulens writes,
and gpulens reads what ``go tool pprof -proto`` writes."""

from __future__ import annotations

import gzip
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpulens.analysis.flame.errors import FlameFormatError, FlameProblem
from gpulens.analysis.flame.importers import load_profile
from gpulens.analysis.flame.model import Profile, build_from_stacks
from gpulens.analysis.flame.pprof import read_pprof, to_pprof
from gpulens.sources.flame_export import export_pprof

GPU = [
    (["<module> (serve.py:40)", "Runner > _allocate_kv_cache_tensors (runner.py:212)", "cudaMalloc", "cuMemAlloc_v2"],
     59_055_800_320.0),
    (["<module> (serve.py:40)", "Model > __init__ (model.py:88)", "cuMemAlloc_v2"], 1_048_576.0),
]
GO = shutil.which("go")
needs_go = pytest.mark.skipif(GO is None, reason="needs go tool pprof (Debian golang-go; .ci/run installs it)")


def _stacks(profile: Profile) -> dict[tuple[str, ...], float]:
    return {tuple(f): v for f, v in profile.stacks()}


def test_round_trip_keeps_frames_lines_and_bytes() -> None:
    back = read_pprof(to_pprof(GPU, "bytes", labels={"host": "n1"}))
    assert back.unit == "bytes" and _stacks(back) == {tuple(f): v for f, v in GPU}
    cpu = read_pprof(to_pprof([(["main", "step"], 0.25)], "seconds"))
    assert cpu.unit == "seconds" and _stacks(cpu) == {("main", "step"): 0.25}  # integer nanoseconds inside


def test_the_flame_loader_knows_pprof_gzipped_or_not(tmp_path: Path) -> None:
    data = to_pprof(GPU, "bytes")
    (tmp_path / "p.pb.gz").write_bytes(data)
    (tmp_path / "p.pb").write_bytes(gzip.decompress(data))
    for name in ("p.pb.gz", "p.pb"):
        assert _stacks(load_profile(str(tmp_path / name))) == {tuple(f): v for f, v in GPU}


@given(st.binary(max_size=2048))
def test_bytes_are_a_profile_or_a_format_error(raw: bytes) -> None:
    try:
        got = read_pprof(b"\x0a\x04\x08\x01\x10\x02" + raw)
    except FlameFormatError:
        return  # refused with the reason: never another exception
    assert got.unit in ("bytes", "samples", "seconds") and got.total >= 0


@pytest.mark.parametrize(("raw", "problem"), [
    (b"\x10\x01", FlameProblem.UNSUPPORTED),  # no sample type or string table: not pprof
    (b"\x0a\x04\x08\x09\x10\x01" + b"\x32\x00", FlameProblem.BAD_REFERENCE),  # string index 9 of a table of 1
    (gzip.compress(gzip.decompress(to_pprof(GPU, "bytes"))[:144]), FlameProblem.TRUNCATED),  # cut inside a sample
    (b"\x0a\x04\x08\x01\x10\x02\x32\x05ab", FlameProblem.TRUNCATED),  # a field past the end
    (b"\x0a\x04\x08\x01\x10\x02\x08" + b"\xff" * 11, FlameProblem.MALFORMED),  # a varint over 64 bits
    (b"\x0a\x04\x08\x01\x10\x02\x0b", FlameProblem.MALFORMED),  # wire type 3
])
def test_malformed_pprof_says_why(raw: bytes, problem: FlameProblem) -> None:
    with pytest.raises(FlameFormatError) as info:
        read_pprof(raw)
    assert info.value.problem is problem


@needs_go
def test_go_tool_pprof_reads_what_gpulens_writes(tmp_path: Path) -> None:
    out = tmp_path / "gpu.pb.gz"
    export_pprof(build_from_stacks(GPU, "bytes"), str(out), labels={"host": "node07", "pod": "vllm-0"})
    top = subprocess.run([str(GO), "tool", "pprof", "-top", "-nodecount=20", str(out)], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    assert "Type: space" in top and "100% of 55GB total" in top
    assert "Runner > _allocate_kv_cache_tensors" in top and "‹module›" in top
    traces = subprocess.run([str(GO), "tool", "pprof", "-traces", str(out)], capture_output=True, text=True,
                            timeout=120, check=True).stdout
    assert "pod:  vllm-0" in traces and "host:  node07" in traces


@needs_go
def test_gpulens_reads_what_go_tool_pprof_writes(tmp_path: Path) -> None:
    src = tmp_path / "in.pb.gz"
    src.write_bytes(to_pprof(GPU, "bytes"))
    again = tmp_path / "again.pb.gz"
    with again.open("wb") as fh:
        subprocess.run([str(GO), "tool", "pprof", "-proto", str(src)], stdout=fh, timeout=120, check=True)
    assert again.read_bytes() != src.read_bytes()  # go's own encoding
    assert _stacks(load_profile(str(again))) == {tuple(f): v for f, v in GPU}
