"""The Kineto on-demand config gpulens hands over, and when libkineto acts on it.

libkineto (torch 2.13's build, kineto ``ActivityProfilerController`` and
``GenericActivityProfiler``) serves an on-demand duration trace like this:

1. Its config thread polls every ``ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS``
   and parses the reply at once.
2. Its profiler loop ticks every ``Config::kControllerIntervalMsecs`` (1 s,
   :data:`CONTROLLER_TICK_S`); the first tick after the config arrived
   activates it when ``tick + 1 s >= PROFILE_START_TIME - warm-up`` and
   drops it ("start timestamp is in the past") when the start has already
   passed. A first trace creates the loop thread, whose first tick is one
   tick after the config arrived: a start must lie at least one tick after
   the hand-over (:data:`PICKUP_S` adds the datagram, the parse and a late
   thread wake-up).
3. ``PROFILE_START_TIME=0`` means "the parse time + warm-up + 2 ticks"
   (``Config::validate``): 2 s after the poll where 1 s (+ margin) is
   enough, so gpulens writes an explicit start at hand-over
   (:func:`stamp_start`) unless a common start was asked.
4. The loop wakes exactly at the start and at its end (start + duration;
   the window opens when the target's profiler is enabled, a few ms to
   tens of ms after the start: :data:`DURATION_PAD_MS`),
   stops collecting then, and processes the trace at the next tick, one tick
   after the end (:data:`CONTROLLER_TICK_S`): the JSON goes to
   ``<log>.tmp`` and is renamed into place (older libkineto, before
   December 2022, wrote the final name progressively).

5. The loop keeps its phase: after a trace it ticks at the window's end +
   1 s, + 2 s, ... (``next_wakeup_time`` steps a whole tick at a time), so a
   process traced before takes a start just after its next tick
   (:func:`loop_tick_after` + :data:`TICK_MARGIN_S`): the start is checked at
   that tick (``start - now >= warm-up``, ``now + 1 s >= start - warm-up``) and
   the loop then wakes exactly at it. A process never traced (or traced by
   someone else since) has a loop of unknown phase: its start is
   :data:`PICKUP_S` after the hand-over, right whatever the phase.

While the loop is in warm-up, tracing or processing, each poll clears the
ACTIVITIES bit of its ``config_type``: a poll that sets it after a config's
start and before its file can be written means the config was dropped.

Memory: ``PROFILE_PROFILE_MEMORY=true`` is the trace's ``profile_memory``
(Kineto hands it to PyTorch's client). ``PROFILE_MEMORY=true`` is another
request altogether, never written: Kineto then runs its memory-snapshot loop
("Running memory profiling for N ms", a CUDA allocator pickle at
``/tmp/memory_snapshot_<pid>.pickle``) instead of the activity trace, leaving
``<log>.tmp`` empty ("finalizeMemoryTrace not implemented for
ChromeTraceLogger") and the profiler idle after the start (seen as a dropped
config, issue 28).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpulens.ipc.kineto.requests import TraceRequest

ITERATION_FALLBACK_MS = 500
"""Kineto traces this long instead of N iterations when the target has not stepped an optimizer."""
CONTROLLER_TICK_S = 1.0
"""libkineto's profiler-loop period (``Config::kControllerIntervalMsecs``)."""
PICKUP_S = 1.2
"""The start gpulens writes at hand-over, after the hand-over (plus warm-up): one loop tick + 0.2 s slack."""
MIN_LEAD_S = CONTROLLER_TICK_S + 0.05
"""A config reaching the target less than this (plus warm-up) before a common start is not handed:
the loop's first tick after it may well come after the start. (Closer calls that Kineto drops all
the same are caught by the idle poll that follows.)"""
ARRIVAL_S = 0.1
"""A predicted tick this soon after the hand-over may come before the config is parsed: the next one is used."""
TICK_MARGIN_S = 0.1
"""The start after the predicted tick (+ warm-up): the loop wakes a little late, and Kineto refuses a start
already past when the tick takes the config up."""
KINETO_DEFAULT_LEAD_S = 2 * CONTROLLER_TICK_S
"""Where libkineto puts a start of 0: the parse time + warm-up + this."""
DURATION_PAD_MS = 50
"""Asked of Kineto beyond the duration: its window ends at start + duration, but it opens only when
the target's profiler is enabled, which lags the start by up to tens of ms on a busy machine."""
_AT_ONCE = "PROFILE_START_TIME=0"
_START = re.compile(r"^PROFILE_START_TIME=(\d+)$", re.MULTILINE)


