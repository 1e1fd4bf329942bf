"""``--record FILE`` in a directory other users can write (issue 27, item 1; issue 31, item 4).

The attacks are made by a throwaway second user (``two_users``) in a sticky,
world-writable directory like /tmp, on a kernel where ``fs.protected_symlinks``
and ``fs.protected_fifos`` may be off: a planted symlink to a root-only file,
a FIFO, the attacker's own file. Each is refused in one line and nothing is
written through it. An existing recording of ours is refused unless
``--append`` (continued, read back whole) or ``--force`` (replaced).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpulens.core.errors import ConfigError, ConfigProblem
from gpulens.core.events import SampleEvent, SourceEvent, SourceStatusEvent
from gpulens.ipc.recording import read_recording
from gpulens.sources.demo import DemoSource
from gpulens.sources.local import Recorder
from tests.fakes import security_helpers
from tests.fakes.security_helpers import User, call_as

two_users = security_helpers.two_users  # the fixture, visible to pytest in this module

T0 = 1_700_000_000.0


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory like /tmp: root's, mode 1777, reachable by every user."""
    d = Path(tempfile.mkdtemp(prefix="gl-sticky-", dir="/tmp"))
    os.chmod(d, 0o1777)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _record(path: Path, seconds: float, mode: str = "new", *, t0: float = T0) -> list[SourceEvent]:
    events: list[SourceEvent] = []
    rec = Recorder(str(path), "demo", simulated=True, mode=mode)  # type: ignore[arg-type]
    emit = rec.wrap(events.append)
    DemoSource(seed=5, clock=lambda: t0, live=False, backfill_s=seconds).start(emit)
    emit(SourceStatusEvent(message="ok", ok=True, time=t0))
    rec.close()
    return events


def _plant_symlink(target: str, link: str) -> str:
    os.symlink(target, link)
    return link


def _plant_fifo(path: str) -> str:
    os.mkfifo(path, 0o666)
    return path


def _plant_file(path: str) -> str:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    os.write(fd, b"mallory's file\n")
    os.fchmod(fd, 0o666)
    os.close(fd)
    return path


def test_planted_symlink_to_a_root_file_is_not_followed(two_users: tuple[User, User], shared_dir: Path,
                                                         tmp_path: Path) -> None:
    _alice, mallory = two_users
    victim = tmp_path / "root-only.conf"
    victim.write_text("root's settings\n")
    victim.chmod(0o600)
    link = shared_dir / "session.rec"
    call_as(mallory, _plant_symlink, str(victim), str(link))
    for mode in ("new", "append", "overwrite"):
        with pytest.raises(ConfigError) as err:
            Recorder(str(link), "demo", True, mode=mode)
        assert (err.value.where, err.value.problem) == (f"--record {link}", ConfigProblem.UNSAFE)
        assert "\n" not in str(err.value)
    assert victim.read_text() == "root's settings\n"
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert os.path.islink(link)


def test_planted_fifo_never_blocks(two_users: tuple[User, User], shared_dir: Path) -> None:
    _alice, mallory = two_users
    fifo = shared_dir / "session.rec"
    call_as(mallory, _plant_fifo, str(fifo))
    outcomes: list[ConfigProblem | str] = []

    def attempt() -> None:
        for mode in ("new", "append", "overwrite"):
            try:
                Recorder(str(fifo), "demo", True, mode=mode)
                outcomes.append("opened")
            except ConfigError as err:
                outcomes.append(err.problem)

    t = threading.Thread(target=attempt, daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), "opening a FIFO as a recording blocked"
    assert outcomes == [ConfigProblem.NOT_REGULAR] * 3


def test_another_users_file_is_refused_even_with_force(two_users: tuple[User, User], shared_dir: Path) -> None:
    _alice, mallory = two_users
    theirs = shared_dir / "session.rec"
    call_as(mallory, _plant_file, str(theirs))
    with pytest.raises(ConfigError) as err:
        Recorder(str(theirs), "demo", True)
    assert err.value.problem is ConfigProblem.EXISTS
    for mode in ("append", "overwrite"):
        with pytest.raises(ConfigError) as err:
            Recorder(str(theirs), "demo", True, mode=mode)
        assert (err.value.problem, err.value.got) == (ConfigProblem.UNSAFE, str(theirs))
        assert f"uid {mallory.uid}" in (err.value.detail or "")  # whose file it is, as a number the user can check
    assert theirs.read_bytes() == b"mallory's file\n"


def test_new_recording_is_private_and_exclusive(tmp_path: Path) -> None:
    path = tmp_path / "r.gpulens"
    _record(path, 5)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    before = path.read_bytes()
    with pytest.raises(ConfigError, match=r"exists \(a file of \d+ bytes\); add --append") as err:
        Recorder(str(path), "demo", True)  # the one sentence pinned here: it names the flags that continue
    assert err.value.problem is ConfigProblem.EXISTS
    assert path.read_bytes() == before


def test_append_continues_and_nothing_is_lost(tmp_path: Path) -> None:
    path = tmp_path / "r.gpulens"
    first = _record(path, 10)
    size = path.stat().st_size
    second = _record(path, 10, "append", t0=T0 + 60)
    head, back = read_recording(str(path))
    assert head["simulated"] is True
    assert back == first + second
    assert path.stat().st_size > size


def test_append_cuts_a_partial_last_record(tmp_path: Path) -> None:
    path = tmp_path / "r.gpulens"
    first = _record(path, 5)
    whole = path.stat().st_size
    with open(path, "ab") as f:
        f.write(b"\x85\xa1k\xa1s")  # a map of 5 cut after its first pair: a crash mid-write
    rec = Recorder(str(path), "demo", True, mode="append")
    assert rec.cut == 5 and rec.continued and rec.bytes == whole
    rec.close()
    _head, back = read_recording(str(path))
    assert back == first


def test_append_refuses_another_kind_of_recording(tmp_path: Path) -> None:
    path = tmp_path / "r.gpulens"
    _record(path, 3)
    with pytest.raises(ConfigError) as err:
        Recorder(str(path), "local", False, mode="append")
    assert err.value.problem is ConfigProblem.CONFLICT
    path.write_bytes(b"not msgpack at all \xc1")
    with pytest.raises(ConfigError) as err:
        Recorder(str(path), "demo", True, mode="append")
    assert err.value.problem is ConfigProblem.NOT_A_RECORDING


def test_force_replaces_our_recording(tmp_path: Path) -> None:
    path = tmp_path / "r.gpulens"
    _record(path, 20)
    big = path.stat().st_size
    again = _record(path, 2, "overwrite")
    _head, back = read_recording(str(path))
    assert back == again and path.stat().st_size < big
    assert any(isinstance(e, SampleEvent) for e in back)


def test_cli_refuses_an_existing_file_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "r.gpulens"
    path.write_bytes(b"precious")
    out = subprocess.run([sys.executable, "-m", "gpulens", "--demo", "--record", str(path)],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode != 0
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "--append" in lines[0] and "--force" in lines[0], out.stderr
    assert path.read_bytes() == b"precious"
    out = subprocess.run([sys.executable, "-m", "gpulens", "--demo", "--append"],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode != 0 and "--record" in out.stderr
