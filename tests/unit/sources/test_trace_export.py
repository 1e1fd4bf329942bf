"""sources/trace_export.py: one trace or every rank, never a directory the user did not name."""

from __future__ import annotations

import gzip
import os
import tarfile
from pathlib import Path

import pytest

from gpulens.analysis.trace.errors import TraceFileError, TraceProblem
from gpulens.sources.trace_export import check_destination, export_ranks, export_trace, is_archive
from tests.paths import DATA

RANK0 = DATA / "traces" / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
PLAIN = DATA / "traces" / "multiprocess.json"


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_missing_parent_is_refused_and_nothing_is_created(tmp_path: Path) -> None:
    before = _tree(tmp_path)
    dest = tmp_path / "no" / "such" / "dir" / "x.json"
    with pytest.raises(TraceFileError, match=r"directory .*/no/such/dir does not exist") as err:
        export_trace(PLAIN, dest)  # the one sentence pinned here: it names the missing directory
    assert err.value.problem is TraceProblem.BAD_DESTINATION
    with pytest.raises(TraceFileError) as err:
        export_ranks({"a.json": PLAIN, "b.json": PLAIN}, tmp_path / "no" / "ranks")
    assert err.value.problem is TraceProblem.BAD_DESTINATION
    with pytest.raises(TraceFileError) as err:
        export_ranks({"a.json": PLAIN}, tmp_path / "no" / "ranks.tar.gz")
    assert err.value.problem is TraceProblem.BAD_DESTINATION
    assert _tree(tmp_path) == before  # not one directory made


def test_filesystem_root_gets_nothing() -> None:
    """The issue's case: /nonexistent/dir/x.json creates nothing at /."""
    assert not Path("/nonexistent").exists()
    with pytest.raises(TraceFileError) as err:
        export_trace(PLAIN, "/nonexistent/dir/x.json")
    assert err.value.problem is TraceProblem.BAD_DESTINATION
    assert not Path("/nonexistent").exists()


def test_check_destination_reasons(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    for dest, directory in ((tmp_path, False), (tmp_path / "f", True), ("  ", False), (tmp_path / "f" / "x", False)):
        with pytest.raises(TraceFileError) as err:
            check_destination(dest, directory=directory)
        assert err.value.problem is TraceProblem.BAD_DESTINATION, dest
    assert check_destination(tmp_path / "new") == tmp_path / "new"
    assert is_archive("x.tar.gz") and is_archive("X.TGZ") and is_archive("a.tar") and not is_archive("a.json.gz")


def test_single_export_gzip_round_trip(tmp_path: Path) -> None:
    out = export_trace(PLAIN, tmp_path / "t.json.gz")
    assert gzip.decompress(Path(out).read_bytes()) == PLAIN.read_bytes()
    out2 = export_trace(RANK0, tmp_path / "t.json")
    assert Path(out2).read_bytes() == gzip.decompress(RANK0.read_bytes())


def test_ranks_to_a_new_directory(tmp_path: Path) -> None:
    dest = tmp_path / "job"
    written = export_ranks({"rank0-pid1.json.gz": RANK0, "rank1-pid2.json": PLAIN}, dest)
    assert sorted(os.path.basename(p) for p in written) == ["rank0-pid1.json.gz", "rank1-pid2.json"]
    assert (dest / "rank0-pid1.json.gz").read_bytes() == RANK0.read_bytes()  # gz to .gz: as it is
    assert (dest / "rank1-pid2.json").read_bytes() == PLAIN.read_bytes()
    assert _tree(tmp_path) == {"job", "job/rank0-pid1.json.gz", "job/rank1-pid2.json"}
    # An existing directory is written into.
    export_ranks({"again.json": PLAIN}, dest)
    assert (dest / "again.json").exists()


def test_ranks_to_an_archive(tmp_path: Path) -> None:
    dest = tmp_path / "job.tar.gz"
    [out] = export_ranks({"rank0.json.gz": RANK0, "rank1.json": PLAIN}, dest)
    assert out == str(dest)
    with tarfile.open(dest) as tar:
        assert tar.getnames() == ["rank0.json.gz", "rank1.json"]
        f0, f1 = tar.extractfile("rank0.json.gz"), tar.extractfile("rank1.json")
        assert f0 is not None and f1 is not None
        assert f0.read() == RANK0.read_bytes() and f1.read() == PLAIN.read_bytes()
    assert _tree(tmp_path) == {"job.tar.gz"}  # no temporary left


def test_failed_rank_leaves_no_partial_directory(tmp_path: Path) -> None:
    dest = tmp_path / "job"
    with pytest.raises(TraceFileError) as err:
        export_ranks({"a.json": PLAIN, "b.json": tmp_path / "missing.json"}, dest)
    assert err.value.problem is TraceProblem.CANNOT_OPEN
    assert not dest.exists()
    with pytest.raises(TraceFileError) as err:
        export_ranks({"a.json": PLAIN, "b.json": tmp_path / "missing.json"}, tmp_path / "j.tgz")
    assert err.value.problem is TraceProblem.CANNOT_OPEN
    assert _tree(tmp_path) == set()


def test_bad_member_names_and_links_are_refused(tmp_path: Path) -> None:
    for name in ("../x.json", "", "a/b.json", ".."):
        with pytest.raises(TraceFileError) as err:
            export_ranks({name: PLAIN}, tmp_path / "d")
        assert err.value.problem is TraceProblem.BAD_DESTINATION, name
    with pytest.raises(TraceFileError) as err:
        export_ranks({}, tmp_path / "d")
    assert err.value.problem is TraceProblem.NO_TRACE_FILES
    link = tmp_path / "link.json"
    link.symlink_to(PLAIN)
    with pytest.raises(TraceFileError) as err:
        export_ranks({"a.json": link}, tmp_path / "a.tar")
    assert err.value.problem is TraceProblem.UNSAFE
    assert _tree(tmp_path) == {"link.json"}
