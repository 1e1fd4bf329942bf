"""Job matching on trees any user can build: linear whatever the depth (issue 27 item 4).

A 512-deep chain of shells named ``systemdpythonsh`` took Python's ``re`` 0.7 s
for one tree ID with the default pattern (time cubic in the ID). Here: the
default pattern runs on RE2 with the same answers as ``re`` on ordinary trees,
the tree ID is cut to the nearest names, a steady tree is not matched again,
and one user's thousands of shells are re-read in turns. A fake /proc holds
the trees: no timing is asserted.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpulens.collectors import jobs as jobs_mod
from gpulens.collectors import proctree
from gpulens.collectors.jobs import JobScanner
from gpulens.collectors.procstat import KeptStats
from gpulens.collectors.proctree import under
from gpulens.core.config import load_config, parse_config
from gpulens.core.errors import ConfigError, ConfigProblem
from gpulens.core.jobs_pattern import (
    CUT,
    DEFAULT_JOB_PATTERN,
    MAX_TREE_DEPTH,
    RE2_AVAILABLE,
    JobPattern,
    join_tree_id,
)

needs_re2 = pytest.mark.skipif(not RE2_AVAILABLE, reason="google-re2 is not installed (pip install google-re2)")

# Tree IDs of the fixtures elsewhere in tests/, and their near misses.
ORDINARY = [
    "systemd/bash/python3", "init/sshd/bash/python3", "systemd/sshd/bash/python3", "systemd/sh/python3",
    "systemd/slurmstepd/python3", "slurmstepd/python", "slurm/j7/python", "systemd/slurmstepd/bash/python3.11",
    "systemd/slurmstepd/bash/torchrunpython3.11", "systemd/containerd-shim-runc-v2/python3.11",
    "systemd/containerd/containerd-shim-runc-v2/python", "systemd/bash/python3/python3", "systemd/bash/pythonx",
    "systemd/bash/python3.11 ", "systemd/bash", "bash/python3", "systemd/zsh/tmux: server/zsh/python3.12",
    "systemd/bash/ipython", "systemd/BASH/python3", "init/bash/python3", "systemd/sh/sh/sh/python", "",
    "t", "systemd/bash/python3\n", "systemd/é/bash/python3",
]
PATTERNS = [DEFAULT_JOB_PATTERN, r"bash/python$", r"python[0-9.]*$", r"^$", "x$", r"slurmstepd/.*python",
            re.escape("systemd/sshd/bash") + r"/sh/python[0-9.]*$"]
COMMS = ["systemd", "sh", "bash", "zsh", "sshd", "python", "python3", "python3.11", "containerd-shim-runc-v2",
         "slurmstepd", "torchrun", "systemdpythonsh", "init", "pt_main_thread", "python3.11x", "tmux: server"]


@needs_re2
def test_default_pattern_runs_on_re2() -> None:
    assert JobPattern(DEFAULT_JOB_PATTERN).engine == "re2"
    assert JobPattern(DEFAULT_JOB_PATTERN).why_not_re2 is None


@needs_re2
@pytest.mark.parametrize("pattern", PATTERNS)
def test_re2_answers_as_python_re_on_ordinary_trees(pattern: str) -> None:
    compiled, python = JobPattern(pattern), re.compile(pattern)
    assert compiled.engine == "re2"
    # One known difference, kept out: RE2's $ is the end only, re's also before a final newline.
    for tree_id in ORDINARY:
        if not tree_id.endswith("\n"):
            assert compiled.search(tree_id) == (python.search(tree_id) is not None), (pattern, tree_id)


@needs_re2
@given(st.lists(st.sampled_from(COMMS), min_size=1, max_size=12))
def test_re2_answers_as_python_re_on_generated_trees(names: list[str]) -> None:
    tree_id = "/".join(names)
    for pattern in PATTERNS:
        assert JobPattern(pattern).search(tree_id) == (re.search(pattern, tree_id) is not None)


def test_a_pattern_re2_refuses_falls_back_to_python_re_and_the_config_says_so() -> None:
    pattern = r"(?<!x)bash/python(?!2)"  # lookbehind and lookahead: re only
    compiled = JobPattern(pattern)
    assert compiled.engine == "re" and compiled.why_not_re2
    assert compiled.search("systemd/bash/python3") and not compiled.search("systemd/bash/python2")
    cfg = parse_config({"job_pattern": pattern}, "c.toml")
    assert cfg.job_pattern == pattern
    if RE2_AVAILABLE:
        (line,) = cfg.warnings
        assert line.startswith("c.toml: key 'job_pattern': RE2 refuses it") and "\n" not in line
        assert "Python's re" in line and "linear" in line
    assert parse_config({"job_pattern": DEFAULT_JOB_PATTERN}, "c.toml").warnings == ()
    with pytest.raises(ConfigError) as info:
        parse_config({"job_pattern": "pyth(on"}, "c.toml")
    assert (info.value.key, info.value.problem) == ("job_pattern", ConfigProblem.BAD_PATTERN)


def test_the_pattern_flag_warns_the_same() -> None:
    from gpulens.core.config import ConfigFlags

    cfg = load_config(None, ConfigFlags(pattern=r"(a)\1"))
    if RE2_AVAILABLE:
        assert len(cfg.warnings) == 1 and cfg.warnings[0].startswith("--pattern '(a)\\\\1': RE2 refuses it")


def test_tree_cut_keeps_the_top_and_the_nearest() -> None:
    tree: proctree.Tree = (("init",), None, ())
    for pid in range(2, 514):
        tree = under(tree, pid - 1, "systemd" if pid == 2 else "sh")
        names, top, ancestors = tree
        assert len(names) == min(pid, MAX_TREE_DEPTH) and len(ancestors) == len(names) - 1
    names, top, ancestors = tree
    assert top == "init" and names == ("sh",) * MAX_TREE_DEPTH and ancestors == tuple(range(450, 513))
    assert join_tree_id(names, top) == "init/" + CUT + "/sh" * MAX_TREE_DEPTH
    assert join_tree_id(("systemd", "bash", "python3")) == "systemd/bash/python3"


# ---- a fake /proc: the scanner's reads, on trees of any shape


def _write_proc(proc: Path, procs: dict[int, tuple[int, str, int]], last_pid: int | None = None) -> None:
    """``procs``: pid -> (ppid, comm, uid); every process started long ago, asleep."""
    proc.mkdir(exist_ok=True)
    (proc / "loadavg").write_text(f"0.00 0.00 0.00 1/1 {last_pid or max(procs)}\n")
    for pid, (ppid, comm, uid) in procs.items():
        d = proc / str(pid)
        d.mkdir(exist_ok=True)
        (d / "stat").write_text(f"{pid} ({comm}) S {ppid} 0 0 0 0 0 0 0 0 0 3 4 0 0 20 0 1 0 1 0 250 0\n")
        (d / "status").write_text(f"Name:\t{comm}\nUmask:\t0022\nState:\tS\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
        (d / "cmdline").write_bytes(comm.encode() + b"\0")
        (d / "environ").write_bytes(b"")


def _chain(depth: int, comm: str, leaf: str, uid: int = 1001) -> dict[int, tuple[int, str, int]]:
    """systemd (pid 100) -> ``depth`` processes named ``comm`` -> ``leaf``."""
    procs = {100: (0, "systemd", 0)}
    for pid in range(101, 101 + depth):
        procs[pid] = (pid - 1, comm, uid)
    procs[101 + depth] = (100 + depth, leaf, uid)
    return procs


class _Counting:
    """The scanner's pattern, counting the tree IDs it is given and their characters."""

    def __init__(self, inner: JobPattern) -> None:
        self.inner, self.calls, self.chars = inner, 0, 0
        self.why_not_re2 = inner.why_not_re2

    def search(self, tree_id: str) -> bool:
        self.calls += 1
        self.chars += len(tree_id)
        return self.inner.search(tree_id)


