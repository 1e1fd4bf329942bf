"""Issue 29 against a real Slurm: sbatch a job, and the job scanner names it, its step and its GPU.

The ``slurm`` fixture (tests/fakes/slurm_cluster.py) runs Debian's Slurm
22.05 on this machine with two fake GPUs (``gres.conf`` on ``mknod``'ed
device files). A batch job asks for one GPU and ``srun``s Python inside;
:class:`~gpulens.collectors.jobs.JobScanner`, as the agent runs it, must
find that process and say: Slurm job, step ``0``, task ``0``, the job key
``SLURM_JOB_ID=<id>``, and the GPU Slurm gave it, which ``scontrol`` must
confirm (``listpids`` for pid -> job and step, ``show job -d`` for the GPU
index). Skipped with the reason where Slurm cannot run (not root, packages
missing).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpulens.collectors.jobs import JobScanner
from gpulens.collectors.slurm_pidinfo import SlurmPidinfo
from gpulens.core.jobs_pattern import DEFAULT_JOB_KEY_ENV
from gpulens.core.model import JobInfo
from gpulens.core.workload import from_cgroup
from tests.fakes import slurm_cluster
from tests.fakes.slurm_cluster import SlurmCluster

pytestmark = pytest.mark.timeout(120)
slurm = slurm_cluster.slurm  # the fixture, visible to pytest in this module

PYTHON = sys.executable
COMM = Path(PYTHON).name[:15]  # what /proc/PID/comm says of the srun'ed task
SCRIPT = f"srun {shlex.quote(PYTHON)} -c 'import time; time.sleep(60)'\n"


def _scan(pid: int, pattern: str, key_env: tuple[str, ...] = DEFAULT_JOB_KEY_ENV) -> JobInfo:
    jobs = {j.pid: j for j in JobScanner(pattern, key_env).scan()}
    assert pid in jobs, f"pid {pid} is no job for {pattern!r}: {sorted(jobs)}"
    print(f"pid {pid}: tree ID {jobs[pid].tree_id!r}, {jobs[pid].workload}")
    return jobs[pid]


def _task_pattern() -> str:
    return rf"(^|/)slurmstepd/{re.escape(COMM)}$"


def _start_job(slurm: SlurmCluster) -> tuple[str, int]:
    job = slurm.sbatch(SCRIPT, "--gres=gpu:1", "--ntasks=1", "--job-name=gpulens-real")
    slurm.wait_running(job)
    return job, slurm.wait_task(job, "0", COMM)


def test_an_sbatch_job_is_named_with_its_step_and_gpu(slurm: SlurmCluster) -> None:
    job, pid = _start_job(slurm)
    found = _scan(pid, _task_pattern())
    w = found.workload
    assert w is not None
    assert (w.slurm_job, w.slurm_step, w.slurm_task) == (job, "0", "0")
    assert found.job_key == f"SLURM_JOB_ID={job}"
    assert w.found_by in ("cgroup", "environ")
    gpu = slurm.gres_index(job)  # the node's GPU index, as nvidia-smi would number it
    assert gpu == "0"  # the first job on an idle node gets the first GPU
    assert w.slurm_gpus == gpu
    assert w.visible_gpus == "0"
    # scontrol agrees on pid -> (job, step), and on the batch step that ran srun
    rows = {p: (j, s, t) for p, j, s, t in slurm.listpids()}
    assert rows[pid] == (job, "0", "0")
    batch = [p for p, (j, s, t) in rows.items() if (j, s, t) == (job, "batch", "0")]
    assert len(batch) == 1, rows
    script = _scan(batch[0], r"(^|/)slurmstepd/slurm_script$")
    assert script.workload is not None and script.workload.slurm_job == job
    assert script.job_key == f"SLURM_JOB_ID={job}"
    # The batch step's environment has no SLURM_STEP_ID: only its cgroup can say "batch".
    assert script.workload.slurm_step == ("batch" if script.workload.found_by == "cgroup" else None)


def test_the_second_job_gets_the_second_gpu(slurm: SlurmCluster) -> None:
    if slurm.cpus < 2:
        pytest.skip("needs 2 CPUs for two jobs at once (CR_Core)")
    first, _ = _start_job(slurm)
    second, pid = _start_job(slurm)
    assert (slurm.gres_index(first), slurm.gres_index(second)) == ("0", "1")
    w = _scan(pid, _task_pattern()).workload
    assert w is not None and w.slurm_job == second
    assert w.slurm_gpus == "1"  # SLURM_JOB_GPUS: the node's index
    # CUDA_VISIBLE_DEVICES: with ConstrainDevices the job sees only its GPU, numbered from 0;
    # without, Slurm exports the node's index.
    assert w.visible_gpus == ("0" if slurm.constrains_devices else "1")


def test_the_step_cgroup_names_the_job(slurm: SlurmCluster) -> None:
    if slurm.proctrack != "proctrack/cgroup":
        pytest.skip(f"Slurm runs with {slurm.proctrack} here: {slurm.why_linuxproc}")
    job, pid = _start_job(slurm)
    cgroup = Path(f"/proc/{pid}/cgroup").read_bytes()
    want = f"/slurm_{slurm.node}/uid_0/job_{job}/step_0"
    assert f":freezer:{want}\n".encode() in cgroup, cgroup.decode()
    assert f":devices:{want}/task_0\n".encode() in cgroup, cgroup.decode()
    got = from_cgroup(cgroup)  # Debian's Slurm (--enable-multiple-slurmd) roots v1 at /slurm_<node>
    assert (got.slurm_job, got.slurm_step, got.found_by) == (job, "0", "cgroup")
    found = _scan(pid, _task_pattern(), key_env=())  # no job key variables: the key comes from the cgroup
    assert found.job_key == f"SLURM_JOB_ID={job}"
    assert found.workload is not None and found.workload.found_by == "cgroup"
    batch = [p for p, j, s, t in slurm.listpids(job) if (s, t) == ("batch", "0")]
    assert len(batch) == 1
    script = from_cgroup(Path(f"/proc/{batch[0]}/cgroup").read_bytes())
    assert (script.slurm_job, script.slurm_step) == (job, "batch")
    # Only the devices (and memory) lines go down to the task; the freezer line, listed first, stops at the step.
    assert got.slurm_task == "0", f"the task_0 of the devices line is lost: {cgroup.decode()}"


@pytest.fixture
def slurm_linuxproc(monkeypatch: pytest.MonkeyPatch) -> Iterator[SlurmCluster]:
    """The cluster with ``proctrack/linuxproc``: job processes stay in the caller's cgroup, as on nodes without it."""
    monkeypatch.setenv("GPULENS_TEST_SLURM_PROCTRACK", "linuxproc")
    yield from slurm_cluster.slurm.__wrapped__()  # type: ignore[attr-defined]


