"""Job detection on a real process tree the test spawns.

This machine has no systemd, so the pattern is built from the test's own
tree ID (read independently from /proc/PID/comm) plus ``/sh/python``: the
spawned ``sh`` runs two Python children, which are the jobs.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from gpulens.collectors import job_details, newpids
from gpulens.collectors import jobs as jobs_mod
from gpulens.collectors.jobs import JobScanner
from gpulens.collectors.procstat import KeptStats
from gpulens.collectors.proctree import parse_stat

SLEEPER = "import time; time.sleep(60)"
READY_SLEEPER = ('import os, pathlib, time; pathlib.Path(os.environ["SLEEPER_READY"], str(os.getpid())).touch(); '
                 "time.sleep(60)")
"""A sleeper that says it is ready (a file named by its pid, in $SLEEPER_READY) just before it sleeps."""


def _tree_id(pid: int) -> str:
    names = []
    while pid > 0:
        names.append(Path(f"/proc/{pid}/comm").read_text().rstrip("\n"))
        pid = psutil.Process(pid).ppid()
    return "/".join(reversed(names))


def _wait_for(cond: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


def _children(pid: int) -> list[psutil.Process]:
    found: list[psutil.Process] = psutil.Process(pid).children()
    return found


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], list[int], str]]:
    """sh -> two python sleepers, both started up and sleeping; yields (sh, python pids, pattern)."""
    py = sys.executable
    ready = tmp_path / "ready"
    ready.mkdir()
    env = {**os.environ, "SLURM_JOB_ID": "4242", "TORCHELASTIC_RUN_ID": "run-7", "SLEEPER_READY": str(ready)}
    sh = subprocess.Popen(
        ["/bin/sh", "-c", f"'{py}' -c '{READY_SLEEPER}' & '{py}' -c '{READY_SLEEPER}' & wait"], env=env
    )
    try:
        _wait_for(lambda: len(_children(sh.pid)) == 2 and all(
            Path(f"/proc/{c.pid}/comm").read_text().startswith("python") for c in _children(sh.pid)))
        pids = sorted(c.pid for c in _children(sh.pid))
        # Both said they are ready: the interpreters' start-up (and its RSS growth) is over, they only sleep.
        _wait_for(lambda: sorted(int(f.name) for f in ready.iterdir()) == pids)
        pattern = re.escape(_tree_id(os.getpid())) + r"/sh/python[0-9.]*$"
        yield sh, pids, pattern
    finally:
        for c in psutil.Process(sh.pid).children(recursive=True) if sh.poll() is None else []:
            c.kill()
        sh.kill()
        sh.wait()


def test_spawned_tree_is_found_with_details(tree: tuple[subprocess.Popen[bytes], list[int], str]) -> None:
    sh, pids, pattern = tree
    scanner = JobScanner(pattern)
    time.sleep(0.2)
    found = scanner.scan()
    assert sorted(j.pid for j in found) == pids
    me = _tree_id(os.getpid())
    for job in found:
        proc = psutil.Process(job.pid)
        assert job.tree_id == _tree_id(job.pid)
        assert job.tree_id.startswith(me + "/sh/python")
        assert job.cmdline == " ".join(proc.cmdline())
        assert job.user == proc.username()
        assert abs(job.start_time - proc.create_time()) < 0.05
        assert job.ancestors[-1] == sh.pid and job.ancestors[-2] == os.getpid()
        assert job.job_key == "SLURM_JOB_ID=4242"  # first of DEFAULT_JOB_KEY_ENV present
        assert job.cpu_percent is not None and job.cpu_percent >= 0.0
        assert job.rss_bytes is not None
        assert abs(job.rss_bytes - proc.memory_info().rss) <= 1 << 20  # 1 MiB: the sleeper is idle
    # the scanning process itself and its shell are not jobs
    assert os.getpid() not in {j.pid for j in found} and sh.pid not in {j.pid for j in found}


def test_job_key_order_is_the_configured_one(tree: tuple[subprocess.Popen[bytes], list[int], str]) -> None:
    _sh, _pids, pattern = tree
    found = JobScanner(pattern, job_key_env=("NOT_SET", "TORCHELASTIC_RUN_ID")).scan()
    assert {j.job_key for j in found} == {"TORCHELASTIC_RUN_ID=run-7"}
    assert {j.job_key for j in JobScanner(pattern, job_key_env=()).scan()} == {None}


def test_process_exiting_during_the_scan_is_skipped(
    tree: tuple[subprocess.Popen[bytes], list[int], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _sh, pids, pattern = tree
    victim = pids[0]
    scanner = JobScanner(pattern)
    assert victim in {j.pid for j in scanner.scan()}
    real_read = KeptStats.read
    killed: list[int] = []

    # A job's stat is read through KeptStats (kept open after its first read as a job).
    def read_killing_victim(self: KeptStats, name: str, keep: bool, size: int = 4096) -> bytes:
        if name == str(victim) and not killed:
            # The process dies for real between the /proc listing and this read.
            os.kill(victim, signal.SIGKILL)
            _wait_for(lambda: not Path(f"/proc/{victim}").exists()
                      or Path(f"/proc/{victim}/stat").read_text().split(") ")[1][0] == "Z")
            killed.append(victim)
        return real_read(self, name, keep, size)

    monkeypatch.setattr(KeptStats, "read", read_killing_victim)
    found = scanner.scan()
    assert killed == [victim]
    assert sorted(j.pid for j in found) == pids[1:]


def _open_stat_files(pids: list[int]) -> set[int]:
    """Which of ``pids`` this process holds a ``/proc/PID/stat`` descriptor of."""
    held = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # the listing's own descriptor, closed by now
        for pid in pids:
            if target == f"/proc/{pid}/stat":
                held.add(pid)
    return held


@pytest.mark.parametrize("exec_events", [False, True], ids=["shells-reread", "exec-events"])
def test_jobs_stat_files_stay_open_and_are_given_back(
    tree: tuple[subprocess.Popen[bytes], list[int], str], exec_events: bool
) -> None:
    sh, pids, pattern = tree
    scanner = JobScanner(pattern, exec_events=exec_events)
    if exec_events and scanner.events_why:
        pytest.skip(f"no exec events here: {scanner.events_why}")
    first = scanner.scan()
    assert sorted(j.pid for j in first) == pids
    scanner.scan()
    # The jobs are read every tick; their shell too unless the kernel says when it execs.
    assert _open_stat_files([*pids, sh.pid]) == ({*pids} if exec_events else {*pids, sh.pid})
    again = scanner.scan()  # read through the kept files: the same jobs, CPU % a real rate
    assert sorted(j.pid for j in again) == pids and all(j.cpu_percent is not None for j in again)
    os.kill(pids[0], signal.SIGKILL)
    # Reaped by the shell's wait: a zombie still young would be read again next tick (kept open meanwhile).
    _wait_for(lambda: not os.path.exists(f"/proc/{pids[0]}"))
    assert sorted(j.pid for j in scanner.scan()) == pids[1:]  # dead: gone from the jobs
    assert _open_stat_files(pids) == {pids[1]}  # and its kept file closed with it
    scanner.close()
    assert _open_stat_files([*pids, sh.pid]) == set()


EXEC_EVENTS = pytest.mark.parametrize("exec_events", [False, True], ids=["shells-reread", "exec-events"])


def _scanner(pattern: str, exec_events: bool) -> JobScanner:
    scanner = JobScanner(pattern, exec_events=exec_events)
    if exec_events and scanner.events_why:
        scanner.close()
        pytest.skip(f"no exec events here (needs root in the initial namespaces): {scanner.events_why}")
    return scanner


@EXEC_EVENTS
def test_exec_after_fork_is_seen(tmp_path: Path, exec_events: bool) -> None:
    # sh starts as "sh" and becomes python by exec: the scanner must notice.
    go = tmp_path / "go"
    py = sys.executable
    proc = subprocess.Popen(
        ["/bin/sh", "-c", f"while [ ! -e '{go}' ]; do sleep 0.02; done; exec '{py}' -c '{SLEEPER}'"]
    )
    try:
        pattern = re.escape(_tree_id(os.getpid())) + r"/python[0-9.]*$"
        scanner = _scanner(pattern, exec_events)
        assert proc.pid not in {j.pid for j in scanner.scan()}
        go.touch()
        _wait_for(lambda: Path(f"/proc/{proc.pid}/comm").read_text().startswith("python"))
        found = {j.pid: j for j in scanner.scan()}
        assert proc.pid in found
        assert found[proc.pid].cmdline.endswith(SLEEPER)
    finally:
        proc.kill()
        proc.wait()


@EXEC_EVENTS
def test_old_shell_exec_is_seen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exec_events: bool) -> None:
    # A batch script that sets up for longer than YOUNG_S, then execs python.
    monkeypatch.setattr(jobs_mod, "YOUNG_S", 0.0)  # every process counts as old at once
    go = tmp_path / "go"
    py = sys.executable
    proc = subprocess.Popen(
        ["/bin/sh", "-c", f"while [ ! -e '{go}' ]; do sleep 0.02; done; exec '{py}' -c '{SLEEPER}'"]
    )
    try:
        _wait_for(lambda: Path(f"/proc/{proc.pid}/comm").read_text().strip() == "sh")
        scanner = _scanner(re.escape(_tree_id(os.getpid())) + r"/python[0-9.]*$", exec_events)
        assert proc.pid not in {j.pid for j in scanner.scan()}
        scanner.scan()
        # An idle old shell: re-read every tick, or with exec events never until it execs.
        assert (proc.pid in _open_stat_files([proc.pid])) is not exec_events
        go.touch()
        _wait_for(lambda: Path(f"/proc/{proc.pid}/comm").read_text().startswith("python"))
        assert proc.pid in {j.pid for j in scanner.scan()}
    finally:
        proc.kill()
        proc.wait()


def _kill_tree(proc: subprocess.Popen[bytes], *others: int) -> None:
    pids = [*others, proc.pid]
    for pid in pids:
        try:
            for child in psutil.Process(pid).children(recursive=True):
                child.kill()
            psutil.Process(pid).kill()
        except psutil.NoSuchProcess:
            pass
    proc.wait()


@EXEC_EVENTS
def test_an_old_shell_whose_parent_exits_is_placed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exec_events: bool
) -> None:
    monkeypatch.setattr(jobs_mod, "YOUNG_S", 0.0)  # nothing is re-read for being young
    die = tmp_path / "die"
    outer = subprocess.Popen(["/bin/sh", "-c", f"/bin/sh -c 'sleep 60; true' & "
                                               f"while [ ! -e '{die}' ]; do sleep 0.02; done"])
    inner = 0
    try:
        _wait_for(lambda: any(c.name() == "sh" for c in _children(outer.pid)))
        inner = next(c.pid for c in _children(outer.pid) if c.name() == "sh")
        scanner = _scanner(re.escape(_tree_id(os.getpid())) + "/sh/sh$", exec_events)
        assert inner in {j.pid for j in scanner.scan()}
        die.touch()
        outer.wait(timeout=10)
        _wait_for(lambda: psutil.Process(inner).ppid() != outer.pid)
        # Orphaned: its tree is its new parent's now, and no longer the pattern's.
        assert inner not in {j.pid for j in scanner.scan()}
    finally:
        _kill_tree(outer, *([inner] if inner else []))


@EXEC_EVENTS
def test_children_follow_a_parent_that_execs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exec_events: bool
) -> None:
    monkeypatch.setattr(jobs_mod, "YOUNG_S", 0.0)
    go = tmp_path / "go"
    py = sys.executable
    outer = subprocess.Popen(["/bin/sh", "-c", f"/bin/sh -c 'sleep 60; true' & "
                                               f"while [ ! -e '{go}' ]; do sleep 0.02; done; exec '{py}' -c '{SLEEPER}'"])
    inner = 0
    try:
        _wait_for(lambda: any(c.name() == "sh" for c in _children(outer.pid)))
        inner = next(c.pid for c in _children(outer.pid) if c.name() == "sh")
        scanner = _scanner(re.escape(_tree_id(os.getpid())) + r"/python[0-9.]*/sh$", exec_events)
        assert inner not in {j.pid for j in scanner.scan()}
        go.touch()
        _wait_for(lambda: Path(f"/proc/{outer.pid}/comm").read_text().startswith("python"))
        assert inner in {j.pid for j in scanner.scan()}  # its parent's new name is in its tree
    finally:
        _kill_tree(outer, *([inner] if inner else []))


def test_old_processes_are_not_reread(
    tree: tuple[subprocess.Popen[bytes], list[int], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _sh, pids, pattern = tree
    monkeypatch.setattr(jobs_mod, "YOUNG_S", 0.0)  # everything counts as old
    scanner = JobScanner(pattern)
    reads: list[str] = []
    real_read = job_details.read_bounded

    def counting_read(path: str, limit: int = 4096) -> bytes:
        reads.append(path)
        return real_read(path, limit)

    monkeypatch.setattr("gpulens.collectors.jobs.read_bounded", counting_read)  # the scanner's own binding
    monkeypatch.setattr(job_details, "read_bounded", counting_read)  # the command line and environment
    scanner.scan()
    # The two jobs' stat files and the shells' (re-read for exec); new pids born
    # meanwhile may add a few reads.
    assert {f"/proc/{p}/stat" for p in pids} <= set(reads)
    shells = {f"/proc/{name}/stat" for name in scanner._shells}
    assert len([r for r in reads if r not in shells]) < 10, reads
    assert not any(r.endswith(("/cmdline", "/environ")) for r in reads)  # cached per (pid, start)


def test_bad_pattern_raises() -> None:
    with pytest.raises(re.error):
        JobScanner("pyth(on")


def test_parse_stat_hostile_comm() -> None:
    line = b"42 (a) (b) c) S 1 42 42 0 -1 4194560 1 0 0 0 7 3 0 0 20 0 1 0 12345 1000 250 0\n"
    stat = parse_stat(line)
    assert (stat.comm, stat.state, stat.ppid) == ("a) (b) c", "S", 1)
    assert (stat.cpu_ticks, stat.start_ticks, stat.rss_pages) == (10, 12345, 250)
    with pytest.raises(ValueError):
        parse_stat(b"garbage")
    with pytest.raises(IndexError):
        parse_stat(b"1 (x) S 1")


def test_allocated_pid_range_wraps() -> None:
    scanner = JobScanner("^$")
    pids = scanner._pids
    pids._prev = 100
    assert pids.allocated(101, 105) and pids.allocated(105, 105)
    assert not pids.allocated(100, 105) and not pids.allocated(106, 105)
    pids._prev = 4_194_000  # wrapped past pid_max to 300
    assert pids.allocated(4_194_001, 300) and pids.allocated(2, 300)
    assert not pids.allocated(301, 300) and not pids.allocated(4_194_000, 300)
    assert not pids.allocated(5, 4_194_000)  # nothing allocated


def test_no_listing_while_no_pid_is_allocated(monkeypatch: pytest.MonkeyPatch) -> None:
    scanner = JobScanner("^$")
    listed: list[str] = []
    real_listdir = os.listdir

    def counted_listdir(path: str) -> list[str]:
        listed.append(path)
        return real_listdir(path)

    monkeypatch.setattr(os, "listdir", counted_listdir)  # what newpids lists /proc with
    monkeypatch.setattr(scanner._pids, "_loadavg", lambda: b"0.00 0.00 0.00 1/1 12345\n")
    scanner._pids.forget()
    scanner.scan()  # the last pid was not known: list
    assert len(listed) == 1
    for _ in range(newpids.FULL_EVERY):
        scanner.scan()
    assert len(listed) == 1  # unchanged: no listing
    scanner.scan()
    assert len(listed) == 2  # every FULL_EVERY quiet ticks anyway, to drop dead pids
