"""A real one-node Slurm cluster for the attribution tests (issue 29).

The ``slurm`` fixture starts Debian's ``munged``, ``slurmctld`` and
``slurmd`` (package ``slurm-wlm``, Slurm 22.05) in a fresh temporary
directory: munged on a private socket, both Slurm daemons on free loopback
ports, every state, spool, log and pid path inside the directory, no
systemd. Two fake GPUs are character devices made with ``mknod`` (major
195, as ``/dev/nvidia0``) and declared in ``gres.conf``, so ``--gres=gpu:1``
allocates one and Slurm exports ``SLURM_JOB_GPUS`` / ``CUDA_VISIBLE_DEVICES``
as on a real GPU node. The node is called ``gpulens<pid>``, not after the
machine, so that its cgroups (``/slurm_<node>/…``) and state are its own.

Process tracking is ``proctrack/cgroup`` with ``task/cgroup``
(``ConstrainDevices=yes``) where the cgroup v1 ``freezer`` and ``devices``
hierarchies can be written; the job's processes then live in
``/slurm_<node>/uid_U/job_J/step_S[/task_N]`` cgroups. Elsewhere (a
cgroup v2 only machine, a container) it is ``proctrack/linuxproc`` with
``task/none`` and only the environment names the job;
:attr:`SlurmCluster.proctrack` says which. ``GPULENS_TEST_SLURM_PROCTRACK=linuxproc``
forces the latter.

Skipped with the reason when not root or when a binary is missing; when they
are there but the cluster does not come up in :data:`START_S` seconds the
test fails with the tail of each daemon's log. Teardown cancels the jobs,
kills every process started with this cluster's ``SLURM_CONF`` (daemons,
``slurmstepd``, job processes), removes the cgroups Slurm left and the
directory.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

START_S = 30.0
"""The node must be idle this soon after the daemons start (it takes well under a second here)."""
BINARIES = ("munged", "slurmctld", "slurmd", "slurmstepd", "sbatch", "srun", "scontrol", "sinfo", "squeue", "scancel")
CGROUP = Path("/sys/fs/cgroup")
GPUS = 2


def _which(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin:/usr/bin:/bin")


def why_no_slurm() -> str | None:
    """Why the real cluster cannot be started here (None: it can)."""
    if os.geteuid() != 0:
        return "needs root to run slurmd and munged and to mknod fake GPUs (CI runs as root)"
    missing = [b for b in BINARIES if _which(b) is None]
    if missing:
        return f"needs Slurm and munge (Debian packages slurm-wlm, munge): {', '.join(missing)} not found"
    return None


def _cgroup_v1_writable() -> bool:
    """Whether Slurm's cgroup/v1 plugin can make its freezer and devices cgroups here."""
    for ctrl in ("freezer", "devices"):
        probe = CGROUP / ctrl / f"gpulens-probe-{os.getpid()}"
        if not (CGROUP / ctrl / "tasks").exists():
            return False
        try:
            probe.mkdir()
            probe.rmdir()
        except OSError:
            return False
    return True


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _tail(path: Path, lines: int = 25) -> str | None:
    try:
        text = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return None
    except OSError as err:
        return f"  ({err.strerror})"
    return "\n".join(f"  {line}" for line in text[-lines:]) or "  (empty)"


