"""Issue 29 with real cgroups: a process moved into kubepods-, docker-, podman-, crio- and slurm-shaped cgroups.

Run as root (CI is): each case makes the runtime's own directory shape in
this machine's cgroup hierarchies (v2 ``unified`` and a v1 controller), moves
a real ``sleep`` in through ``cgroup.procs``, and checks what the job scanner
(the collector the agent runs) reports for it: container, pod, QoS, Slurm
step, the job key, and the pid inside a PID namespace. Skipped with the
reason where the cgroup tree cannot be written.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpulens.collectors.jobs import JobScanner
from gpulens.collectors.workloads import PodNames, read_workload
from gpulens.core.model import JobInfo

ROOT = Path("/sys/fs/cgroup")
TOP = f"gpulens-test-{os.getpid()}"


def _hierarchy(kind: str) -> Path | None:
    """The mount of cgroup v2 (``unified`` in hybrid mode, or the root) or of a v1 controller."""
    if kind == "v2":
        for p in (ROOT / "unified", ROOT):
            if (p / "cgroup.procs").exists() and (p / "cgroup.subtree_control").exists():
                return p
        return None
    p = ROOT / kind
    return p if (p / "cgroup.procs").exists() and (p / "tasks").exists() else None


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root to make cgroups and move a process into them (CI runs as root)"
    if _hierarchy("v2") is None and _hierarchy("pids") is None:
        return "no writable cgroup v2 or v1 pids hierarchy on this machine"
    return None


pytestmark = [pytest.mark.timeout(120), pytest.mark.skipif(_why_not() is not None, reason=_why_not() or "")]

UID = str(uuid.uuid4())
CID = uuid.uuid4().hex * 2


class Placed:
    """Processes moved into cgroups under a per-test top directory; all undone at the end."""

    def __init__(self) -> None:
        self.dirs: list[Path] = []
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, kind: str, rel: str, argv: list[str] | None = None) -> subprocess.Popen[bytes]:
        base = _hierarchy(kind)
        if base is None:
            pytest.skip(f"no {kind} cgroup hierarchy here")
        path = base / TOP / rel
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            pytest.skip(f"cannot make cgroups under {base}: {err.strerror}")
        self.dirs.append(base / TOP)
        proc = subprocess.Popen(argv or ["sleep", "60"])
        self.procs.append(proc)
        (path / "cgroup.procs").write_text(f"{proc.pid}\n")
        return proc

    def close(self) -> None:
        for p in self.procs:
            p.kill()
            p.wait()
        for top in dict.fromkeys(self.dirs):
            dirs = [*sorted((d for d in top.rglob("*") if d.is_dir()), key=lambda d: -len(d.parts)), top]
            for d in dirs:  # anything left inside (a namespace's child) goes too
                for pid in (d / "cgroup.procs").read_text().split():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
            for d in dirs:
                for _ in range(100):
                    try:
                        d.rmdir()
                        break
                    except OSError as err:
                        if err.errno != errno.EBUSY:
                            raise
                        time.sleep(0.02)  # the killed process is still leaving


@pytest.fixture
def placed() -> Iterator[Placed]:
    p = Placed()
    try:
        yield p
    finally:
        p.close()


def _job(pid: int, pods: PodNames | None = None) -> JobInfo:
    scanner = JobScanner(r"sleep$|unshare$", (), pods=pods)
    jobs = {j.pid: j for j in scanner.scan()}
    assert pid in jobs, f"pid {pid} not found as a job"
    return jobs[pid]


CASES = [
    ("v2", f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID.replace('-', '_')}.slice/"
           f"cri-containerd-{CID}.scope", ("containerd", CID, UID, "burstable", None), f"pod={UID}"),
    ("v2", f"kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/crio-{CID}.scope",
     ("cri-o", CID, UID, "guaranteed", None), f"pod={UID}"),
    ("pids", f"kubepods/besteffort/pod{UID}/{CID}", ("cri", CID, UID, "besteffort", None), f"pod={UID}"),
    ("v2", f"system.slice/docker-{CID}.scope", ("docker", CID, None, None, None), None),
    ("pids", f"docker/{CID}", ("docker", CID, None, None, None), None),
    ("v2", f"machine.slice/libpod-{CID}.scope", ("podman", CID, None, None, None), None),
    ("pids", "slurm/uid_0/job_4242/step_0/task_1", (None, None, None, None, "4242"), "SLURM_JOB_ID=4242"),
    ("v2", "system.slice/slurmstepd.scope/job_77/step_batch/user/task_0", (None, None, None, None, "77"),
     "SLURM_JOB_ID=77"),
]


@pytest.mark.parametrize(("kind", "rel", "want", "key"), CASES,
                         ids=["containerd-v2", "crio-v2", "cri-v1", "docker-v2", "docker-v1", "podman-v2",
                              "slurm-v1", "slurm-v2"])
def test_a_real_process_in_a_runtime_shaped_cgroup(placed: Placed, kind: str, rel: str,
                                                    want: tuple[str | None, ...], key: str | None) -> None:
    proc = placed.start(kind, rel)
    job = _job(proc.pid)
    w = job.workload
    assert w is not None, Path(f"/proc/{proc.pid}/cgroup").read_text()
    assert (w.runtime, w.container_id, w.pod_uid, w.qos, w.slurm_job) == want
    assert job.job_key == key


def test_pod_names_from_var_log_pods(placed: Placed, tmp_path: Path) -> None:
    (tmp_path / "var/log/pods" / f"llm-serving_vllm-0_{UID}").mkdir(parents=True)
    proc = placed.start("v2", f"kubepods.slice/kubepods-besteffort.slice/"
                              f"kubepods-besteffort-pod{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope")
    job = _job(proc.pid, PodNames(str(tmp_path)))
    assert job.workload is not None and (job.workload.namespace, job.workload.pod) == ("llm-serving", "vllm-0")
    scanner = JobScanner(r"sleep$", (), pods=PodNames(str(tmp_path / "absent")))
    scanner.scan()
    assert "pods are shown by UID" in scanner.notes.get("jobs.pod_names", "")


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)")
def test_the_pid_inside_a_pid_namespace(placed: Placed) -> None:
    proc = placed.start("v2", f"system.slice/docker-{CID}.scope",
                        ["sh", "-c", "sleep 0.5; exec unshare --pid --fork --kill-child --mount-proc sleep 60"])  # moved first
    deadline = time.monotonic() + 10
    child = None
    while child is None and time.monotonic() < deadline:
        if Path(f"/proc/{proc.pid}/comm").read_text().strip() == "unshare":  # sh has exec'd it
            kids = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
            child = int(kids[0]) if kids else None
        time.sleep(0.05)
    assert child is not None
    w = read_workload(f"/proc/{child}", None)
    assert w is not None and w.ns_pid == 1 and w.runtime == "docker"
