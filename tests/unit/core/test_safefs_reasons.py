"""Issue 33 item 3: a path safefs refuses carries its reason as a value (core.safefs.PathProblem) and the
path it is about; callers class it by that value, never by the words of the sentence. Runs as any user."""

from __future__ import annotations

import errno
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import pytest

from gpulens.core import safefs
from gpulens.core.safefs import PathProblem, UnsafePath

NOBODY_ELSE = os.geteuid() + 1
"""An owner no file here has: a wrong owner without chown (and without root)."""


def _tree(tmp_path: Path) -> Path:
    """Named 'symbolic link' so a reason read off the words would be wrong."""
    base = tmp_path / "symbolic link"
    base.mkdir()
    (base / "real").mkdir()
    (base / "file").write_text("x")
    (base / "big").write_bytes(b"x" * 100)
    (base / "dlink").symlink_to(base / "real")
    (base / "flink").symlink_to(base / "file")
    (base / "loose").mkdir()
    os.chmod(base / "loose", 0o777)
    os.mkfifo(base / "fifo")
    return base


def _open_fd(fn: Callable[[], int]) -> None:
    os.close(fn())


def _checked(path: Path, owners: tuple[int, ...]) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        safefs.check_dir(fd, str(path), owners=owners, shared_ok=True)
    finally:
        os.close(fd)


def _ensured(base: Path, name: str) -> None:
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.close(safefs.ensure_dir_at(fd, name, 0o700, parent_path=str(base)))
    finally:
        os.close(fd)


CASES: dict[str, tuple[Callable[[Path], object], PathProblem, str]] = {
    # what is done in the tree, the reason, the component it names (under the tree, unless absolute)
    "a link on the way": (lambda b: _open_fd(lambda: safefs.open_dir(b / "dlink" / "x")), PathProblem.SYMLINK,
                          "dlink"),
    "a link last": (lambda b: _open_fd(lambda: safefs.open_regular_at(None, b / "flink", owner=None, max_bytes=9)),
                    PathProblem.SYMLINK, "flink"),
    "a file on the way": (lambda b: _open_fd(lambda: safefs.open_dir(b / "file" / "x")),
                          PathProblem.NOT_A_DIRECTORY, "file"),
    "missing": (lambda b: _open_fd(lambda: safefs.open_dir(b / "gone")), PathProblem.MISSING, "gone"),
    "relative": (lambda b: _open_fd(lambda: safefs.open_dir("relative/dir")), PathProblem.NOT_ABSOLUTE,
                 "relative/dir"),
    "dot dot": (lambda b: _open_fd(lambda: safefs.open_dir(f"{b}/real/../real")), PathProblem.BAD_NAME,
                "real/../real"),
    "another's directory": (lambda b: _checked(b / "real", (NOBODY_ELSE,)), PathProblem.WRONG_OWNER, "real"),
    "a directory others can write": (lambda b: _open_fd(lambda: safefs.open_trusted_dir(b / "loose", (0, os.geteuid()))),
                                     PathProblem.WRITABLE_BY_OTHERS, "loose"),
    "not a plain name": (lambda b: _ensured(b, ".."), PathProblem.BAD_NAME, ".."),
    "a file where a directory goes": (lambda b: _ensured(b, "file"), PathProblem.NOT_A_DIRECTORY, "file"),
    "a FIFO": (lambda b: _open_fd(lambda: safefs.open_regular_at(None, b / "fifo", owner=None, max_bytes=9)),
               PathProblem.NOT_REGULAR, "fifo"),
    "another's file": (lambda b: _open_fd(lambda: safefs.open_regular_at(None, b / "file", owner=NOBODY_ELSE,
                                                                          max_bytes=9)),
                       PathProblem.WRONG_OWNER, "file"),
    "too large": (lambda b: _open_fd(lambda: safefs.open_regular_at(None, b / "big", owner=None, max_bytes=9)),
                  PathProblem.TOO_LARGE, "big"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_refusal_has_its_reason_and_names_the_component(tmp_path: Path, name: str) -> None:
    base = _tree(tmp_path)
    act, problem, component = CASES[name]
    with pytest.raises(UnsafePath) as info:
        act(base)
    assert info.value.problem is problem
    assert info.value.component == (component if component.startswith("relative") else f"{base}/{component}")
    again = pickle.loads(pickle.dumps(info.value))  # a worker process's error reaches the parent whole
    assert (again.problem, again.component, str(again)) == (problem, info.value.component, str(info.value))


def test_no_fresh_name_names_no_component(tmp_path: Path) -> None:
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with mock.patch.object(os, "mkdir", mock.Mock(side_effect=FileExistsError)), \
                pytest.raises(UnsafePath) as info:
            safefs.make_unique_dir(fd, "x-", 0o700)
    finally:
        os.close(fd)
    assert (info.value.problem, info.value.component) == (PathProblem.NO_FRESH_NAME, None)


@pytest.mark.parametrize("code, problem", [
    (errno.ELOOP, PathProblem.SYMLINK), (errno.ENOTDIR, PathProblem.NOT_A_DIRECTORY),
    (errno.ENOENT, PathProblem.MISSING), (errno.EACCES, PathProblem.CANNOT_OPEN), (errno.EEXIST, PathProblem.CANNOT_OPEN),
])
def test_a_failed_open_is_classed_by_its_errno(code: int, problem: PathProblem) -> None:
    assert PathProblem.of_os_error(OSError(code, os.strerror(code))) is problem