def test_deep_chain_is_cut_matched_once_and_found(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    _write_proc(proc, _chain(512, "systemdpythonsh", "python3"))
    scanner = JobScanner(proc=str(proc))  # the default pattern; the first scan happens here
    (job,) = scanner.scan()
    assert job.pid == 613
    assert job.tree_id == "systemd/" + CUT + "/systemdpythonsh" * (MAX_TREE_DEPTH - 1) + "/python3"
    assert len(job.ancestors) == MAX_TREE_DEPTH - 1 and job.ancestors[-1] == 612
    counting = _Counting(scanner._pattern)
    scanner._pattern = counting  # type: ignore[assignment]
    for _ in range(3):
        assert [j.pid for j in scanner.scan()] == [613]
    # Every shell was re-read each tick (exec may rename it), but no tree ID changed.
    assert counting.calls == 0
    if RE2_AVAILABLE:
        assert counting.inner.engine == "re2"


def test_deep_chain_costs_linear_matching(tmp_path: Path) -> None:
    # Forcing every tree ID to be matched again: the input given to the matcher grows
    # linearly with the chain (bounded per process), not with its square.
    costs = []
    for depth in (128, 512):
        proc = tmp_path / f"proc{depth}"
        _write_proc(proc, _chain(depth, "systemdpythonsh", "sh"))
        scanner = JobScanner(proc=str(proc))
        counting = _Counting(scanner._pattern)
        scanner._pattern = counting  # type: ignore[assignment]
        for entry in scanner._cache.values():
            entry.hit_for = None
        assert scanner.scan() == ()
        assert counting.calls == depth + 1  # the shells and the leaf; systemd is neither young nor a shell
        longest = (MAX_TREE_DEPTH + 1) * 16 + len(CUT)  # 15-character names and the cut's
        assert counting.chars <= counting.calls * longest
        costs.append(counting.chars)
    assert costs[1] < 6 * costs[0]  # 4x the processes: 5x the characters here, 16x were the IDs uncut


def test_a_changed_name_is_matched_again(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    procs = _chain(3, "sh", "sh")
    _write_proc(proc, procs)
    scanner = JobScanner(proc=str(proc))
    assert scanner.scan() == ()
    (proc / "104" / "stat").write_text("104 (python3) S 103 0 0 0 0 0 0 0 0 0 3 4 0 0 20 0 1 0 1 0 250 0\n")
    (job,) = scanner.scan()  # a shell exec'd python: the same pid, a new tree ID
    assert (job.pid, job.tree_id) == (104, "systemd/sh/sh/sh/python3")


def test_one_users_shells_are_read_in_turns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobs_mod, "REREAD_PER_UID", 50)
    procs = {100: (0, "systemd", 0)}
    procs.update({pid: (100, "sh", 1001) for pid in range(101, 301)})  # 200 shells of uid 1001
    procs.update({pid: (100, "bash", 1002) for pid in range(301, 311)})  # 10 of uid 1002
    proc = tmp_path / "proc"
    _write_proc(proc, procs)
    scanner = JobScanner(proc=str(proc))
    reads: list[str] = []
    real_read = KeptStats.read  # every stat read of the scan goes through it (kept open or by path)

    def counted_read(self: KeptStats, name: str, keep: bool, size: int = 4096) -> bytes:
        reads.append(name)
        return real_read(self, name, keep, size)

    monkeypatch.setattr(KeptStats, "read", counted_read)
    seen: set[int] = set()
    for tick in range(4):
        reads.clear()
        scanner.scan()
        read = {int(name) for name in reads}
        assert len(read & set(range(101, 301))) == 50, tick  # uid 1001: its budget, no more
        assert set(range(301, 311)) <= read, tick  # uid 1002 is not starved by 1001
        assert scanner.deferred == {1001: 150}
        assert "uid 1001: 150" in scanner.notes["jobs.budget"]
        seen |= read
    assert set(range(101, 301)) <= seen  # in turns: every shell read within 4 ticks


def test_without_re2_python_re_matches_and_the_sampler_says_why(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from gpulens.core import config as config_mod
    from gpulens.core import jobs_pattern

    monkeypatch.setattr(jobs_pattern, "_RE2", None)
    monkeypatch.setattr(config_mod, "RE2_AVAILABLE", False)
    compiled = JobPattern(DEFAULT_JOB_PATTERN)
    assert (compiled.engine, compiled.why_not_re2) == ("re", "google-re2 is not installed")
    assert compiled.search("systemd/bash/python3") and not compiled.search("systemd/bash")
    assert parse_config({"job_pattern": r"(?=x)x"}, "c.toml").warnings == ()  # not the pattern's fault
    proc = tmp_path / "proc"
    _write_proc(proc, _chain(2, "bash", "python3"))
    scanner = JobScanner(proc=str(proc))
    assert [j.tree_id for j in scanner.scan()] == ["systemd/bash/bash/python3"]
    assert "google-re2 is not installed" in scanner.notes["jobs.pattern"]


def test_cgroup_is_read_once_per_pid_and_start_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpulens.collectors import workloads

    proc = tmp_path / "proc"
    _write_proc(proc, _chain(1, "bash", "python3"))  # systemd -> bash -> python3 (pid 102)
    (proc / "102" / "cgroup").write_text("0::/system.slice/slurmstepd.scope/job_77/step_0/user/task_0\n")
    cgroup_reads: list[str] = []
    real_read = workloads._read

    def counted_read(path: str, limit: int) -> bytes:
        if path.endswith("/cgroup"):
            cgroup_reads.append(path)
        return real_read(path, limit)

    monkeypatch.setattr(workloads, "_read", counted_read)
    scanner = JobScanner(proc=str(proc))
    for _ in range(3):
        (job,) = scanner.scan()
        assert job.pid == 102 and job.workload is not None and job.workload.slurm_job == "77"
    assert cgroup_reads == [f"{proc}/102/cgroup"]  # once, however many ticks
    # pid 102 is another process now (another start time; the pid was handed out again)
    (proc / "102" / "stat").write_text("102 (python3) S 101 0 0 0 0 0 0 0 0 0 3 4 0 0 20 0 1 0 9 0 250 0\n")
    scanner.scan()  # its start time differs from the job's: dropped, and read as new when /proc is listed
    (proc / "loadavg").write_text("0.00 0.00 0.00 1/1 103\n")  # a pid was handed out: /proc is listed
    (job,) = scanner.scan()
    assert job.pid == 102 and cgroup_reads == [f"{proc}/102/cgroup"] * 2  # read again for the new process
