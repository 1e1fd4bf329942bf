"""Issue 27 item 9: the cache pruner, run by root with another user's ``XDG_CACHE_HOME`` (``sudo -E``).

She owns a directory on the way to the cache (or plants a link there) that
leads to root's files; root's pruning must leave them all, say why once, and
still prune a cache nobody else can redirect.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import gpulens.housekeeping as hk
from gpulens.core import dirs
from gpulens.core.config import Config
from tests.fakes import security_helpers
from tests.fakes.security_helpers import User, call_as

two_users = security_helpers.two_users  # the fixture, visible to pytest in this module

pytestmark = pytest.mark.timeout(60)
MONTH_S = 30 * 86400


@pytest.fixture
def shared() -> Iterator[Path]:
    """A private /tmp/glsecXXXX (root 0755) with a sticky world-writable ``t`` inside, like /tmp."""
    base = Path(tempfile.mkdtemp(prefix="glsec", dir="/tmp"))
    os.chmod(base, 0o755)
    (base / "t").mkdir()
    os.chmod(base / "t", 0o1777)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def _old_files(cache: Path) -> list[Path]:
    """Root's month-old files where the pruner would look: ``cache/gpulens/{traces,downloads}``."""
    made = []
    for sub in ("traces", "downloads"):
        f = cache / "gpulens" / sub / "precious.json"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"x" * 1000)
        os.utime(f, (time.time() - MONTH_S,) * 2)
        made.append(f)
    return made


def _mkdir(path: str) -> None:
    os.mkdir(path, 0o755)


def _prune_with_her_cache(monkeypatch: pytest.MonkeyPatch, xdg_cache_home: Path) -> dict[Path, dirs.PruneResult]:
    monkeypatch.setenv("XDG_CACHE_HOME", str(xdg_cache_home))
    every = hk.pruned_dirs
    monkeypatch.setattr(hk, "pruned_dirs", lambda: every()[:2])  # the real /tmp/gpulens-0 stays out of it
    return hk.prune_caches(Config(cache_max_age_days=1.0))


@pytest.mark.parametrize(
    "how", ["the cache dir is her link", "the cache dir is her link in her dir", "a parent is her link",
            "a parent is hers"]
)
def test_root_prunes_nothing_she_can_point_elsewhere(
    two_users: tuple[User, User], shared: Path, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture, how: str,
) -> None:
    _, mallory = two_users
    rootdir = shared / "root-files"
    rootdir.mkdir(mode=0o755)
    x = shared / "t" / "x"  # /tmp/x
    if how == "the cache dir is her link":  # XDG_CACHE_HOME=/tmp/x, x -> root's directory
        precious = _old_files(rootdir)
        call_as(mallory, os.symlink, str(rootdir), str(x))
        xdg, shown = x, f"{x} is a symbolic link"
    elif how == "the cache dir is her link in her dir":  # XDG_CACHE_HOME=/tmp/x/cache, cache -> root's
        precious = _old_files(rootdir)
        call_as(mallory, _mkdir, str(x))
        call_as(mallory, os.symlink, str(rootdir), str(x / "cache"))
        xdg, shown = x / "cache", f"{x} belongs to uid {mallory.uid}"  # the first component she controls
    elif how == "a parent is her link":  # XDG_CACHE_HOME=/tmp/x/cache, x -> root's directory holding cache/
        precious = _old_files(rootdir / "cache")
        call_as(mallory, os.symlink, str(rootdir), str(x))
        xdg, shown = x / "cache", f"{x} is a symbolic link"
    else:  # a real root-owned cache inside her directory: she can swap it for anything at any time
        call_as(mallory, _mkdir, str(x))
        precious = _old_files(x / "cache")
        xdg, shown = x / "cache", f"{x} belongs to uid {mallory.uid}"
    caplog.set_level(logging.WARNING, logger="gpulens.housekeeping")
    results = _prune_with_her_cache(monkeypatch, xdg)
    assert all(f.exists() and f.stat().st_uid == 0 for f in precious)
    assert all(r.removed_files == 0 and r.refused for r in results.values())
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "not pruning" in warnings[0] and shown in warnings[0], warnings


def test_a_cache_only_root_can_change_is_still_pruned(
    shared: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    cache = shared / "t" / "rootcache"  # in a sticky world-writable directory, like /tmp
    cache.mkdir(mode=0o700)
    old = _old_files(cache)
    caplog.set_level(logging.WARNING, logger="gpulens.housekeeping")
    results = _prune_with_her_cache(monkeypatch, cache)
    assert not any(f.exists() for f in old)
    assert sum(r.removed_files for r in results.values()) == 2 and not caplog.records