@dataclass
class SlurmCluster:
    """A running one-node cluster; every helper runs Slurm's commands with :attr:`env`."""

    dir: Path
    node: str
    proctrack: str
    """``proctrack/cgroup`` or ``proctrack/linuxproc``."""
    cpus: int = 1
    why_linuxproc: str = ""
    """Why not ``proctrack/cgroup`` (empty when it is)."""
    env: dict[str, str] = field(default_factory=dict)
    daemons: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return self.dir / "etc/slurm.conf"

    @property
    def logs(self) -> Path:
        return self.dir / "log"

    @property
    def gpu_files(self) -> list[Path]:
        return [self.dir / f"dev/nvidia{i}" for i in range(GPUS)]

    @property
    def constrains_devices(self) -> bool:
        """``task/cgroup`` with ``ConstrainDevices=yes`` (then CUDA_VISIBLE_DEVICES counts from 0 in each job)."""
        return self.proctrack == "proctrack/cgroup"

    def run(self, *argv: str, check: bool = True, timeout: float = 30) -> str:
        """A Slurm command's stdout; a failure (with ``check``) fails the test with its stderr."""
        proc = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            pytest.fail(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()}\n{self.log_tails()}")
        return proc.stdout

    def sbatch(self, script: str, *options: str) -> str:
        """Submit ``script`` (a shell script's text) from the cluster's directory; its job id."""
        path = self.dir / f"job-{time.monotonic_ns()}.sh"
        path.write_text(script if script.startswith("#!") else "#!/bin/sh\n" + script)
        out = self.run("sbatch", "--parsable", f"--chdir={self.dir}", f"--output={self.dir}/slurm-%j.out",
                       *options, str(path))
        return out.strip().split(";")[0]

    def state(self, job_id: str) -> str:
        return self.run("squeue", "-h", "-j", job_id, "-o", "%T", check=False).strip()

    def wait_running(self, job_id: str, timeout: float = 30) -> None:
        """Until ``job_id`` runs; fails with its state and the logs after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while (state := self.state(job_id)) != "RUNNING":
            if time.monotonic() > deadline:
                reason = self.run("squeue", "-h", "-j", job_id, "-o", "%r", check=False).strip()
                pytest.fail(f"job {job_id} not running after {timeout:.0f} s: {state or 'gone'} ({reason})\n"
                            f"{self.log_tails()}")
            time.sleep(0.1)

    def listpids(self, job_id: str | None = None) -> list[tuple[int, str, str, str]]:
        """``scontrol listpids``: (pid, job, step, local task id or ``-``) of every job process on the node."""
        out = self.run("scontrol", "listpids", job_id or "*", self.node, check=False)  # the node: not the host's name
        rows = []
        for line in out.splitlines()[1:]:
            f = line.split()
            if len(f) >= 4 and f[0].isdigit():
                rows.append((int(f[0]), f[1], f[2], f[3]))
        return rows

    def wait_task(self, job_id: str, step: str, comm: str, timeout: float = 30) -> int:
        """The pid of the task of ``job_id``'s ``step`` once it runs ``comm`` (``scontrol listpids``)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for pid, job, st, local in self.listpids(job_id):
                if job == job_id and st == step and local != "-":
                    with contextlib.suppress(OSError):
                        if Path(f"/proc/{pid}/comm").read_text().strip() == comm:
                            return pid
            time.sleep(0.1)
        pytest.fail(f"no task of step {job_id}.{step} running {comm!r} after {timeout:.0f} s: "
                    f"{self.listpids(job_id)}\n{self.output(job_id)}\n{self.log_tails()}")

    def gres_index(self, job_id: str) -> str:
        """The node's GPU indices Slurm allocated to ``job_id`` (``GRES=gpu:1(IDX:1)`` of ``scontrol show job -d``)."""
        out = self.run("scontrol", "show", "job", "-d", job_id)
        m = re.search(r"GRES=gpu(?::\w+)?:\d+\(IDX:([0-9,-]+)\)", out)
        assert m is not None, out
        return m.group(1)

    def output(self, job_id: str) -> str:
        path = self.dir / f"slurm-{job_id}.out"
        return path.read_text(errors="replace") if path.exists() else f"(no {path.name})"

    def log_tails(self) -> str:
        """The end of each daemon's log file and of its stdout/stderr (munged logs there in the foreground)."""
        parts = []
        for name in ("munged", "slurmctld", "slurmd"):
            for path in (self.logs / f"{name}.log", self.logs / f"{name}.out"):
                if (tail := _tail(path)) is not None:
                    parts.append(f"--- {path.name}\n{tail}")
        return "\n".join(parts)


def _write_config(c: SlurmCluster, ctld_port: int, slurmd_port: int) -> None:
    d = c.dir
    cpus = c.cpus
    cgroup = c.proctrack == "proctrack/cgroup"
    (d / "etc/slurm.conf").write_text(f"""\
ClusterName=gpulens
SlurmctldHost={socket.gethostname().split('.')[0]}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={d}/run/munge.socket
CryptoType=crypto/munge
MpiDefault=none
ProctrackType={c.proctrack}
TaskPlugin={'task/cgroup' if cgroup else 'task/none'}
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
StateSaveLocation={d}/spool/ctld
SlurmdSpoolDir={d}/spool/d
SlurmctldPidFile={d}/run/slurmctld.pid
SlurmdPidFile={d}/run/slurmd.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
SlurmdTimeout=30
InactiveLimit=0
KillWait=2
NodeName={c.node} NodeHostname={c.node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=256 Gres=gpu:{GPUS} State=UNKNOWN
PartitionName=debug Nodes={c.node} Default=YES MaxTime=INFINITE State=UP
""")
    (d / "etc/gres.conf").write_text(f"NodeName={c.node} Name=gpu File={d}/dev/nvidia[0-{GPUS - 1}]\n")
    (d / "etc/cgroup.conf").write_text(
        "CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\nConstrainCores=no\nConstrainDevices=yes\n"
        "ConstrainRAMSpace=no\nConstrainSwapSpace=no\n" if cgroup else "CgroupPlugin=autodetect\n")


def _start(c: SlurmCluster, name: str, argv: list[str]) -> None:
    with open(c.logs / f"{name}.out", "wb") as out:
        c.daemons[name] = subprocess.Popen(argv, env=c.env, stdin=subprocess.DEVNULL, stdout=out,
                                           stderr=subprocess.STDOUT, start_new_session=True)


