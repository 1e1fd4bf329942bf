"""sources/flame_export.py: the destination checked before any work, the exporters' bytes written as they are."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest

from gpulens.analysis.flame.errors import FlameError
from gpulens.analysis.flame.exporters import (
    Exported,
    folded_export,
    pprof_export,
    speedscope_export,
)
from gpulens.analysis.flame.model import Profile, build_from_stacks
from gpulens.sources.flame_export import (
    check_writable,
    export_folded,
    export_pprof,
    export_speedscope,
    write_export,
)


def _profile() -> Profile:
    return build_from_stacks([(["main", "fit", "forward"], 30), (["main", "fit", "backward"], 20),
                              (["main", "load"], 10)], "samples", "train")


def test_each_file_holds_the_pure_exporters_bytes(tmp_path: Path) -> None:
    profile = _profile()
    for write, pure, name in ((export_folded, folded_export, "a.folded"),
                              (export_speedscope, speedscope_export, "a.speedscope.json")):
        written = write(profile, str(tmp_path / name))
        exported = pure(profile)
        assert (tmp_path / name).read_bytes() == exported.data
        assert written == exported.written(str(tmp_path / name))
    assert (tmp_path / "a.folded").read_text() == "main;fit;backward 20\nmain;fit;forward 30\nmain;load 10\n"
    written = export_pprof(profile, str(tmp_path / "a.pb.gz"), labels={"host": "h"})
    assert gzip.decompress((tmp_path / "a.pb.gz").read_bytes())  # gzipped pprof (time_nanos differs per call)
    assert (written.format, written.lines, written.total, written.unit) == ("pprof", 3, 60, "samples")
    assert pprof_export(profile).written("x").message() == \
        "wrote 3 stacks to x (pprof, weights in samples; total 60 samples)"


def test_the_message_names_the_path_and_unit(tmp_path: Path) -> None:
    out = tmp_path / "train.folded"
    assert export_folded(_profile(), str(out)).message() == \
        f"wrote 3 stacks to {out} (folded, weights in integer samples; total 60 samples)"


def test_destination_checked_early(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(FlameError, match=r"^--export-folded .*: is a directory; expected a file name$"):
        check_writable(str(tmp_path), "--export-folded")
    missing = tmp_path / "no" / "x.folded"
    with pytest.raises(FlameError) as err:
        check_writable(str(missing))
    assert str(err.value) == f"output {missing}: directory {missing.parent} does not exist"
    check_writable(str(tmp_path / "new.folded"), "-o")  # a new file in a directory that exists
    existing = tmp_path / "old.folded"
    existing.write_text("")
    monkeypatch.setattr(os, "access", lambda *_: False)  # as a user without write permission (tests may run as root)
    with pytest.raises(FlameError, match=r"^-o .*/old\.folded: not writable$"):
        check_writable(str(existing), "-o")
    with pytest.raises(FlameError) as err:
        check_writable(str(tmp_path / "new.folded"), "-o")
    assert str(err.value) == f"-o {tmp_path / 'new.folded'}: cannot create files in {tmp_path}"


def test_a_failed_write_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    exported = Exported(b"a 1\n", "folded", 1, 1, "samples")
    missing = tmp_path / "no" / "x.folded"
    with pytest.raises(FlameError) as err:
        write_export(exported, str(missing))
    assert str(err.value) == f"{missing}: cannot write: No such file or directory"
    with pytest.raises(FlameError, match=r": cannot write: Is a directory$"):
        write_export(exported, str(tmp_path))
    assert list(tmp_path.iterdir()) == []  # no temporary file left behind


def test_a_link_at_the_destination_is_replaced_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "target.txt"
    target.write_text("keep")
    link = tmp_path / "out.folded"
    link.symlink_to(target)
    export_folded(_profile(), str(link))
    assert target.read_text() == "keep" and not link.is_symlink()
    assert link.read_bytes() == folded_export(_profile()).data
