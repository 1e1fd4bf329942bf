"""What PyPI and packagers see: absolute README links to files that exist, a complete sdist, metadata."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.paths import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO = "https://github.com/gpulens/gpulens"
RAW = "https://raw.githubusercontent.com/gpulens/gpulens/main/"
BLOB = f"{REPO}/blob/main/"
LINK = re.compile(r"(!?)\[[^\]]*\]\(([^)\s]+)\)")


def test_readme_links_are_absolute_and_name_files_in_the_tree() -> None:
    text = (ROOT / "README.md").read_text()
    links = LINK.findall(text)
    assert links, "README has no links at all?"
    for bang, url in links:
        assert re.match(r"^(https?://|#)", url), f"relative link breaks on PyPI: {url}"
        for prefix in (RAW, BLOB):
            if url.startswith(prefix):
                assert (ROOT / url[len(prefix):]).exists(), f"README links to a missing file: {url}"
        if bang:
            assert url.startswith(RAW), f"images must load from raw.githubusercontent.com: {url}"


def test_metadata_urls_classifiers_and_licence() -> None:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert set(meta["urls"]) >= {"Homepage", "Source", "Issues", "Documentation"}
    assert all(u.startswith(REPO) for u in meta["urls"].values())
    assert meta["license"] == "Apache-2.0" and meta["license-files"] == ["LICENSE"]  # SPDX (PEP 639)
    assert not [c for c in meta["classifiers"] if c.startswith("License ::")]  # superseded by the SPDX field
    licence = (ROOT / "LICENSE").read_text()
    assert "Apache License" in licence and "Version 2.0, January 2004" in licence
    versions = {c.rsplit(" :: ", 1)[1] for c in meta["classifiers"] if c.startswith("Programming Language :: Python :: 3.")}
    floor = meta["requires-python"].removeprefix(">=")
    assert floor in versions


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(),
                    reason="needs a git checkout to know which files the project has")
def test_sdist_holds_every_tracked_file(tmp_path: Path) -> None:
    tracked = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True, check=True).stdout
    names = [n for n in tracked.decode().split("\0") if n]
    src = tmp_path / "src"
    for name in names:  # build from a copy: building writes egg-info next to the sources
        if not (ROOT / name).is_file():
            continue  # deleted in the working tree, not yet committed
        dest = src / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, dest)
    out = subprocess.run(
        [sys.executable, "-c", "import sys; from setuptools import build_meta; "
         "print(build_meta.build_sdist(sys.argv[1]))", str(tmp_path / "dist")],
        cwd=src, capture_output=True, text=True, timeout=300, check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    archive = tmp_path / "dist" / out.stdout.strip().splitlines()[-1]
    with tarfile.open(archive) as tar:
        inside = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    skip = {".gitignore"}
    missing = [n for n in names if (src / n).is_file() and n not in inside and n not in skip]
    assert not missing, f"the sdist lacks {missing[:10]}"
    assert {"tests/conftest.py", "LICENSE", "MANIFEST.in"} <= inside
