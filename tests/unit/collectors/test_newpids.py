"""New processes without listing /proc whole (collectors/newpids.py), and idle shells left where they are.

The first tests run on this machine's /proc: a process started between two scans is
found by reading the listing from the first pid handed out on, and a thread started
between them (its id is a pid too) is not a process. The others use a fake /proc
tree, where the listing cannot be read from an offset and is listed whole.
"""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

import pytest

from gpulens.collectors import newpids
from gpulens.collectors.jobs import JobScanner
from gpulens.collectors.newpids import NewPids


def _last_pid() -> int:
    return int(Path("/proc/loadavg").read_text().split()[4])


class _WholeListings:
    """How many times ``proc`` is listed whole from now on (``os.listdir`` of it: what a tick that lists does)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, proc: str) -> None:
        self.count = 0
        real = os.listdir

        def listdir(path: str) -> list[str]:
            if os.fspath(path) == proc:
                self.count += 1
            return real(path)

        monkeypatch.setattr(os, "listdir", listdir)  # newpids calls os.listdir


def test_a_new_process_is_found_without_listing_proc_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    scanner = JobScanner("^$")
    pids = scanner._pids
    assert pids._seek  # this kernel's /proc: its listing is read from a pid's offset
    scanner.scan()
    whole = _WholeListings(monkeypatch, "/proc")
    before = _last_pid()
    child = subprocess.Popen(["sleep", "30"])
    try:
        if child.pid < before:
            pytest.skip("the pids wrapped past pid_max just now: /proc is listed whole then")
        scanner.scan()
        assert str(child.pid) in scanner._cache  # read as a new process
        assert scanner._cache[str(child.pid)].stat.ppid == os.getpid()
        assert whole.count == 0  # /proc was not listed whole for it
    finally:
        child.kill()
        child.wait()
    scanner.close()


def test_a_new_thread_is_no_new_process() -> None:
    scanner = JobScanner("^$")
    scanner.scan()
    started, stop, tids = threading.Event(), threading.Event(), []

    def run() -> None:
        tids.append(threading.get_native_id())
        started.set()
        stop.wait(30)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        started.wait(10)
        assert Path(f"/proc/{tids[0]}/stat").exists()  # a thread's id answers under /proc
        assert _last_pid() >= tids[0]
        scanner.scan()
        assert str(tids[0]) not in scanner._cache  # as a listing of /proc leaves it out
        assert str(os.getpid()) in scanner._cache
    finally:
        stop.set()
        thread.join()
    scanner.close()


def test_reading_from_an_offset_gives_the_processes_in_the_range() -> None:
    pids = NewPids("/proc", lambda: Path("/proc/loadavg").read_bytes())
    me = os.getpid()
    assert pids._from(me, me) == [str(me)]
    children = [subprocess.Popen(["sleep", "30"]) for _ in range(3)]
    try:
        low, high = min(c.pid for c in children), max(c.pid for c in children)
        found = pids._from(low, high)
        assert found is not None and {str(c.pid) for c in children} <= set(found)
        assert all(low <= int(name) <= high for name in found)
    finally:
        for c in children:
            c.kill()
            c.wait()
    pids.close()


def _write_proc(proc: Path, procs: dict[int, tuple[int, str]], last_pid: int) -> None:
    """``procs``: pid -> (ppid, comm); every process started long ago, asleep, uid 1001."""
    proc.mkdir(exist_ok=True)
    (proc / "loadavg").write_text(f"0.00 0.00 0.00 1/1 {last_pid}\n")
    for pid, (ppid, comm) in procs.items():
        d = proc / str(pid)
        d.mkdir(exist_ok=True)
        (d / "stat").write_text(f"{pid} ({comm}) S {ppid} 0 0 0 0 0 0 0 0 0 3 4 0 0 20 0 1 0 1 0 250 0\n")
        (d / "status").write_text(f"Name:\t{comm}\nUid:\t1001\t1001\t1001\t1001\n")
        (d / "cmdline").write_bytes(comm.encode() + b"\0")
        (d / "environ").write_bytes(b"")


def test_a_fake_tree_is_listed_whole_when_a_pid_is_handed_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proc = tmp_path / "proc"
    _write_proc(proc, {100: (0, "systemd"), 101: (100, "bash")}, last_pid=101)
    scanner = JobScanner("python3$", proc=str(proc))
    pids = scanner._pids
    assert not pids._seek  # no kernel offsets in a plain directory
    whole = _WholeListings(monkeypatch, str(proc))
    assert scanner.scan() == ()
    assert whole.count == 0  # nothing handed out: nothing listed
    _write_proc(proc, {102: (101, "python3")}, last_pid=102)
    (job,) = scanner.scan()
    assert (job.pid, job.tree_id) == (102, "systemd/bash/python3") and whole.count == 1


def test_a_wrapped_last_pid_lists_proc_whole(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    _write_proc(proc, {100: (0, "systemd"), 4000: (100, "bash")}, last_pid=4000)
    pids = NewPids(str(proc), lambda: (proc / "loadavg").read_bytes())
    assert pids.tick(()).listed is not None  # the first tick lists
    _write_proc(proc, {300: (100, "python3")}, last_pid=300)  # wrapped past pid_max to 300
    found = pids.tick({"100", "4000"})
    assert found.listed is not None and "300" in found.new and "4000" not in found.new
    for _ in range(newpids.FULL_EVERY):
        assert pids.tick({"100", "300", "4000"}).listed is None  # nothing handed out
    assert pids.tick({"100", "300", "4000"}).listed is not None  # listed whole every FULL_EVERY ticks


def test_an_idle_shell_is_placed_again_when_its_parent_changed(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    _write_proc(proc, {100: (0, "systemd"), 101: (100, "sh"), 102: (101, "bash")}, last_pid=102)
    scanner = JobScanner("^systemd/python3/bash$", proc=str(proc))
    assert scanner.scan() == ()
    placed = scanner._cache["102"].names
    assert scanner.scan() == () and scanner._cache["102"].names is placed  # idle: not placed again
    # The parent shell exec'd python3 (same pid): its child's tree changes though its stat line does not.
    (proc / "101" / "stat").write_text("101 (python3) S 100 0 0 0 0 0 0 0 0 0 3 4 0 0 20 0 1 0 1 0 250 0\n")
    (job,) = scanner.scan()
    assert (job.pid, job.tree_id) == (102, "systemd/python3/bash")
