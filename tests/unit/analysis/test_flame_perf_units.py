"""perf script weights are event periods, not samples (issue 32 item 11): the unit is said end to end.

FlameGraph's perf-dd-stacks-01 (``cpu-clock``, period 10101010 ns) is time; perf-rust-Yamakaky-dcpu
(``cycles:u`` with periods) is a count of cycles; example-perf-stacks (no periods) counts samples.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from gpulens.analysis.flame.errors import FlameError
from gpulens.analysis.flame.group import ALL, Part, group_of
from gpulens.analysis.flame.importers import group_from_bytes, load_profile
from gpulens.analysis.flame.model import Profile, build_from_stacks
from gpulens.analysis.flame.pprof import read_pprof
from gpulens.cli import main
from gpulens.sources.flame_export import export_folded, export_pprof, export_speedscope
from tests.paths import DATA

STACKS = DATA / "stacks"
DD = STACKS / "perf-dd-stacks-01.perf-script"
RUST = STACKS / "perf-rust-Yamakaky-dcpu.txt.gz"
NO_PERIOD = STACKS / "example-perf-stacks.txt.gz"
# The period before the event name of a perf script header (``comm pid time: PERIOD event:``).
_PERIOD = re.compile(r":\s+(\d+)\s+\S+:\s*$")


def _text(path: Path) -> str:
    raw = path.read_bytes()
    return (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode()


def _periods(text: str) -> list[int]:
    """Independent of the importer: the period of every sample header."""
    heads = [ln for ln in text.splitlines() if ln and not ln[0].isspace() and not ln.startswith("#")]
    found = [_PERIOD.search(h) for h in heads]
    assert all(found), "every header of these files has a period"
    return [int(m.group(1)) for m in found if m]


def _stacks(profile: Profile) -> dict[str, float]:
    return {";".join(f): v for f, v in profile.stacks()}


def test_cpu_clock_periods_are_nanoseconds() -> None:
    periods = _periods(DD.read_text())
    assert periods == [10101010] * 11  # 99 Hz: the period is the time between samples, in ns
    profile = load_profile(str(DD))
    assert profile.unit == "seconds"
    assert profile.total == pytest.approx(sum(periods) / 1e9, rel=1e-12)
    # stackcollapse-perf.pl --all (FlameGraph's test/results) gives the same stacks in ns; it drops the
    # file's last sample (no blank line after it), which gpulens keeps.
    want: dict[str, float] = {}
    for line in (STACKS / "perf-dd-stacks-01-collapsed-all.txt").read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        key = ";".join(f.removesuffix("_[k]") for f in stack.split(";"))
        want[key] = want.get(key, 0) + int(count) / 1e9
    want["dd;[unknown];system_call"] = 10101010 / 1e9
    got = _stacks(profile)
    assert got.keys() == want.keys()
    assert all(got[k] == pytest.approx(want[k], rel=1e-12) for k in want)


@pytest.mark.parametrize("event", ["cpu-clock", "task-clock", "cpu-clock:u", "task-clock:ppp"])
def test_one_time_sample_shows_its_period_as_time(event: str) -> None:
    """The issue's case: one 999 Hz cpu-clock sample has period 1001001 ns, 1.0 ms (not '1,001,001 samples')."""
    first = DD.read_text().split("\n\n")[0].replace("10101010 cpu-clock:", f"1001001 {event}:")
    profile = group_from_bytes(first.encode(), "one.perf").pick()
    assert profile.unit == "seconds" and profile.total == pytest.approx(1.001001e-3, rel=1e-12)


