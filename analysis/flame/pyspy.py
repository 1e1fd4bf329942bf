"""Sample Python processes with py-spy (out of process, no restart needed).

``sample_pids`` runs ``py-spy record --format raw`` for a duration and
returns the merged folded stacks as a :class:`~.model.Profile` in samples;
``dump`` takes one stack per thread now (``py-spy dump --json``). py-spy
needs ptrace permission on the target: without it a
:class:`ProfilerPermissionError` says how to grant it.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

from gpulens.analysis.flame.errors import ProfilerError, ProfilerPermissionError
from gpulens.analysis.flame.folded import parse_folded
from gpulens.analysis.flame.model import Profile, build_from_stacks

PERMISSION_FIX = (
    "py-spy needs ptrace permission on the target. Fixes: run as the process owner with "
    "kernel.yama.ptrace_scope <= 1 ('sudo sysctl kernel.yama.ptrace_scope=1', or 0 to allow "
    "attaching to non-children), run gpulens as root, or give py-spy CAP_SYS_PTRACE "
    "('sudo setcap cap_sys_ptrace+ep $(which py-spy)'; in a container: --cap-add SYS_PTRACE)."
)
MAX_OUTPUT_BYTES = 256 << 20


def pyspy_binary() -> str:
    """Path of py-spy: the one next to this Python (its venv), else on PATH.

    Raises ProfilerError when neither exists.
    """
    here = os.path.join(os.path.dirname(sys.executable), "py-spy")
    if os.access(here, os.X_OK):
        return here
    found = shutil.which("py-spy")
    if found is None:
        raise ProfilerError("py-spy not found next to this Python or on PATH; install it: pip install py-spy")
    return found


def classify_failure(pid: int, returncode: int, stderr: str) -> ProfilerError:
    """Turn py-spy's exit status and stderr into an error a user can act on."""
    text = stderr.strip()
    low = text.lower()
    if "permission" in low or "operation not permitted" in low or "os error 1)" in low or "ptrace" in low:
        return ProfilerPermissionError(f"cannot attach to process {pid}: {PERMISSION_FIX}")
    if "no such file" in low or "no such process" in low or "check that the process is running" in low:
        return ProfilerError(f"process {pid} does not exist (or exited)")
    if "python" in low and ("version" in low or "interpreter" in low):
        return ProfilerError(f"process {pid} is not a Python process py-spy can read: {_first_line(text)}")
    return ProfilerError(f"py-spy failed on process {pid} (exit {returncode}): {_first_line(text)}")


def _first_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("py-spy>")]
    return lines[0][:200] if lines else "no message"


@dataclass(frozen=True, slots=True)
class Sampled:
    """A py-spy recording and what it left out.

    py-spy records only threads that are running (``--idle`` off), so a
    thread waiting on a lock, I/O or the GPU adds no sample. ``idle_dropped``
    estimates those: ``rate × seconds`` ticks for each Python thread
    (counted with ``py-spy dump`` before sampling) less the samples
    recorded; None when the threads could not be counted.
    """

    profile: Profile
    recorded: int
    threads: int | None
    ticks: int

    @property
    def idle_dropped(self) -> int | None:
        if self.threads is None:
            return None
        return max(self.ticks * self.threads - self.recorded, 0)

    def idle_line(self) -> str:
        """``≈ 745 idle thread samples dropped (3 threads × 500 ticks, 755 recorded; py-spy --idle off)``."""
        dropped = self.idle_dropped
        if dropped is None:
            return f"{self.recorded} samples recorded; idle thread samples dropped: unknown (threads not countable)"
        return (f"≈{dropped} idle thread samples dropped ({self.threads} Python thread(s) × {self.ticks} ticks, "
                f"{self.recorded} recorded; py-spy --idle off)")