def config_text(req: TraceRequest, log: Path, request_id: str) -> str:
    """The Kineto on-demand config for ``req`` (the same keys as ``dyno gputrace``).

    A duration request without a common start says ``PROFILE_START_TIME=0``
    (valid as it is: Kineto's own default); :func:`stamp_start` replaces it
    with an explicit start when the config is handed over. Its duration is
    padded by :data:`DURATION_PAD_MS` so the window is never shorter than asked.
    """
    lines = [f"ACTIVITIES_LOG_FILE={log}"]
    if req.iterations is not None:
        lines += [
            "PROFILE_START_ITERATION=0",
            "PROFILE_START_ITERATION_ROUNDUP=1",
            f"ACTIVITIES_ITERATIONS={req.iterations}",
            # What Kineto traces instead when the target never stepped an optimizer (said, not hidden).
            f"ACTIVITIES_DURATION_MSECS={ITERATION_FALLBACK_MS}",
        ]
    else:
        start = req.start_time_ms if req.start_time_ms is not None else 0
        lines += [f"PROFILE_START_TIME={start}", f"ACTIVITIES_DURATION_MSECS={kineto_duration_ms(req.duration_ms)}"]
    lines.append(f"ACTIVITIES_WARMUP_PERIOD_SECS={warmup_secs(req)}")

    def flag(v: bool) -> str:
        return "true" if v else "false"

    lines += [
        f"PROFILE_REPORT_INPUT_SHAPES={flag(req.record_shapes)}",
        f"PROFILE_PROFILE_MEMORY={flag(req.profile_memory)}",
        f"PROFILE_WITH_STACK={flag(req.with_stack)}",
        f"PROFILE_WITH_FLOPS={flag(req.with_flops)}",
        f"PROFILE_WITH_MODULES={flag(req.with_modules)}",
    ]
    lines.append(f"REQUEST_TRACE_ID={request_id}")
    return "\n".join(lines)


def warmup_secs(req: TraceRequest) -> int:
    """``ACTIVITIES_WARMUP_PERIOD_SECS`` as written in the config (whole seconds)."""
    return round(req.warmup_s)


def stamp_start(
    config: str, now_wall: float, warmup_s: int, pickup_s: float = PICKUP_S, tick_wall: float | None = None
) -> tuple[str, float | None]:
    """``config`` with its ``PROFILE_START_TIME=0`` made explicit for a hand-over at ``now_wall``.

    Returns (the text to hand over, its start in seconds since the epoch).
    The start is ``now + pickup_s + warm-up`` (default :data:`PICKUP_S`), the
    earliest the profiler loop is sure to see in time whatever its phase,
    rather than Kineto's ``parse + 2 s + warm-up``; a hand-over again after a
    late loop gives it more. ``tick_wall``: a time the target's profiler loop
    ticked (its last trace's end); the start is then :data:`TICK_MARGIN_S`
    (+ warm-up) after its first tick :data:`ARRIVAL_S` after now. A text with an
    explicit start is returned unchanged with that start; one without a start
    line (iterations) with None.
    """
    found = _START.search(config)
    if found is None:
        return config, None
    if found.group(0) != _AT_ONCE:
        return config, int(found.group(1)) / 1000
    if tick_wall is not None:
        start = loop_tick_after(tick_wall, now_wall + ARRIVAL_S) + warmup_s + TICK_MARGIN_S
    else:
        start = now_wall + pickup_s + warmup_s
    start_ms = int(start * 1000)
    return config.replace(_AT_ONCE, f"PROFILE_START_TIME={start_ms}", 1), start_ms / 1000


def loop_tick_after(tick_wall: float, after_wall: float) -> float:
    """The first tick at or after ``after_wall`` of a profiler loop that ticked at ``tick_wall``."""
    return tick_wall + math.ceil((after_wall - tick_wall) / CONTROLLER_TICK_S) * CONTROLLER_TICK_S


def kineto_duration_ms(duration_ms: int | None) -> int:
    """``ACTIVITIES_DURATION_MSECS`` for a request of ``duration_ms``."""
    return (duration_ms or ITERATION_FALLBACK_MS) + DURATION_PAD_MS


def window_end_wall(start_wall: float, duration_ms: int) -> float:
    """When Kineto stops collecting a duration trace handed with start ``start_wall``."""
    return start_wall + kineto_duration_ms(duration_ms) / 1000


def file_due_wall(start_wall: float, duration_ms: int) -> float:
    """When the finished trace can first appear: one loop tick after the window ends."""
    return window_end_wall(start_wall, duration_ms) + CONTROLLER_TICK_S
