"""What a matched job is beyond its process tree: command line, user, job key and workload, read once per process.

:class:`JobDetails` reads them when the job scanner
(:mod:`gpulens.collectors.jobs`) first matches a (pid, start time), and the
scanner keeps them for as long as that process keeps its name. The job key
is the workload's where it names the job (a Slurm step's cgroup, which no
process can fake), else the first of the configured environment variables
the process sets, in their order, else its pod. For a job process that
neither its cgroup nor its environment places, :meth:`JobDetails.slurm_job`
gives slurmd's answer (``scontrol pidinfo``) once it has come.

Every text is cleaned where it is read
(:func:`~gpulens.core.sanitize.clean_text`): a command line or an
environment variable is its owner's choice, and an escape sequence in it
must not reach root's terminal. Another user's environment is not readable:
such a process has no job key from its variables.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace

from gpulens.collectors.proctree import UserNames
from gpulens.collectors.slurm_pidinfo import SlurmPidinfo
from gpulens.collectors.workloads import read_workload
from gpulens.core.model import Workload
from gpulens.core.sanitize import clean_text
from gpulens.core.workload import workload_key

MAX_CMDLINE = 64 * 1024
MAX_ENVIRON = 1024 * 1024

Details = tuple[str, str, str | None, Workload | None]
"""A job's command line, user, job key and workload."""


def read_bounded(path: str, limit: int = 4096) -> bytes:
    """At most ``limit`` bytes of ``path`` (a /proc file), in one read."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, limit)
    finally:
        os.close(fd)


class JobDetails:
    """Reads the details of a job process under ``proc``; construct once per scanner."""

    __slots__ = ("_attribute", "_key_env", "_proc", "_slurm", "_users")

    def __init__(self, proc: str, job_key_env: Sequence[str], *, attribute: bool,
                 slurm: SlurmPidinfo | None) -> None:
        """``attribute``: read each job's container, pod and Slurm job from its cgroup and environment;
        ``slurm``: asks slurmd the job of a process that neither names (None: not asked)."""
        self._proc = proc
        self._key_env = tuple(k.encode() + b"=" for k in job_key_env)
        self._attribute = attribute
        self._slurm = slurm
        self._users = UserNames()

    def read(self, pid: int) -> Details | None:
        """``pid``'s command line, user, job key and workload; None when it vanished or denies access."""
        base = f"{self._proc}/{pid}"
        try:
            raw = read_bounded(f"{base}/cmdline", MAX_CMDLINE)
            uid = os.stat(base).st_uid
        except OSError:
            return None
        cmdline = clean_text(raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace"))
        user = self._users(uid)
        try:
            environ: bytes | None = read_bounded(f"{base}/environ", MAX_ENVIRON)
        except OSError:
            environ = None  # another user's process: its variables are not readable
        workload = read_workload(base, environ) if self._attribute else None
        # The workload names the job where there is one: a Slurm step's cgroup (which no process can fake),
        # else the configured job variables in their order, else the pod.
        key = workload_key(workload) if workload is not None and workload.slurm_job is not None \
            and workload.found_by == "cgroup" else None
        pod = workload_key(replace(workload, slurm_job=None)) if workload is not None else None
        key = key or self._job_key(environ) or pod
        return cmdline, user, key, workload

    def slurm_job(self, pid: int, start_ticks: int, workload: Workload | None,
                  key: str | None) -> tuple[Workload | None, str | None]:
        """``scontrol pidinfo``'s job (slurmd's word, as trusted as a cgroup path) when it has answered."""
        assert self._slurm is not None
        job = self._slurm.job_of(pid, start_ticks)
        if job is None:
            return workload, key
        got = replace(workload or Workload(), slurm_job=job, found_by="scontrol")
        return got, workload_key(got)

    def _job_key(self, environ: bytes | None) -> str | None:
        if not self._key_env or environ is None:
            return None
        found = {}
        for var in environ.split(b"\0"):
            for prefix in self._key_env:
                if var.startswith(prefix):
                    found[prefix] = clean_text(var[len(prefix) :].decode("utf-8", "replace"))
        for prefix in self._key_env:
            if found.get(prefix):
                return f"{prefix[:-1].decode()}={found[prefix]}"
        return None