def python_threads(pid: int) -> int | None:
    """How many Python threads ``pid`` has now (``py-spy dump --json``), None when py-spy cannot say."""
    try:
        proc = subprocess.run([pyspy_binary(), "dump", "--json", "--nonblocking", "-p", str(pid)],
                              capture_output=True, timeout=30, check=False)
        threads = json.loads(proc.stdout[:MAX_OUTPUT_BYTES]) if proc.returncode == 0 else None
    except (ProfilerError, OSError, subprocess.TimeoutExpired, json.JSONDecodeError):
        return None
    return len(threads) if isinstance(threads, list) else None


def sample_pids(pids: list[int], duration_s: float, rate_hz: int = 100) -> Profile:
    """Sample each process for ``duration_s`` seconds at ``rate_hz``; one profile (samples).

    See :func:`sample_counted`, which also says how many idle samples py-spy left out.
    """
    return sample_counted(pids, duration_s, rate_hz, count_threads=False).profile


def sample_counted(pids: list[int], duration_s: float, rate_hz: int = 100, *, count_threads: bool = True,
                   cancel: Callable[[], bool] | None = None) -> Sampled:
    """Sample each process for ``duration_s`` seconds at ``rate_hz``; one profile (samples).

    py-spy takes whole seconds, so the duration is rounded up (minimum 1 s).
    Stacks of several processes sit under a ``process PID`` frame each.
    Frames are aggregated by function (``-F``), shown as ``name (file:line)``.
    Raises ProfilerPermissionError without ptrace permission, ProfilerError
    when py-spy is missing, the process is gone or sampling fails.
    ``cancel``: looked at every :data:`CANCEL_POLL_S`; once it returns True, every
    py-spy child is killed (detaching from its target) and :class:`SamplingCancelled`
    is raised (the app quits, say: it must not wait for the rest of the duration).
    """
    if not pids:
        raise ProfilerError("no process to sample")
    if rate_hz <= 0 or duration_s <= 0:
        raise ProfilerError("duration and rate must be positive")
    seconds = max(1, math.ceil(duration_s))
    exe = pyspy_binary()
    counts = {pid: python_threads(pid) if count_threads else None for pid in pids}
    stacks, sampled, errors = _sample_all(exe, pids, seconds, rate_hz, cancel)
    if errors and not stacks:
        raise errors[0]
    title = f"py-spy {rate_hz} Hz x {seconds} s: " + ", ".join(str(p) for p in pids)
    profile = build_from_stacks(stacks, "samples", title)
    known = [counts[pid] for pid in sampled]
    threads = None if None in known else sum(c for c in known if c is not None)
    return Sampled(profile, int(profile.total), threads, rate_hz * seconds)


def _sample_all(exe: str, pids: list[int], seconds: int, rate_hz: int, cancel: Callable[[], bool] | None,
                ) -> tuple[list[tuple[list[str], float]], list[int], list[ProfilerError]]:
    """Run one py-spy per process at once: the stacks (under ``process PID`` when several), the pids
    sampled, and the errors of the others."""
    sampled: list[int] = []
    stacks: list[tuple[list[str], float]] = []
    errors: list[ProfilerError] = []
    with tempfile.TemporaryDirectory(prefix="gpulens-pyspy-") as tmp:
        procs = []
        for pid in pids:
            out = os.path.join(tmp, f"{pid}.txt")
            procs.append((pid, out, _record(exe, pid, seconds, rate_hz, out)))
        every = [q for _, _, q in procs]
        deadline = time.monotonic() + seconds + 60
        for pid, out, proc in procs:
            part = _recorded(pid, out, proc, deadline, cancel, every)
            if isinstance(part, ProfilerError):
                errors.append(part)
                continue
            sampled.append(pid)
            prefix = [f"process {pid}"] if len(pids) > 1 else []
            stacks.extend((prefix + frames, value) for frames, value in part.stacks())
    return stacks, sampled, errors


