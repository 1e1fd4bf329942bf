"""Issue 33 item 3: the input guard's refusals carry their reason as a value (core.limits.InputProblem),
and the importers class them by it, never by the words of the sentence."""

from __future__ import annotations

import gzip
import pickle
from pathlib import Path

import pytest

from gpulens.analysis.flame.errors import FlameError, FlameFormatError, FlameProblem
from gpulens.analysis.flame.importers import load_profile
from gpulens.analysis.trace.errors import TraceFileError, TraceProblem
from gpulens.core.limits import InputLimits, InputProblem, InputRefused, MiB, read_input

LIMITS = InputLimits(max_bytes=4 * MiB, max_ratio=100)


def _files(tmp_path: Path) -> dict[str, Path]:
    """One input per refusal; the directory is named 'limit' so a reason read off the words would be wrong."""
    where = tmp_path / "limit"
    where.mkdir()
    files = {"missing": where / "missing.txt", "directory": where / "d"}
    files["directory"].mkdir()
    files["large"] = where / "large.txt"
    files["large"].write_bytes(b"a;b 1\n" * MiB)  # 6 MiB on disk
    files["bomb"] = where / "bomb.txt.gz"
    files["bomb"].write_bytes(gzip.compress(b"a;b 1\n" * (MiB // 2)))  # 3 MiB inside, far over 100x its size
    files["damaged"] = where / "damaged.txt.gz"
    files["damaged"].write_bytes(gzip.compress(b"a;b 1\n" * 1000)[:-12])
    return files


REASONS = {"missing": InputProblem.CANNOT_OPEN, "directory": InputProblem.NOT_REGULAR,
           "large": InputProblem.TOO_LARGE, "bomb": InputProblem.TOO_COMPRESSED, "damaged": InputProblem.DAMAGED_GZIP}


@pytest.mark.parametrize("name", sorted(REASONS))
def test_each_refusal_has_its_reason(tmp_path: Path, name: str) -> None:
    with pytest.raises(InputRefused) as info:
        read_input(str(_files(tmp_path)[name]), LIMITS)
    assert info.value.problem is REASONS[name]
    again = pickle.loads(pickle.dumps(info.value))  # a worker process's error reaches the parent whole
    assert (again.problem, str(again)) == (info.value.problem, str(info.value))


FLAME = {"directory": FlameProblem.NOT_REGULAR, "large": FlameProblem.TOO_LARGE, "bomb": FlameProblem.TOO_LARGE,
         "damaged": FlameProblem.TRUNCATED}


@pytest.mark.parametrize("name", sorted(FLAME))
def test_flame_classes_a_refusal_by_its_reason(tmp_path: Path, name: str) -> None:
    with pytest.raises(FlameFormatError) as info:
        load_profile(str(_files(tmp_path)[name]), limits=LIMITS)
    assert info.value.problem is FLAME[name]


def test_a_file_that_cannot_open_is_no_format_error(tmp_path: Path) -> None:
    with pytest.raises(FlameError) as info:
        load_profile(str(_files(tmp_path)["missing"]), limits=LIMITS)
    assert type(info.value) is FlameError


@pytest.mark.parametrize("name", sorted(REASONS))
def test_trace_classes_a_refusal_by_its_reason(tmp_path: Path, name: str) -> None:
    with pytest.raises(InputRefused) as info:
        read_input(str(_files(tmp_path)[name]), LIMITS)
    want = TraceProblem.CANNOT_OPEN if name == "missing" else TraceProblem.REFUSED
    assert TraceFileError.refused(info.value).problem is want
