"""Exports other tools read: folded with integer counts and the unit stated, speedscope valid by its schema."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gpulens.analysis.flame.exporters import default_name
from gpulens.analysis.flame.importers import load_profile
from gpulens.analysis.flame.model import Profile, build_from_stacks
from gpulens.analysis.flame.subtree import focus_node, focus_regex
from gpulens.cli import main
from gpulens.sources.flame_export import export_folded, export_speedscope
from tests.paths import DATA

STACKS = DATA / "stacks"
KINETO = DATA / "traces" / "benchmark_result_2869224_1695835535_trace.json.gz"
SNAPSHOT = DATA / "memory_snapshots" / "mini_snapshot.pickle"
# flamegraph.pl's line regex (flamegraph.pl, "# Parse input"): what it drops, it never draws.
FLAMEGRAPH_PL_LINE = re.compile(r"^(.*)\s+(\d+(?:\.\d*)?)$")


def _check_flamegraph_pl_reads(path: Path) -> int:
    """Every line matches flamegraph.pl's regex with an integer count; the sum of the counts."""
    total = 0
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines
    for line in lines:
        m = FLAMEGRAPH_PL_LINE.match(line)
        assert m is not None, f"flamegraph.pl would drop {line[:100]!r}"
        assert m.group(2).isdigit(), f"not an integer count: {line[-30:]!r}"
        total += int(m.group(2))
    return total


@pytest.mark.parametrize(
    ("source", "unit", "scale", "suffix"),
    [
        (KINETO, "seconds", 1e6, ".us.folded"),
        (SNAPSHOT, "bytes", 1.0, ".bytes.folded"),
        (STACKS / "perf-vertx-stacks-01-collapsed-all.txt", "samples", 1.0, ".folded"),
        (STACKS / "speedscope-1.25-export.speedscope.json", "seconds", 1e6, ".us.folded"),
        (STACKS / "perf-dd-stacks-01.perf-script", "seconds", 1e6, ".us.folded"),  # cpu-clock periods (ns)
    ],
)
def test_folded_export_integer_counts_in_the_stated_unit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], source: Path, unit: str, scale: float, suffix: str
) -> None:
    profile = load_profile(str(source))
    assert profile.unit == unit
    name = default_name(profile, "folded")
    assert name.endswith(suffix)
    out = tmp_path / name
    assert main(["flame", str(source), "--export-folded", str(out)]) == 0
    message = capsys.readouterr().err
    written = _check_flamegraph_pl_reads(out)
    # The sum is the true total, rounded once (cumulative rounding), in µs / bytes / samples.
    assert abs(written - profile.total * scale) <= 0.5 + 1e-9 * profile.total * scale
    stated = {"seconds": "integer µs", "bytes": "integer bytes", "samples": "integer samples"}[unit]
    assert stated in message and str(out) in message
    # Read back by name: *.us.folded is microseconds, *.bytes.folded bytes.
    back = load_profile(str(out))
    assert back.unit == unit
    assert back.total == pytest.approx(profile.total, rel=1e-6, abs=1 / scale)


def test_float_weights_that_used_to_be_dropped() -> None:
    """Tiny time weights (1.1e-05 s) become integer µs; none of them is lost to rounding per line."""
    profile = build_from_stacks([(["a", f"f{i}"], 1.1e-5) for i in range(47)], "seconds", "t")
    from gpulens.analysis.flame.folded import to_folded

    text = to_folded(profile)
    lines = text.splitlines()
    assert len(lines) == 47
    assert all(FLAMEGRAPH_PL_LINE.match(ln) and ln.rsplit(" ", 1)[1].isdigit() for ln in lines)
    assert sum(int(ln.rsplit(" ", 1)[1]) for ln in lines) == (47 * 11)


def _validator() -> object:
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is in the test extra (validates the export)")
    schema = json.loads((STACKS / "speedscope-file-format-schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


@pytest.mark.parametrize("source", [KINETO, SNAPSHOT, STACKS / "perf-vertx-stacks-01-collapsed-all.txt",
                                    STACKS / "pyspy-0.4.3-threads.speedscope.json",
                                    STACKS / "perf-dd-stacks-01.perf-script"])
def test_speedscope_export_validates_against_speedscopes_schema(tmp_path: Path, source: Path) -> None:
    validator = _validator()
    profile = load_profile(str(source))
    out = tmp_path / "out.speedscope.json"
    written = export_speedscope(profile, str(out))
    doc = json.loads(out.read_text())
    errors = list(validator.iter_errors(doc))  # type: ignore[attr-defined]
    assert not errors, errors[0].message
    assert sum(doc["profiles"][0]["weights"]) == pytest.approx(profile.total)
    assert written.lines == len(doc["profiles"][0]["samples"])
    back = load_profile(str(out))
    assert back.total == pytest.approx(profile.total) and back.unit == profile.unit


def test_schema_rejects_what_pyspy_writes() -> None:
    """The schema is strict where py-spy is not (null activeProfileIndex): gpulens reads both."""
    validator = _validator()
    doc = json.loads((STACKS / "pyspy-0.4.3-threads.speedscope.json").read_text())
    assert list(validator.iter_errors(doc))  # type: ignore[attr-defined]
    assert load_profile(str(STACKS / "pyspy-0.4.3-threads.speedscope.json")).total > 0


def _training() -> Profile:
    return build_from_stacks([
        (["main", "fit", "step", "forward"], 30), (["main", "fit", "step", "backward"], 20),
        (["main", "fit", "load"], 10), (["main", "init", "forward"], 5), (["main"], 2),
    ], "samples", "train")


def test_export_of_a_focused_subtree(tmp_path: Path) -> None:
    profile = _training()
    step = next(n for n in range(profile.n_nodes) if profile.label(n) == "step")
    out = tmp_path / "step.folded"
    written = export_folded(profile, str(out), step)
    assert _check_flamegraph_pl_reads(out) == 50 == written.total
    assert out.read_text().splitlines() == ["step;backward 20", "step;forward 30"]
    ss = tmp_path / "step.json"
    export_speedscope(profile, str(ss), step)
    assert load_profile(str(ss)).total == 50
    assert focus_node(profile, step).total == 50


def test_cli_focus_regex(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "train.folded"
    src.write_text("".join(f"{';'.join(f)} {int(v)}\n" for f, v in _training().stacks()))
    out = tmp_path / "forward.folded"
    assert main(["flame", str(src), "--focus", "^forward$", "--export-folded", str(out)]) == 0
    assert sorted(out.read_text().splitlines()) == ["forward 35"]
    assert main(["flame", str(src), "--focus", "fit", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["total"] == 60
    assert main(["flame", str(src), "--focus", "nothing-like-this", "--json"]) == 2
    assert "no frame matches" in capsys.readouterr().err
    assert focus_regex(_training(), "step|load").total == 60