def test_scontrol_pidinfo_names_the_job_of_a_process_no_cgroup_or_variable_names(
        slurm_linuxproc: SlurmCluster) -> None:
    slurm = slurm_linuxproc
    assert slurm.proctrack == "proctrack/linuxproc"
    # env -i: the task keeps no SLURM_* variable; linuxproc: its cgroup is the test's, not Slurm's
    job = slurm.sbatch("srun env -i /bin/sleep 60\n", "--ntasks=1", "--job-name=gpulens-pidinfo")
    slurm.wait_running(job)
    pid = slurm.wait_task(job, "0", "sleep")
    assert b"SLURM_JOB_ID=" not in Path(f"/proc/{pid}/environ").read_bytes()
    assert from_cgroup(Path(f"/proc/{pid}/cgroup").read_bytes()).slurm_job is None
    scontrol = shutil.which("scontrol", path=slurm.env["PATH"])
    assert scontrol is not None
    pidinfo = SlurmPidinfo(scontrol, env=slurm.env)
    scanner = JobScanner(r"(^|/)slurmstepd/sleep$", (), slurm=pidinfo)  # the first scan queues the question
    deadline = time.monotonic() + 10
    while (found := {j.pid: j for j in scanner.scan()}.get(pid)) is None or found.workload is None:
        assert time.monotonic() < deadline, f"no answer from scontrol pidinfo: {pidinfo.why}"
        time.sleep(0.05)
    assert (found.workload.slurm_job, found.workload.found_by) == (job, "scontrol")
    assert found.job_key == f"SLURM_JOB_ID={job}"
    # a process in no job: slurmd says so, and it is asked once
    assert pidinfo.answer(os.getpid(), 0) is None and pidinfo.why is None
