"""Issue 27 item 3: the log file in a directory other users can write, and warnings a peer causes.

The agent runs as root and ``--log-file`` may be in ``/tmp``. Each test makes
its own sticky, world-writable directory under /tmp (mode 1777, like /tmp
itself) and plants what another user could: her file, a FIFO, a symlink, a
directory, before the log is opened or between the two renames of a
rotation. The attacks by a real second uid use ``two_users`` (root only; they
skip otherwise). Whatever is planted, opening and rotating never block, never
write through a link or into her file, and the handler never holds a closed
descriptor number that a later socket could be given.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpulens.core import logbook, logfile
from gpulens.core.logfile import SafeFileHandler
from gpulens.core.lograte import EXEMPT, RateLimit, Suppressed
from gpulens.core.safefs import PathProblem, UnsafePath
from tests.fakes import security_helpers
from tests.fakes.security_helpers import User, call_as

two_users = security_helpers.two_users  # the fixture, visible to pytest in this module

pytestmark = pytest.mark.timeout(120)

BOUND_S = 30.0  # a hang detector, not a speed assertion: each call returns at once or never
LINE = "x" * 60


@pytest.fixture
def shared() -> Iterator[Path]:
    """A fresh directory under /tmp with /tmp's mode: 1777."""
    d = Path(tempfile.mkdtemp(prefix="gl-seclog-", dir="/tmp"))
    d.chmod(0o1777)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def bounded(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` in a thread and fail (instead of hanging the suite) if it has not returned."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as err:  # handed to the caller below
            out["error"] = err

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(BOUND_S)
    assert not t.is_alive(), f"{getattr(fn, '__name__', fn)} blocked"
    if "error" in out:
        raise out["error"]
    return out.get("value")


def record(msg: str, *args: object, name: str = "gpulens.ipc.kineto.endpoint") -> logging.LogRecord:
    return logging.makeLogRecord({"name": name, "levelno": logging.WARNING, "levelname": "WARNING",
                                  "msg": msg, "args": args})


def drain(fd: int) -> bytes:
    """What a FIFO's reader got (nothing: b'')."""
    try:
        return os.read(fd, 1 << 16)
    except BlockingIOError:
        return b""


def victim_file(tmp_path: Path) -> Path:
    """Root's file that a link could point the log at."""
    v = tmp_path / "root-only" / "shadow"
    v.parent.mkdir(mode=0o700)
    v.write_text("precious\n")
    return v


def assert_healthy(handler: SafeFileHandler) -> os.stat_result:
    st = os.fstat(handler.fileno())
    assert stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and st.st_nlink <= 1
    return st


# -- opening -----------------------------------------------------------------------------------
def test_a_fresh_log_in_a_sticky_directory_is_ours_and_0600(shared: Path) -> None:
    h = SafeFileHandler(shared / "agent.log", 1 << 20)
    try:
        h.handle(record("hello %s", "world"))
    finally:
        h.close()
    st = (shared / "agent.log").lstat()
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.geteuid()
    assert (shared / "agent.log").read_text() == "hello world\n"


def test_a_fifo_at_the_name_is_refused_without_blocking(shared: Path) -> None:
    fifo = shared / "agent.log"
    os.mkfifo(fifo, 0o666)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # with a reader an open for writing would succeed
    try:
        with pytest.raises(UnsafePath) as err:
            bounded(lambda: SafeFileHandler(fifo, 1 << 20))
        assert (err.value.problem, err.value.component) == (PathProblem.NOT_REGULAR, str(fifo))
        assert drain(reader) == b""
    finally:
        os.close(reader)


def test_a_fifo_at_the_name_does_not_stop_the_command(shared: Path, gpulens_exe: str) -> None:
    os.mkfifo(shared / "agent.log", 0o666)
    out = subprocess.run([gpulens_exe, "--log-file", str(shared / "agent.log"), "jobs"],
                         capture_output=True, text=True, timeout=BOUND_S, check=False)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        f"gpulens: configuration error: --log-file {shared}/agent.log: cannot open: {shared}/agent.log "
        "is not a regular file (a FIFO, device, socket or directory); gpulens writes its log only to a regular file"
    ]


def test_a_symlink_at_the_name_is_refused_and_its_target_untouched(shared: Path, tmp_path: Path) -> None:
    victim = victim_file(tmp_path)
    (shared / "agent.log").symlink_to(victim)
    with pytest.raises(UnsafePath) as err:
        SafeFileHandler(shared / "agent.log", 1 << 20)
    assert (err.value.problem, err.value.component) == (PathProblem.SYMLINK, str(shared / "agent.log"))
    assert victim.read_text() == "precious\n"


def test_a_hard_link_to_a_file_of_ours_is_refused(shared: Path, tmp_path: Path) -> None:
    victim = victim_file(tmp_path)
    os.link(victim, shared / "agent.log")  # what a user could do to root's file with protected_hardlinks=0
    with pytest.raises(UnsafePath) as err:
        SafeFileHandler(shared / "agent.log", 1 << 20)
    assert err.value.problem is PathProblem.HARD_LINKED
    assert victim.read_text() == "precious\n"


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o703])
def test_a_directory_others_can_write_is_refused_unless_sticky(tmp_path: Path, mode: int) -> None:
    d = tmp_path / "open"
    d.mkdir()
    d.chmod(mode)
    with pytest.raises(UnsafePath) as err:
        SafeFileHandler(d / "agent.log", 1 << 20)
    assert (err.value.problem, err.value.component) == (PathProblem.WRITABLE_BY_OTHERS, str(d))
    assert not (d / "agent.log").exists()


def test_a_symlink_on_the_directory_path_is_refused(shared: Path, tmp_path: Path) -> None:
    (shared / "logs").symlink_to(tmp_path)
    with pytest.raises(UnsafePath) as err:
        SafeFileHandler(shared / "logs" / "agent.log", 1 << 20)
    assert (err.value.problem, err.value.component) == (PathProblem.SYMLINK, str(shared / "logs"))
    assert not (tmp_path / "agent.log").exists()


def test_an_existing_log_of_ours_is_appended_and_tightened(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    log.write_text("before\n")
    log.chmod(0o644)
    h = SafeFileHandler(log, 1 << 20)
    try:
        h.handle(record("after"))
    finally:
        h.close()
    assert log.read_text() == "before\nafter\n" and stat.S_IMODE(log.stat().st_mode) == 0o600


# -- rotation ----------------------------------------------------------------------------------
def fill(h: SafeFileHandler, n: int, tag: str = "") -> None:
    for i in range(n):
        h.handle(record(f"{tag}{i} {LINE}"))


def test_rotation_keeps_one_old_copy(shared: Path) -> None:
    h = SafeFileHandler(shared / "agent.log", 200)
    try:
        fill(h, 7)
        assert_healthy(h)
    finally:
        h.close()
    assert h.degraded is None
    old, new = (shared / "agent.log.1").read_text(), (shared / "agent.log").read_text()
    assert old.splitlines()[0].startswith("3 ") and new.splitlines()[-1].startswith("6 ")
    assert stat.S_IMODE((shared / "agent.log").stat().st_mode) == 0o600
    assert sorted(p.name for p in shared.iterdir()) == ["agent.log", "agent.log.1"]  # no temporary left


def plant(kind: str, path: str, victim: str) -> None:
    """What another user leaves at a rotation name (run as her, or here as root)."""
    if kind == "fifo":
        os.mkfifo(path, 0o666)
    elif kind == "symlink":
        os.symlink(victim, path)
    else:
        os.mkdir(path, 0o777)


def plant_during_rotation(monkeypatch: pytest.MonkeyPatch, action: Callable[[], None]) -> None:
    """Run ``action`` between the rotation's two renames (NAME -> NAME.1, new -> NAME)."""
    real = os.rename

    def rename(src: str, dst: str, *, src_dir_fd: int | None = None, dst_dir_fd: int | None = None) -> None:
        real(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
        if str(dst).endswith(".log.1"):
            action()

    monkeypatch.setattr(os, "rename", rename)  # logfile calls os.rename; restored after the test


def check_after_planting(h: SafeFileHandler, shared: Path, victim: Path, readers: list[int]) -> str:
    """Nothing was written through; the handler's fd is still ours; a new record lands somewhere known."""
    before = assert_healthy(h)
    bounded(lambda: h.handle(record("after the rotation")))
    st = assert_healthy(h)
    assert st.st_ino == before.st_ino
    assert victim.read_text() == "precious\n"
    assert all(drain(fd) == b"" for fd in readers)
    log, old = shared / "agent.log", shared / "agent.log.1"
    if h.degraded is None:
        assert log.lstat().st_ino == st.st_ino and log.read_text().endswith("after the rotation\n")
        return "rotated"
    where = old if f"({old})" in h.degraded else log
    assert where.lstat().st_ino == st.st_ino and stat.S_ISREG(where.lstat().st_mode)
    text = where.read_text()
    assert text.startswith("gpulens: log restarted: ") and text.endswith("after the rotation\n")
    return "degraded"


@pytest.mark.parametrize("kind, expected", [("fifo", "rotated"), ("symlink", "rotated"), ("dir", "degraded")])
def test_a_thing_planted_at_the_name_during_rotation(
    shared: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, expected: str
) -> None:
    victim = victim_file(tmp_path)
    readers: list[int] = []

    def action() -> None:
        plant(kind, str(shared / "agent.log"), str(victim))
        if kind == "fifo":
            readers.append(os.open(shared / "agent.log", os.O_RDONLY | os.O_NONBLOCK))

    h = SafeFileHandler(shared / "agent.log", 200)
    try:
        fill(h, 3)
        plant_during_rotation(monkeypatch, action)
        bounded(lambda: fill(h, 1, "rot"))
        assert check_after_planting(h, shared, victim, readers) == expected
    finally:
        h.close()
        for fd in readers:
            os.close(fd)


@pytest.mark.parametrize("kind, expected", [("fifo", "rotated"), ("symlink", "rotated"), ("dir", "degraded")])
def test_a_thing_planted_at_the_old_copy_name(shared: Path, tmp_path: Path, kind: str, expected: str) -> None:
    victim = victim_file(tmp_path)
    plant(kind, str(shared / "agent.log.1"), str(victim))
    readers = [os.open(shared / "agent.log.1", os.O_RDONLY | os.O_NONBLOCK)] if kind == "fifo" else []
    h = SafeFileHandler(shared / "agent.log", 200)
    try:
        bounded(lambda: fill(h, 5))
        assert check_after_planting(h, shared, victim, readers) == expected
    finally:
        h.close()
        for fd in readers:
            os.close(fd)


def test_a_failed_reopen_never_leaves_a_dangling_fd(
    shared: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old handler closed its fd, failed to open the new file and kept the number: the next
    socket the agent accepted got the log. Now the verified fd stays until a new one replaces it."""
    victim = victim_file(tmp_path)
    monkeypatch.setattr(logfile, "_temp_name", lambda name: f".{name}.guessed.new")
    (shared / ".agent.log.guessed.new").symlink_to(victim)  # the create O_EXCL|O_NOFOLLOW fails
    warned: list[str] = []
    h = SafeFileHandler(shared / "agent.log", 200, warn=warned.append)
    try:
        fill(h, 3)
        before = assert_healthy(h)
        bounded(lambda: fill(h, 1, "rot"))
        assert h.degraded is not None and "cannot create a new log file" in h.degraded
        assert warned == [h.degraded]
        a, b = socket.socketpair()  # gets the lowest free numbers: the one a closed log fd would leave
        try:
            b.setblocking(False)
            fill(h, 6, "more")
            with pytest.raises(BlockingIOError):
                b.recv(1 << 16)
        finally:
            a.close()
            b.close()
        assert assert_healthy(h).st_ino == before.st_ino == (shared / "agent.log").stat().st_ino
        text = (shared / "agent.log").read_text()
        assert text.startswith("gpulens: log restarted: cannot create a new log file")
        assert len(text) <= 200 + len(h.degraded) + 100  # still truncated in place: bounded
    finally:
        h.close()
    assert victim.read_text() == "precious\n"


# -- the rate limit ----------------------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@dataclass(frozen=True, slots=True)
class Limited:
    """A logger with two handlers behind one :class:`RateLimit` on a frozen clock."""

    log: logging.Logger
    limit: RateLimit
    clock: Clock
    timers: list[tuple[float, Callable[[], None]]]
    kept: Kept


@pytest.fixture
def limited() -> Iterator[Limited]:
    clock = Clock()
    timers: list[tuple[float, Callable[[], None]]] = []
    limit = RateLimit(10, 60.0, clock=clock, schedule=lambda d, cb: timers.append((d, cb)))
    log = logging.getLogger(f"gpulens.test_seclog.{id(limit)}")
    log.propagate = False
    log.setLevel(logging.DEBUG)
    kept, other = Kept(), Kept()
    for h in (kept, other):  # one limit on two handlers: each record counted once
        h.addFilter(limit)
        log.addHandler(h)
    yield Limited(log, limit, clock, timers, kept)
    assert other.lines == kept.lines
    for h in (kept, other):
        log.removeHandler(h)


def test_5000_identical_warnings_make_10_lines_and_one_exact_count(limited: Limited) -> None:
    log, clock, timers, kept = limited.log, limited.clock, limited.timers, limited.kept
    for i in range(5000):
        log.warning("dropped malformed Kineto datagram: %s", f"junk {i}")
    assert kept.lines == [f"dropped malformed Kineto datagram: junk {i}" for i in range(10)]
    assert [d for d, _ in timers] == [60.0]  # one timer for the window's end, not one per record
    clock.now += 60
    timers[0][1]()  # the timer fires
    assert kept.lines[10:] == [
        "… 4,990 more like this in the last minute (dropped malformed Kineto datagram: %s)"
    ]
    timers[0][1]()  # a late second call writes nothing twice
    assert len(kept.lines) == 11


def test_the_count_comes_before_the_next_record_when_no_timer_ran(limited: Limited) -> None:
    log, limit, clock, kept = limited.log, limited.limit, limited.clock, limited.kept
    for _ in range(25):
        log.warning("refused %s", "peer")
    log.warning("another kind")  # other kinds have their own allowance
    clock.now += 61
    log.warning("refused %s", "peer")
    assert kept.lines[10:] == [
        "another kind", "… 15 more like this in the last minute (refused %s)", "refused peer",
    ]
    assert limit.flush(clock.now + 1000) == ()  # the late timer finds nothing left


def test_exempt_records_always_pass(limited: Limited) -> None:
    for i in range(30):
        limited.log.warning("%s", f"shown to the user {i}", extra={EXEMPT: True})
    assert len(limited.kept.lines) == 30 and not limited.timers


def test_kinds_past_the_table_share_one_allowance() -> None:
    clock, seen = Clock(), list[Suppressed]()
    limit = RateLimit(2, 60.0, max_kinds=3, clock=clock, schedule=None, emit=seen.append)
    passed = [limit.filter(record(f"kind {i}")) for i in range(10)]  # an f-string log call: a kind per text
    assert passed == [True] * 5 + [False] * 5  # 3 kinds, then 2 more for all the others together
    assert limit.flush(clock.now + 60) == (Suppressed("", "(other messages)", 5, logging.WARNING, 60.0),)
    assert seen == [Suppressed("", "(other messages)", 5, logging.WARNING, 60.0)]


def test_the_installed_log_file_is_rate_limited(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    peer = logging.getLogger("gpulens.ipc.kineto.endpoint")
    try:
        logbook.install(log)
        for i in range(5000):
            peer.warning("dropped malformed Kineto datagram: %s", f"junk {i}")
        logbook.note("what the user was shown is never dropped")
        written = logbook.limit.flush(time.monotonic() + 61)
    finally:
        logbook.install(None)
    assert [w.count for w in written] == [4990]
    lines = log.read_text().splitlines()
    assert len(lines) == 12
    assert all("WARNING gpulens.ipc.kineto.endpoint: dropped malformed Kineto datagram: junk" in x for x in lines[:10])
    assert lines[10].endswith("gpulens.tui: what the user was shown is never dropped")
    assert lines[11].endswith(
        "WARNING gpulens.ipc.kineto.endpoint: … 4,990 more like this in the last minute "
        "(dropped malformed Kineto datagram: %s)"
    )
    assert logbook.entries()[-1].message.startswith("… 4,990 more like this")


# -- attacks by another user of the node -------------------------------------------------------
def _her_file(path: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    os.write(fd, b"mallory's\n")
    os.fchmod(fd, 0o666)
    os.close(fd)


def test_her_precreated_file_is_refused_and_untouched(
    two_users: tuple[User, User], shared: Path, gpulens_exe: str
) -> None:
    _, mallory = two_users
    call_as(mallory, _her_file, str(shared / "agent.log"))
    with pytest.raises(UnsafePath) as err:
        SafeFileHandler(shared / "agent.log", 1 << 20)
    assert (err.value.problem, err.value.component) == (PathProblem.WRONG_OWNER, str(shared / "agent.log"))
    out = subprocess.run([gpulens_exe, "--log-file", str(shared / "agent.log"), "jobs"],
                         capture_output=True, text=True, timeout=BOUND_S, check=False)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert f"belongs to uid {mallory.uid}, not to this process" in out.stderr
    st = (shared / "agent.log").lstat()
    assert (shared / "agent.log").read_bytes() == b"mallory's\n"
    assert st.st_uid == mallory.uid and stat.S_IMODE(st.st_mode) == 0o666


def test_her_fifo_and_her_link_at_the_name_are_refused(
    two_users: tuple[User, User], shared: Path, tmp_path: Path
) -> None:
    _, mallory = two_users
    victim = victim_file(tmp_path)
    call_as(mallory, os.mkfifo, str(shared / "fifo.log"), 0o666)
    call_as(mallory, os.symlink, str(victim), str(shared / "link.log"))
    with pytest.raises(UnsafePath) as fifo:
        bounded(lambda: SafeFileHandler(shared / "fifo.log", 1 << 20))
    assert fifo.value.problem is PathProblem.NOT_REGULAR
    with pytest.raises(UnsafePath) as link:
        SafeFileHandler(shared / "link.log", 1 << 20)
    assert link.value.problem is PathProblem.SYMLINK
    assert victim.read_text() == "precious\n"


def test_a_directory_of_hers_is_refused(two_users: tuple[User, User], shared: Path) -> None:
    _, mallory = two_users
    call_as(mallory, os.mkdir, str(shared / "hers"), 0o755)
    with pytest.raises(UnsafePath) as err:
        SafeFileHandler(shared / "hers" / "agent.log", 1 << 20)
    assert (err.value.problem, err.value.component) == (PathProblem.WRONG_OWNER, str(shared / "hers"))


@pytest.mark.parametrize("kind, expected", [("fifo", "rotated"), ("symlink", "rotated"), ("dir", "degraded")])
def test_she_plants_at_both_rotation_names(
    two_users: tuple[User, User], shared: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    kind: str, expected: str,
) -> None:
    """She plants at NAME.1 before and at NAME between the renames, as the 4 MiB rotation runs."""
    _, mallory = two_users
    victim = victim_file(tmp_path)
    readers: list[int] = []
    h = SafeFileHandler(shared / "agent.log", 200)
    try:
        fill(h, 3)
        if kind != "dir":  # a directory at NAME.1 would stop the rotation before NAME is ever empty
            call_as(mallory, plant, kind, str(shared / "agent.log.1"), str(victim))
            if kind == "fifo":
                readers.append(os.open(shared / "agent.log.1", os.O_RDONLY | os.O_NONBLOCK))

        def action() -> None:
            call_as(mallory, plant, kind, str(shared / "agent.log"), str(victim))
            if kind == "fifo":
                readers.append(os.open(shared / "agent.log", os.O_RDONLY | os.O_NONBLOCK))

        plant_during_rotation(monkeypatch, action)
        bounded(lambda: fill(h, 1, "rot"))
        assert check_after_planting(h, shared, victim, readers) == expected
    finally:
        h.close()
        for fd in readers:
            os.close(fd)
