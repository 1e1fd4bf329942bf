"""``scontrol pidinfo`` as the last way to a process's Slurm job: parsing, asking once, bounds, a dead slurmd.

The real command against a real slurmd is in tests/integration/test_slurm_real.py;
here a recorded runner stands in for it, so that bounds and failures can be forced.
"""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

from gpulens.collectors import slurm_pidinfo as sp
from gpulens.collectors.slurm_pidinfo import SlurmPidinfo, parse_pidinfo

# What Slurm 22.05's scontrol printed here (tests/fakes/slurm_cluster.py), and older releases' wording.
OUT_2205 = "Slurm JobId=1 ends at Mon Dec 06 23:08:17 2027\nJob remaining time is 31535998 seconds\n"
OUT_OLD = "Slurm job id 4242 ends at Thu Jan  1 00:00:00 2026\nslurm_get_rem_time is 100\n"


def test_the_job_is_read_from_both_wordings() -> None:
    assert parse_pidinfo(0, OUT_2205, "") == ("1", None)
    assert parse_pidinfo(0, OUT_OLD, "") == ("4242", None)


def test_a_process_in_no_job_is_an_answer_not_a_failure() -> None:
    assert parse_pidinfo(1, "", "slurm_pid2jobid: Failed to locate job for requested pid\n") == (None, None)


def test_a_slurmd_that_cannot_be_reached_is_a_reason() -> None:
    job, why = parse_pidinfo(1, "", "scontrol: error: slurm_pid2jobid: Unable to contact slurm controller\n")
    assert job is None and why is not None and "Unable to contact" in why
    assert parse_pidinfo(0, "garbage " * 10_000, "")[1] is not None  # rc 0 but no job line: no answer
    assert parse_pidinfo(0, "x" * 5000 + OUT_2205, "")[0] is None  # only the first 4 KiB are read


class Recorder:
    def __init__(self, reply: tuple[int, str, str] | Exception) -> None:
        self.reply = reply
        self.asked: list[list[str]] = []
        self.done = threading.Event()

    def __call__(self, argv: list[str]) -> tuple[int, str, str]:
        self.asked.append(argv)
        self.done.set()
        if isinstance(self.reply, Exception):
            raise self.reply
        return self.reply


def test_each_process_is_asked_once_and_answered_from_the_cache() -> None:
    run = Recorder((0, OUT_2205, ""))
    p = SlurmPidinfo("/usr/bin/scontrol", runner=run)
    assert p.answer(123, 456) == "1"
    assert p.answer(123, 456) == "1" and p.job_of(123, 456) == "1"
    assert run.asked == [["/usr/bin/scontrol", "pidinfo", "123"]]
    assert p.answer(123, 789) == "1" and len(run.asked) == 2  # a reused pid is another process


def test_job_of_never_waits_and_the_answer_comes_later() -> None:
    gate = threading.Event()
    run = Recorder((0, OUT_OLD, ""))

    def slow(argv: list[str]) -> tuple[int, str, str]:
        gate.wait(5)
        return run(argv)

    p = SlurmPidinfo("scontrol", runner=slow)
    assert p.job_of(7, 1) is None  # queued; the worker waits on the gate
    gate.set()
    assert run.done.wait(5)
    for _ in range(500):
        if p.job_of(7, 1) == "4242":
            break
        threading.Event().wait(0.01)
    assert p.job_of(7, 1) == "4242"


def test_the_queue_is_bounded() -> None:
    gate = threading.Event()
    p = SlurmPidinfo("scontrol", runner=lambda argv: (gate.wait(5), (0, OUT_2205, ""))[1])
    for pid in range(sp.MAX_PENDING * 3):
        p.job_of(pid, 0)
    assert len(p._pending) <= sp.MAX_PENDING
    gate.set()


def test_an_unreachable_slurmd_pauses_the_questions_and_says_why() -> None:
    now = [1000.0]
    run = Recorder(subprocess.TimeoutExpired(["scontrol"], sp.TIMEOUT_S))
    p = SlurmPidinfo("scontrol", runner=run, clock=lambda: now[0])
    assert p.answer(5, 5) is None
    assert p.why is not None and "TimeoutExpired" in p.why
    assert p.job_of(6, 6) is None and len(run.asked) == 1  # paused: not even queued
    assert not p._pending
    now[0] += sp.RETRY_S + 1
    run.reply = (0, OUT_2205, "")
    assert p.answer(5, 5) == "1" and p.why is None  # asked again after the pause


def test_the_cache_is_bounded() -> None:
    p = SlurmPidinfo("scontrol", runner=lambda argv: (0, OUT_2205, ""))
    for pid in range(sp.MAX_KNOWN + 10):
        p.answer(pid, 0)
    assert len(p._known) == sp.MAX_KNOWN
    assert (0, 0) not in p._known and (sp.MAX_KNOWN + 9, 0) in p._known


def test_a_node_without_a_slurm_configuration_asks_nothing(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"
    scontrol.write_text("#!/bin/sh\nexit 1\n")
    scontrol.chmod(0o755)
    env = {"PATH": str(bin_dir)}
    assert SlurmPidinfo.detect(env, root=str(tmp_path)) is None  # scontrol, but no slurm.conf
    (tmp_path / "etc/slurm").mkdir(parents=True)
    (tmp_path / "etc/slurm/slurm.conf").write_text("ClusterName=x\n")
    found = SlurmPidinfo.detect(env, root=str(tmp_path))
    assert found is not None and found._argv0 == str(scontrol)
    conf = tmp_path / "mine.conf"
    conf.write_text("ClusterName=y\n")
    (tmp_path / "etc/slurm/slurm.conf").unlink()
    assert SlurmPidinfo.detect({**env, "SLURM_CONF": str(conf)}, root=str(tmp_path)) is not None
