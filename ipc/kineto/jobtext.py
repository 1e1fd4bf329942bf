"""What a trace job says about a pid it could not trace: the sentences of :mod:`gpulens.ipc.kineto.jobs`
and :mod:`gpulens.ipc.kineto.jobwatch`.

Pure text from the task's facts (no lock, no I/O), so the wording is tested
on its own and the table keeps to its bookkeeping.
"""

from __future__ import annotations

import signal

from gpulens.ipc.kineto.jobstate import PidTask
from gpulens.ipc.kineto.liveness import how_it_ended
from gpulens.ipc.kineto.outputs import final_paths

TRACING_DOC = "docs/tracing.md"
NO_MEMORY_NOTE = (
    "no [memory] events: the program's PyTorch recorded no allocations in an on-demand trace "
    "(torch 2.13 does not); a memory flame graph needs torch.profiler.profile(profile_memory=True) "
    "run in the program"
)
"""The result's note for a ``profile_memory`` trace without ``[memory]`` events (no memory flame graph)."""
RETURN_CRASH = (
    "torch 2.13 crashes with SIGSEGV when a program returns while an on-demand trace runs "
    f"(let the trace end before the program does: {TRACING_DOC})"
)


def ended_during_trace(pid: int, status: int | None) -> str:
    """``process N crashed (SIGSEGV) during the trace (...)``: how the target ended, as far as was seen.

    ``status``: its ``waitpid`` status word, None when nobody but its parent saw it.
    """
    text = f"process {pid} {how_it_ended(status)} during the trace"
    if status is None:
        return (f"{text} (how, only its parent knows: gpulens saw no exit status; {RETURN_CRASH})")
    if status & 0x7F == signal.SIGSEGV:
        return f"{text}: {RETURN_CRASH}"
    return text


def ended_before_pickup(pid: int, status: int | None) -> str:
    """The target ended before its poll took the config up."""
    return f"process {pid} {how_it_ended(status)} before it picked up the trace request"


def missed_common_start(task: PidTask, behind: str | None) -> str:
    """Why a pid of a common-start request (a job's rank) was not traced; the others are."""
    if behind is not None:
        return (
            f"process {task.pid} was still busy with trace {behind} (another request) when the common start "
            "came, so it was not traced (the other processes were): ask again for it once that trace has landed"
        )
    if task.busy_since_s is not None:
        return (
            f"process {task.pid}'s profiler was busy with another trace (not gpulens') when the common start "
            "came, so it was not traced (the other processes were): ask again once that trace is written"
        )
    return (
        f"the common start time passed before process {task.pid} picked up its config "
        "(Kineto refuses a start in the past): ask again with a later start"
    )


def never_traced(task: PidTask, why: str, common_start: bool) -> str:
    """The failure of a task whose target stayed idle after every start it was handed: what was seen.

    Kineto opens ``<file>.tmp`` when it takes a config up and renames it once
    the trace is written; an empty one left behind is a trace it opened and
    never wrote (a start it saw too late, or a config it did not run as an
    activity trace). Named, not looked at: this runs under the table's lock.
    """
    wrote = ""
    if task.output is not None:
        asked = final_paths(task.output.log, task.pid)[0]
        wrote = f" and wrote no {asked} (an empty {asked.name}.tmp there: Kineto opened the trace, never wrote it)"
    if common_start:
        return (
            f"{why}{wrote}; its profiler loop most likely took the config up after the start: "
            "ask again with a later common start"
        )
    return (
        f"{why}, {task.rehanded + 1} times,{wrote}: its profiler loop (ticking once a second) took the config up "
        "after the start each time, or Kineto did not run the config as an activity trace "
        "(KINETO_LOG_LEVEL=0 in the program's environment logs which)"
    )