def test_other_events_are_counts_of_that_event(capsys: pytest.CaptureFixture[str]) -> None:
    periods = _periods(_text(RUST))
    profile = load_profile(str(RUST))
    assert profile.unit == "events:cycles:u"
    assert profile.total == sum(periods) == 6850637
    assert main(["flame", str(RUST), "--json", "--top", "1"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["unit"] == "events" and doc["event"] == "cycles:u" and doc["total"] == sum(periods)
    assert main(["flame", str(RUST), "--top", "1"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith("total 6,850,637 events (cycles:u)")


def test_without_periods_each_sample_counts_one(capsys: pytest.CaptureFixture[str]) -> None:
    text = _text(NO_PERIOD)
    assert not _PERIOD.search(text.splitlines()[20]) and "cycles:" in text
    profile = load_profile(str(NO_PERIOD))
    assert profile.unit == "samples" and profile.total == 1315
    assert main(["flame", str(NO_PERIOD), "--top", "1"]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith("total 1,315 samples")


def test_a_file_where_some_headers_lack_a_period_counts_samples() -> None:
    samples = DD.read_text().split("\n\n")
    samples[0] = samples[0].replace("10101010 cpu-clock:", "cpu-clock:")
    profile = group_from_bytes("\n\n".join(samples).encode(), "mixed.perf").pick()
    assert profile.unit == "samples" and profile.total == len(samples) == 11
    assert "1 of 11 samples without a period: counting samples" in profile.title


def test_cpu_clock_exports_say_time(tmp_path: Path) -> None:
    profile = load_profile(str(DD))
    ns = sum(_periods(DD.read_text()))
    folded = export_folded(profile, str(tmp_path / "dd.us.folded"))
    assert folded.unit == "µs" and folded.total == round(ns / 1e3)
    assert load_profile(str(tmp_path / "dd.us.folded")).unit == "seconds"
    speedscope = export_speedscope(profile, str(tmp_path / "dd.speedscope.json"))
    doc = json.loads((tmp_path / "dd.speedscope.json").read_text())
    assert doc["profiles"][0]["unit"] == "seconds" and speedscope.unit == "seconds"
    assert sum(doc["profiles"][0]["weights"]) == pytest.approx(ns / 1e9, rel=1e-12)
    pprof = export_pprof(profile, str(tmp_path / "dd.pb.gz"))
    assert pprof.unit == "nanoseconds" and pprof.total == ns  # integer ns: the periods exactly
    assert "in nanoseconds; total 111,111,110 nanoseconds" in pprof.message()
    back = read_pprof(gzip.decompress((tmp_path / "dd.pb.gz").read_bytes()), "dd.pb")
    assert back.title.endswith("(cpu, nanoseconds)") and back.unit == "seconds"
    assert back.total == pytest.approx(ns / 1e9, rel=1e-12)


def test_event_count_exports_name_the_event(tmp_path: Path) -> None:
    profile = load_profile(str(RUST))
    folded = export_folded(profile, str(tmp_path / "rust.folded"))
    assert folded.unit == "events (cycles:u)" and folded.total == 6850637
    assert "weights in integer events (cycles:u); total 6,850,637 events (cycles:u)" in folded.message()
    written = (tmp_path / "rust.folded").read_text().splitlines()
    assert sum(int(ln.rsplit(" ", 1)[1]) for ln in written) == 6850637
    speedscope = export_speedscope(profile, str(tmp_path / "rust.speedscope.json"))
    doc = json.loads((tmp_path / "rust.speedscope.json").read_text())
    prof = doc["profiles"][0]
    assert prof["unit"] == "none" and prof["name"].endswith("weights: events (cycles:u)")
    assert prof["endValue"] == sum(prof["weights"]) == 6850637 and speedscope.unit == "events (cycles:u)"
    pprof = export_pprof(profile, str(tmp_path / "rust.pb.gz"))
    assert pprof.unit == "events (cycles:u)" and pprof.total == 6850637
    back = read_pprof(gzip.decompress((tmp_path / "rust.pb.gz").read_bytes()), "rust.pb")
    assert back.title.endswith("(cycles:u, count)") and back.total == 6850637
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is in the test extra (validates the export)")
    jsonschema.validate(doc, json.loads((STACKS / "speedscope-file-format-schema.json").read_text()))


@pytest.mark.skipif(shutil.which("go") is None, reason="needs go tool pprof (Debian golang-go)")
def test_go_tool_pprof_reads_the_event_as_the_sample_type(tmp_path: Path) -> None:
    out = tmp_path / "rust.pb.gz"
    export_pprof(load_profile(str(RUST)), str(out))
    top = subprocess.run([str(shutil.which("go")), "tool", "pprof", "-top", "-nodecount=3", str(out)],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    assert "Type: cycles:u" in top and "of 6850637 total" in top


def test_event_units_flow_through_queries_and_never_merge() -> None:
    from gpulens.analysis.flame.subtree import focus_regex

    profile = load_profile(str(RUST))
    assert focus_regex(profile, "emulator").unit == "events:cycles:u"
    cycles = build_from_stacks([(["main", "a"], 7)], "events:cycles")
    instructions = build_from_stacks([(["main", "a"], 9)], "events:instructions")
    group = group_of("two", [Part("c", cycles.unit, lambda: cycles), Part("i", instructions.unit, lambda: instructions)])
    with pytest.raises(FlameError, match="different units"):
        group.pick(ALL)
    with pytest.raises(FlameError, match="unknown profile unit 'events:'"):
        build_from_stacks([(["a"], 1)], "events:")
