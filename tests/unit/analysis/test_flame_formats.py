"""Files from other tools: speedscope's own export, perf script (against stackcollapse-perf.pl), odd files."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from gpulens.analysis.flame.errors import FlameFormatError, FlameProblem
from gpulens.analysis.flame.group import ALL
from gpulens.analysis.flame.importers import group_from_bytes, load_group, load_profile
from gpulens.cli import main
from tests.paths import DATA

STACKS = DATA / "stacks"


def _folded_reference(path: Path) -> dict[str, int]:
    raw = path.read_bytes()
    text = (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode()
    out: dict[str, int] = {}
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        out[stack] = out.get(stack, 0) + int(count)
    return out


def test_speedscope_export_made_by_speedscope_itself() -> None:
    """speedscope 1.25.0 (its own importer and exporter) wrote evented profiles, one per py-spy thread."""
    path = STACKS / "speedscope-1.25-export.speedscope.json"
    doc = json.loads(path.read_text())
    assert doc["exporter"] == "speedscope@1.25.0"
    group = load_group(str(path))
    assert len(group) == len(doc["profiles"]) == 3
    for i, prof in enumerate(doc["profiles"]):
        assert prof["type"] == "evented"
        # Independent: time with at least one frame open, between consecutive events.
        depth, last, busy = 0, prof["startValue"], 0.0
        for ev in prof["events"]:
            if depth:
                busy += ev["at"] - last
            depth += 1 if ev["type"] == "O" else -1
            last = ev["at"]
        assert group.pick(i).total == pytest.approx(busy)
        assert group.pick(i).unit == "seconds"


def test_speedscope_export_matches_pyspy_original() -> None:
    """The same recording, straight from py-spy and after speedscope's round trip, gives the same graph."""
    original = load_group(str(STACKS / "pyspy-0.4.3-threads.speedscope.json"))
    exported = load_group(str(STACKS / "speedscope-1.25-export.speedscope.json"))
    assert original.names == exported.names
    for i in range(len(original)):
        a = {tuple(f): v for f, v in original.pick(i).stacks()}
        b = {tuple(f): v for f, v in exported.pick(i).stacks()}
        assert a.keys() == b.keys()
        assert all(a[k] == pytest.approx(b[k]) for k in a)


def test_pyspy_speedscope_fixture_null_active_index_and_merge() -> None:
    path = STACKS / "pyspy-0.4.3-threads.speedscope.json"
    doc = json.loads(path.read_text())
    assert doc["activeProfileIndex"] is None
    profile = load_profile(str(path))
    assert profile.total == pytest.approx(sum(doc["profiles"][0]["weights"]))
    merged = load_profile(str(path), profile=ALL)
    assert merged.total == pytest.approx(sum(sum(p["weights"]) for p in doc["profiles"]))


@pytest.mark.parametrize(
    ("perf_script", "collapsed"),
    [
        ("example-perf-stacks.txt.gz", "example-perf-stacks.collapsed.gz"),
        ("perf-rust-Yamakaky-dcpu.txt.gz", "perf-rust-Yamakaky-dcpu.collapsed"),
        ("perf-cycles-instructions-01.txt.gz", "perf-cycles-instructions-01.collapsed"),
    ],
)
def test_perf_script_folds_as_stackcollapse_perf(perf_script: str, collapsed: str) -> None:
    """Stack for stack what FlameGraph's stackcollapse-perf.pl (default options) made of the same file."""
    profile = load_profile(str(STACKS / perf_script))
    want = _folded_reference(STACKS / collapsed)
    got = {";".join(frames): value for frames, value in profile.stacks()}
    assert got == want
    assert profile.total == sum(want.values())


def test_perf_script_skips_other_events_and_says_so() -> None:
    profile = load_profile(str(STACKS / "perf-cycles-instructions-01.txt.gz"))
    text = gzip.decompress((STACKS / "perf-cycles-instructions-01.txt.gz").read_bytes()).decode()
    headers = [ln for ln in text.splitlines() if ln and not ln[0].isspace() and not ln.startswith("#")]
    first = headers[0].rstrip().rsplit(" ", 1)[-1].rstrip(":")
    others = sum(1 for h in headers if not h.rstrip().endswith(f" {first}:"))
    assert others > 0 and f"{others} sample(s) of other events skipped" in profile.title


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b'<?xml version="1.0" standalone="no"?>\n<svg version="1.1"><text>Flame Graph</text></svg>',
         "SVG flame graph image (from flamegraph.pl)"),
        (b"<svg xmlns='http://www.w3.org/2000/svg'><circle r='1'/></svg>", "an SVG image, not a profile"),
        (b"PERFILE2" + b"\x00" * 64, "perf script -i perf.data"),
        (b"<!DOCTYPE html><html><body>report</body></html>", "an HTML page"),
        (b"\x89PNG\r\n\x1a\n" + b"\x00" * 32, "a PNG image"),
        (b"hello world\nthis is a note\n", "not a profile gpulens reads"),
        (b"\x01\x02\x00\x00binary", "binary data"),
    ],
)
def test_unknown_files_get_one_line_with_what_to_run(data: bytes, says: str) -> None:
    with pytest.raises(FlameFormatError) as err:
        group_from_bytes(data, "thing.bin").pick()
    assert err.value.problem is FlameProblem.UNSUPPORTED
    text = str(err.value)  # the advice is the point of this test: the sentence is kept
    assert says in text and "\n" not in text
    assert "py-spy record" in text or "perf script" in text


def test_cli_unknown_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "graph.svg"
    bad.write_text('<?xml version="1.0"?><svg><!-- py-spy --></svg>')
    assert main(["flame", str(bad)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "SVG flame graph image (from py-spy)" in lines[0] and "-f speedscope" in lines[0]


def test_generic_chrome_trace_events_nest_per_thread() -> None:
    """speedscope's sample: two processes x two threads of X events, with thread_name metadata."""
    path = DATA / "traces" / "multiprocess.json"
    events = json.loads(path.read_text())
    group = load_group(str(path))
    threads = {(e["pid"], e["tid"]) for e in events if e.get("ph") == "X"}
    assert len(group) == len(threads)
    names = {e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
    assert all(any(n in part for part in group.names) for n in names)
    # Independent: with properly nested X events, a thread's total self time is the union of its events.
    union = 0.0
    for pid_tid in threads:
        spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("ph") == "X"
                       and (e["pid"], e["tid"]) == pid_tid)
        end = -1.0
        for a, b in spans:
            union += max(0.0, b - max(a, end))
            end = max(end, b)
    assert group.pick(ALL).total == pytest.approx(union * 1e-6)


@pytest.mark.parametrize(
    "data",
    [
        b"p 1 2: cycles:\n\tab" + b" (x" * 20_000 + b"\n\n",  # backtracked for ~50 s through the regex
        b"p 1 2: cycles:\n\t" + b"1" * 50_000 + b"\n\n",
        b"p 1 2: cycles:\n\t1 f (" + b"(" * 30_000 + b"\n\n",
    ],
)
def test_hostile_perf_script_lines_are_one_clear_error(data: bytes) -> None:
    from gpulens.analysis.flame.perfscript import parse_perf_script

    with pytest.raises(FlameFormatError) as info:
        parse_perf_script(data, "hostile.perf")
    assert info.value.problem is FlameProblem.NO_SAMPLES