def _wait(c: SlurmCluster, what: str, ready: Callable[[], bool], deadline: float) -> None:
    while not ready():
        dead = [f"{n} exited {p.returncode}" for n, p in c.daemons.items() if p.poll() is not None]
        if dead or time.monotonic() > deadline:
            why = ", ".join(dead) or f"not within {START_S:.0f} s"
            pytest.fail(f"the Slurm test cluster in {c.dir} did not start: waiting for {what}: {why}\n"
                        f"{c.log_tails()}", pytrace=False)
        time.sleep(0.05)


def _node_idle(c: SlurmCluster) -> bool:
    out = subprocess.run(["sinfo", "-h", "-n", c.node, "-o", "%T"], env=c.env, capture_output=True, text=True,
                         timeout=10).stdout.split()
    return out == ["idle"]


def _ours(conf: Path) -> list[int]:
    """Every process started with this cluster's SLURM_CONF (daemons, slurmstepd, job processes)."""
    tag = f"SLURM_CONF={conf}\0".encode()
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            with contextlib.suppress(OSError):
                if tag in Path(f"/proc/{entry}/environ").read_bytes():
                    pids.append(int(entry))
    return pids


def _remove_cgroups(node: str) -> None:
    """The ``/slurm_<node>`` cgroups slurmd left (empty ones; Slurm removes a job's when it ends)."""
    for top in CGROUP.glob(f"*/slurm_{node}"):
        for d in [*sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)), top]:
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except OSError as err:
                    if err.errno != errno.EBUSY:
                        break
                    time.sleep(0.02)


def _stop(c: SlurmCluster) -> None:
    if "slurmctld" in c.daemons and c.daemons["slurmctld"].poll() is None:
        subprocess.run(["scancel", "--signal=KILL", "--partition=debug"], env=c.env, capture_output=True, timeout=10)
        deadline = time.monotonic() + 10
        while c.listpids() and time.monotonic() < deadline:
            time.sleep(0.1)
    for name in ("slurmd", "slurmctld", "munged"):
        p = c.daemons.get(name)
        if p is not None and p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(1)  # slurmd takes seconds to say goodbye to slurmctld; its jobs are gone by now
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(5)
    for pid in _ours(c.conf):  # a slurmstepd or job process that outlived its job
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    _remove_cgroups(c.node)


@pytest.fixture
def slurm() -> Iterator[SlurmCluster]:
    """A running one-node Slurm cluster with two fake GPUs; skips where it cannot run (see the module)."""
    why = why_no_slurm()
    if why is not None:
        pytest.skip(why)
    why_linuxproc = ""
    if os.environ.get("GPULENS_TEST_SLURM_PROCTRACK", "") == "linuxproc":
        why_linuxproc = "GPULENS_TEST_SLURM_PROCTRACK=linuxproc"
    elif not _cgroup_v1_writable():
        why_linuxproc = f"no writable cgroup v1 freezer and devices hierarchies under {CGROUP}"
    proctrack = "proctrack/linuxproc" if why_linuxproc else "proctrack/cgroup"
    d = Path(tempfile.mkdtemp(prefix="gpulens-slurm-"))
    d.chmod(0o755)  # munged wants its socket reachable by everyone
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_"))}
    env["SLURM_CONF"] = str(d / "etc/slurm.conf")
    env["PATH"] = env.get("PATH", "/usr/bin:/bin") + ":/usr/sbin:/sbin"
    c = SlurmCluster(d, f"gpulens{os.getpid()}", proctrack, os.cpu_count() or 1, why_linuxproc, env)
    try:
        for sub in ("etc", "log", "run", "spool/ctld", "spool/d", "dev"):
            (d / sub).mkdir(parents=True)
        for i, gpu in enumerate(c.gpu_files):
            try:
                os.mknod(gpu, 0o666 | 0o020000, os.makedev(195, i))  # S_IFCHR, as /dev/nvidiaN
            except OSError as err:
                pytest.skip(f"cannot mknod a fake GPU device file: {err.strerror}")
        key = d / "etc/munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        ctld_port, slurmd_port = _free_ports(2)
        _write_config(c, ctld_port, slurmd_port)
        deadline = time.monotonic() + START_S
        _start(c, "munged", [_which("munged") or "munged", "--foreground", "--force",
                             f"--socket={d}/run/munge.socket", f"--key-file={key}", f"--pid-file={d}/run/munged.pid",
                             f"--log-file={d}/log/munged.log", f"--seed-file={d}/run/munged.seed"])
        _wait(c, "munged's socket", (d / "run/munge.socket").exists, deadline)
        _start(c, "slurmctld", [_which("slurmctld") or "slurmctld", "-D", "-i"])
        _start(c, "slurmd", [_which("slurmd") or "slurmd", "-D", "-N", c.node])
        _wait(c, f"node {c.node} idle in sinfo", lambda: _node_idle(c), deadline)
        yield c
    finally:
        try:
            _stop(c)
        finally:
            shutil.rmtree(d, ignore_errors=True)
