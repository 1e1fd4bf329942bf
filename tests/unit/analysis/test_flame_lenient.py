"""Lenient where the real tools are (issue 32 item 11): folded files with bad lines or a BOM, old perf script."""

from __future__ import annotations

import pytest

from gpulens.analysis.flame.errors import FlameFormatError, FlameProblem
from gpulens.analysis.flame.importers import group_from_bytes, load_profile
from tests.paths import DATA

STACKS = DATA / "stacks"


def _stacks(data: bytes, source: str = "x.folded") -> tuple[dict[str, float], str]:
    prof = group_from_bytes(data, source).pick()
    return {";".join(f): v for f, v in prof.stacks()}, prof.title


def test_comment_and_bad_lines_are_skipped_and_counted() -> None:
    got, title = _stacks(b"# captured by some tool\na;b 1\na;c 2\na;d\na;e -2\n")
    assert got == {"a;b": 1, "a;c": 2}
    assert "3 malformed line(s) skipped" in title and "line 1" in title


def test_a_file_of_mostly_bad_lines_is_still_refused() -> None:
    with pytest.raises(FlameFormatError) as prose:
        group_from_bytes(b"hello world\nthis is prose\nof three lines\na;b 1\n", "notes.txt")
    assert prose.value.problem is FlameProblem.UNSUPPORTED  # its first line is not folded: not a profile
    with pytest.raises(FlameFormatError) as mostly_bad:
        group_from_bytes(b"a;b 1\nnot folded\nnor this\nnor that\n", "x.folded")
    assert mostly_bad.value.problem is FlameProblem.MALFORMED  # folded, but more bad lines than good
    assert mostly_bad.value.at == "line 2"  # the first bad line


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-8-sig"])
def test_utf16_and_bom_folded_files(encoding: str) -> None:
    text = "main;wörk 3\nmain;idle 1\n"
    raw = text.encode(encoding)
    if encoding == "utf-16-le":
        raw = b"\xff\xfe" + raw
    elif encoding == "utf-16-be":
        raw = b"\xfe\xff" + raw
    got, title = _stacks(raw)
    assert got == {"main;wörk": 3, "main;idle": 1} and "skipped" not in title


def test_perf_script_without_timestamps_folds_as_stackcollapse_perf() -> None:
    """FlameGraph's perf-java-stacks-02.txt (old perf: no cpu, no time, frames not indented) against test/results."""
    profile = load_profile(str(STACKS / "perf-java-stacks-02.perf-script"))
    want: dict[str, float] = {}
    for line in (STACKS / "perf-java-stacks-02-collapsed-all.txt").read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        # --all marks kernel and JIT frames; the default (what gpulens follows) does not
        frames = [f.removesuffix("_[k]").removesuffix("_[j]") for f in stack.split(";")]
        key = ";".join(frames)
        want[key] = want.get(key, 0) + int(count)
    got = {";".join(f): v for f, v in profile.stacks()}
    assert got == want and profile.total == sum(want.values()) == 2