def _record(exe: str, pid: int, seconds: int, rate_hz: int, out: str) -> subprocess.Popen[bytes]:
    """Start ``py-spy record`` of ``pid`` into ``out`` (raw folded stacks, aggregated by function)."""
    cmd = [exe, "record", "--format", "raw", "-F", "--nonblocking", "-d", str(seconds),
           "-r", str(rate_hz), "-p", str(pid), "-o", out]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _recorded(pid: int, out: str, proc: subprocess.Popen[bytes], deadline: float,
              cancel: Callable[[], bool] | None, every: list[subprocess.Popen[bytes]]) -> Profile | ProfilerError:
    """The stacks one py-spy child recorded once it ends, or why there are none.

    Interrupted (Ctrl-C, SIGTERM, cancelled), it kills ``every`` py-spy child, detaching them from
    their targets, and re-raises.
    """
    try:
        err = _finish(proc, deadline, cancel)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return ProfilerError(f"py-spy did not finish sampling process {pid}")
    except BaseException:  # Ctrl-C / SIGTERM / cancelled: detach py-spy from every target now
        _kill_all(every)
        raise
    if proc.returncode != 0 or not os.path.exists(out):
        return classify_failure(pid, proc.returncode, err.decode("utf-8", "replace"))
    if os.path.getsize(out) > MAX_OUTPUT_BYTES:
        return ProfilerError(f"py-spy output for {pid} is over {MAX_OUTPUT_BYTES} bytes")
    with open(out, "rb") as fh:
        return parse_folded(fh.read(), "samples", source=f"py-spy output for {pid}")


CANCEL_POLL_S = 0.2
"""How often a sampling run looks at its ``cancel``."""


class SamplingCancelled(ProfilerError):
    """The sampling was cancelled (its py-spy children are killed)."""


def _finish(proc: subprocess.Popen[bytes], deadline: float, cancel: Callable[[], bool] | None) -> bytes:
    """``proc``'s stderr once it exits; TimeoutExpired after ``deadline``; SamplingCancelled once ``cancel()``."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise subprocess.TimeoutExpired(proc.args, 0)
        try:
            _, err = proc.communicate(timeout=min(left, CANCEL_POLL_S) if cancel is not None else left)
            return err
        except subprocess.TimeoutExpired:
            if cancel is not None and cancel():
                raise SamplingCancelled("sampling cancelled") from None
            if time.monotonic() >= deadline:
                raise


def _kill_all(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def dump(pid: int) -> Profile:
    """One stack per thread of ``pid`` right now (``py-spy dump --json``), 1 sample each.

    Raises ProfilerPermissionError / ProfilerError as :func:`sample_pids`.
    """
    exe = pyspy_binary()
    try:
        proc = subprocess.run([exe, "dump", "--json", "--nonblocking", "-p", str(pid)],
                              capture_output=True, timeout=60, check=False)
    except subprocess.TimeoutExpired as err:
        raise ProfilerError(f"py-spy dump of process {pid} timed out") from err
    if proc.returncode != 0:
        raise classify_failure(pid, proc.returncode, proc.stderr.decode("utf-8", "replace"))
    try:
        threads = json.loads(proc.stdout[:MAX_OUTPUT_BYTES])
    except json.JSONDecodeError as err:
        raise ProfilerError(f"py-spy dump gave unreadable JSON: {err}") from None
    stacks: list[tuple[list[str], float]] = []
    for th in threads if isinstance(threads, list) else []:
        frames = [
            f"{f.get('name')} ({f.get('short_filename') or f.get('filename')}:{f.get('line')})"
            for f in th.get("frames", []) if isinstance(f, dict)
        ]
        frames.reverse()
        tid = th.get("os_thread_id") or th.get("thread_id")
        name = th.get("thread_name")
        stacks.append(([f"thread {tid}" + (f" ({name})" if name else ""), *frames], 1))
    return build_from_stacks(stacks, "samples", f"py-spy dump of {pid}")
