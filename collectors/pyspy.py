"""Run py-spy on Python processes (out of process, no restart needed); reading its output is analysis'.

``record`` runs ``py-spy record --format raw`` on each process at once for a
duration and hands back what each wrote (a :class:`~gpulens.core.pyspy.Recording`);
``dump_json`` takes one stack per thread now (``py-spy dump --json``).
``gpulens.analysis.flame.pyspy`` turns both into profiles, and
``gpulens.agent.pyspy`` does the two in one call. py-spy needs ptrace
permission on the target: without it a :class:`ProfilerPermissionError`
says how to grant it.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from gpulens.core.pyspy import (
    CANCEL_POLL_S,
    MAX_OUTPUT_BYTES,
    ProfilerError,
    ProfilerPermissionError,
    Recording,
    SamplingCancelled,
)
from gpulens.core.sanitize import clean_text

PERMISSION_FIX = (
    "py-spy needs ptrace permission on the target. Fixes: run as the process owner with "
    "kernel.yama.ptrace_scope <= 1 ('sudo sysctl kernel.yama.ptrace_scope=1', or 0 to allow "
    "attaching to non-children), run gpulens as root, or give py-spy CAP_SYS_PTRACE "
    "('sudo setcap cap_sys_ptrace+ep $(which py-spy)'; in a container: --cap-add SYS_PTRACE)."
)


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
    return clean_text(lines[0][:200]) if lines else "no message"  # py-spy may quote the target's names


def python_threads(pid: int) -> int | None:
    """How many Python threads ``pid`` has now (``py-spy dump --json``), None when py-spy cannot say."""
    try:
        threads = json.loads(dump_json(pid, timeout_s=30))
    except (ProfilerError, OSError, json.JSONDecodeError):
        return None
    return len(threads) if isinstance(threads, list) else None


def record(pids: list[int], duration_s: float, rate_hz: int = 100, *, count_threads: bool = True,
           cancel: Callable[[], bool] | None = None) -> Recording:
    """Sample each process for ``duration_s`` seconds at ``rate_hz``: what each py-spy wrote.

    py-spy takes whole seconds, so the duration is rounded up (minimum 1 s).
    Frames are aggregated by function (``-F``). Raises ProfilerError when
    py-spy is missing or the arguments are wrong; a process that could not be
    sampled (gone, no permission, py-spy failed) is one of the recording's
    ``errors``. ``cancel``: looked at every :data:`~gpulens.core.pyspy.CANCEL_POLL_S`;
    once it returns True, every py-spy child is killed (detaching from its target)
    and :class:`SamplingCancelled` is raised (the app quits, say: it must not wait
    for the rest of the duration).
    """
    if not pids:
        raise ProfilerError("no process to sample")
    if rate_hz <= 0 or duration_s <= 0:
        raise ProfilerError("duration and rate must be positive")
    seconds = max(1, math.ceil(duration_s))
    exe = pyspy_binary()
    counts = {pid: python_threads(pid) if count_threads else None for pid in pids}
    outputs, errors = _record_all(exe, pids, seconds, rate_hz, cancel)
    return Recording(tuple(pids), seconds, rate_hz, tuple(outputs), tuple(errors), counts)


def _record_all(exe: str, pids: list[int], seconds: int, rate_hz: int, cancel: Callable[[], bool] | None,
                ) -> tuple[list[tuple[int, bytes]], list[ProfilerError]]:
    """Run one py-spy per process at once: (pid, output) of those sampled, and the errors of the others."""
    outputs: list[tuple[int, bytes]] = []
    errors: list[ProfilerError] = []
    with tempfile.TemporaryDirectory(prefix="gpulens-pyspy-") as tmp:
        procs = []
        for pid in pids:
            out = os.path.join(tmp, f"{pid}.txt")
            procs.append((pid, out, _start(exe, pid, seconds, rate_hz, out)))
        every = [q for _, _, q in procs]
        deadline = time.monotonic() + seconds + 60
        for pid, out, proc in procs:
            part = _recorded(pid, out, proc, deadline, cancel, every)
            if isinstance(part, ProfilerError):
                errors.append(part)
            else:
                outputs.append((pid, part))
    return outputs, errors


def _start(exe: str, pid: int, seconds: int, rate_hz: int, out: str) -> subprocess.Popen[bytes]:
    """Start ``py-spy record`` of ``pid`` into ``out`` (raw folded stacks, aggregated by function)."""
    cmd = [exe, "record", "--format", "raw", "-F", "--nonblocking", "-d", str(seconds),
           "-r", str(rate_hz), "-p", str(pid), "-o", out]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _recorded(pid: int, out: str, proc: subprocess.Popen[bytes], deadline: float,
              cancel: Callable[[], bool] | None, every: list[subprocess.Popen[bytes]]) -> bytes | ProfilerError:
    """What one py-spy child wrote once it ends, or why there is nothing.

    Interrupted (Ctrl-C, SIGTERM, cancelled), it kills ``every`` py-spy child, detaching them from
    their targets, and re-raises.
    """
    with contextlib.ExitStack() as undo:
        undo.callback(_kill_all, every)  # Ctrl-C / SIGTERM / cancelled: detach py-spy from every target now
        try:
            err = _finish(proc, deadline, cancel)
        except subprocess.TimeoutExpired:
            undo.pop_all()
            proc.kill()
            proc.communicate()
            return ProfilerError(f"py-spy did not finish sampling process {pid}")
        undo.pop_all()
    if proc.returncode != 0 or not os.path.exists(out):
        return classify_failure(pid, proc.returncode, err.decode("utf-8", "replace"))
    if os.path.getsize(out) > MAX_OUTPUT_BYTES:
        return ProfilerError(f"py-spy output for {pid} is over {MAX_OUTPUT_BYTES} bytes")
    with open(out, "rb") as fh:
        return fh.read()


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


def dump_json(pid: int, *, timeout_s: float = 60) -> bytes:
    """``py-spy dump --json`` of ``pid`` now: one stack per thread, as py-spy wrote it (at most
    :data:`~gpulens.core.pyspy.MAX_OUTPUT_BYTES`).

    Raises ProfilerPermissionError / ProfilerError as :func:`record`, and ProfilerError when it times out.
    """
    exe = pyspy_binary()
    try:
        proc = subprocess.run([exe, "dump", "--json", "--nonblocking", "-p", str(pid)],
                              capture_output=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as err:
        raise ProfilerError(f"py-spy dump of process {pid} timed out") from err
    if proc.returncode != 0:
        raise classify_failure(pid, proc.returncode, proc.stderr.decode("utf-8", "replace"))
    return proc.stdout[:MAX_OUTPUT_BYTES]
