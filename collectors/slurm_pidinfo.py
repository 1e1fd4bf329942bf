"""The Slurm job of a process that neither its cgroup nor its environment names: ``scontrol pidinfo PID``.

Where Slurm tracks processes without cgroups (``proctrack/linuxproc``,
``proctrack/pgid``) and a job's process has cleared its environment
(``env -i``, a container runtime that starts it afresh), only the node's
slurmd knows the job: ``scontrol pidinfo PID`` asks it (Slurm 22.05 prints
``Slurm JobId=J ends at …``; older releases ``Slurm job id J ends at …``;
a process in no job gets "Failed to locate job for requested pid").

The answer comes from slurmd over its own authenticated RPC, not from the
process, so it names the job like a cgroup path does. The command runs in
one background thread, never in the sampling tick: :meth:`SlurmPidinfo.job_of`
returns what is known now and queues the question. Each (pid, start time)
is asked once; the queue and the cache are bounded; a slurmd that cannot be
reached stops the questions for :data:`RETRY_S` and says why in
:attr:`SlurmPidinfo.why`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from typing import Final

MAX_PENDING = 256
"""Questions queued at most (the rest are asked on a later tick)."""
MAX_KNOWN = 8192
"""Answers kept (oldest forgotten first)."""
TIMEOUT_S = 3.0
"""One ``scontrol pidinfo`` may take this long."""
RETRY_S = 60.0
"""After slurmd could not be reached, no question for this long."""
CONFIGS = ("etc/slurm/slurm.conf", "etc/slurm-llnl/slurm.conf", "run/slurm/conf/slurm.conf")
"""Where a node configured for Slurm keeps its configuration (under the root; ``SLURM_CONF`` first)."""

_JOB = re.compile(r"Slurm (?:JobId=|job id )(\d{1,12})\b")
_NO_JOB = "Failed to locate job"
_OUT_LIMIT = 4096
_UNASKED: Final = "\0unasked"

Runner = Callable[[list[str]], tuple[int, str, str]]
"""Runs an argv: (exit status, stdout, stderr). Raises OSError or subprocess.TimeoutExpired."""


def parse_pidinfo(rc: int, out: str, err: str) -> tuple[str | None, str | None]:
    """(job id, None), (None, None) for "in no job", or (None, why) when slurmd gave no answer."""
    if rc == 0 and (m := _JOB.search(out[:_OUT_LIMIT])) is not None:
        return m.group(1), None
    if _NO_JOB in err[:_OUT_LIMIT] or _NO_JOB in out[:_OUT_LIMIT]:
        return None, None
    text = " ".join((err or out)[:300].split()) or f"exit status {rc}"
    return None, f"scontrol pidinfo: {text}"


class SlurmPidinfo:
    """pid -> Slurm job through ``scontrol pidinfo``, asked in the background; construct with :meth:`detect`."""

    def __init__(self, scontrol: str, *, env: Mapping[str, str] | None = None, runner: Runner | None = None,
                 clock: Callable[[], float] | None = None) -> None:
        self._argv0 = scontrol
        self._env = dict(env) if env is not None else None
        self._run = runner or self._subprocess
        self._clock = clock or time.monotonic
        self._known: OrderedDict[tuple[int, int], str | None] = OrderedDict()
        self._pending: deque[tuple[int, int]] = deque()
        self._queued: set[tuple[int, int]] = set()
        self._wake = threading.Condition()
        self._paused_until = float("-inf")
        self._thread: threading.Thread | None = None
        self.why: str | None = None
        """Why the last question got no answer from slurmd (None while it answers)."""

    @classmethod
    def detect(cls, environ: Mapping[str, str] | None = None, root: str = "/") -> SlurmPidinfo | None:
        """One where this node is configured for Slurm, else None: a node without Slurm asks nothing.

        Configured: Slurm's ``scontrol`` on PATH and a configuration it reads (``SLURM_CONF``,
        ``/etc/slurm/slurm.conf``, Debian's older ``/etc/slurm-llnl/``, or the copy a configless
        slurmd keeps in ``/run/slurm/conf/``).
        """
        env = os.environ if environ is None else environ
        found = shutil.which("scontrol", path=env.get("PATH")) or shutil.which("scontrol", path="/usr/bin:/usr/local/bin")
        confs = [env.get("SLURM_CONF", "")] + [os.path.join(root, c) for c in CONFIGS]
        if found is None or not any(c and os.path.isfile(c) for c in confs):
            return None
        return cls(found)

    def _subprocess(self, argv: list[str]) -> tuple[int, str, str]:
        p = subprocess.run(argv, env=self._env, capture_output=True, text=True, errors="replace",
                           timeout=TIMEOUT_S, check=False, stdin=subprocess.DEVNULL)
        return p.returncode, p.stdout, p.stderr

    def job_of(self, pid: int, start_ticks: int) -> str | None:
        """The job of ``pid`` (started at ``start_ticks``) when known; queues the question when not asked yet."""
        key = (pid, start_ticks)
        got = self._known.get(key, _UNASKED)
        if got is not _UNASKED:
            return got
        with self._wake:
            if key in self._queued or len(self._pending) >= MAX_PENDING or self._clock() < self._paused_until:
                return None
            self._pending.append(key)
            self._queued.add(key)
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="gpulens-scontrol", daemon=True)
                self._thread.start()
            self._wake.notify()
        return None

    def answer(self, pid: int, start_ticks: int) -> str | None:
        """Ask now and wait (for tests and one-shot commands); the same cache."""
        key = (pid, start_ticks)
        got = self._known.get(key, _UNASKED)
        if got is _UNASKED:
            self._ask(key)
            got = self._known.get(key)
        return got

    def _serve(self) -> None:
        while True:
            with self._wake:
                while not self._pending:
                    self._wake.wait()
                key = self._pending.popleft()
            try:
                self._ask(key)
            finally:
                with self._wake:
                    self._queued.discard(key)

    def _ask(self, key: tuple[int, int]) -> None:
        try:
            rc, out, err = self._run([self._argv0, "pidinfo", str(key[0])])
        except (OSError, subprocess.SubprocessError) as exc:
            rc, out, err = -1, "", f"{type(exc).__name__}: {exc}"
        job, why = parse_pidinfo(rc, out, err)
        if why is not None:  # slurmd not reached: ask again later, not at once
            self.why = why
            self._paused_until = self._clock() + RETRY_S
            return
        self.why = None
        self._known[key] = job
        while len(self._known) > MAX_KNOWN:
            self._known.popitem(last=False)
