"""Read py-spy's output into profiles (py-spy itself runs in ``collectors.pyspy``).

:func:`sampled` turns a ``py-spy record --format raw`` run over processes (a
:class:`~gpulens.core.pyspy.Recording`) into one :class:`~.model.Profile` in
samples and says how many idle samples py-spy left out (:class:`Sampled`);
:func:`dump_profile` turns ``py-spy dump --json`` into one stack per thread.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from gpulens.analysis.flame.folded import parse_folded
from gpulens.analysis.flame.model import Profile, build_from_stacks
from gpulens.core.pyspy import ProfilerError, Recording


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


def sampled(rec: Recording) -> Sampled:
    """One profile (samples) of ``rec``: stacks of several processes under a ``process PID`` frame each.

    Frames read ``name (file:line)``. Raises the first process's error when no
    process left a stack; FlameFormatError for output that is not folded stacks.
    """
    stacks: list[tuple[list[str], float]] = []
    for pid, data in rec.outputs:
        part = parse_folded(data, "samples", source=f"py-spy output for {pid}")
        prefix = [f"process {pid}"] if len(rec.pids) > 1 else []
        stacks.extend((prefix + frames, value) for frames, value in part.stacks())
    if rec.errors and not stacks:
        raise rec.errors[0]
    title = f"py-spy {rec.rate_hz} Hz x {rec.seconds} s: " + ", ".join(str(p) for p in rec.pids)
    profile = build_from_stacks(stacks, "samples", title)
    known = [rec.threads.get(pid) for pid, _ in rec.outputs]
    threads = None if None in known else sum(c for c in known if c is not None)
    return Sampled(profile, int(profile.total), threads, rec.rate_hz * rec.seconds)


def dump_profile(pid: int, data: bytes) -> Profile:
    """``py-spy dump --json`` output of ``pid`` as a profile: one stack per thread, 1 sample each.

    Raises ProfilerError for JSON that cannot be read.
    """
    try:
        threads = json.loads(data)
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
