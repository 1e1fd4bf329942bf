"""py-spy in one call: run it (``collectors.pyspy``) and read its output (``analysis.flame.pyspy``).

The sampler of the agent's ``profile`` request (``request_kinds.find_profiler``),
of ``gpulens profile``, and of the TUI's own machine (the command line hands
this module to ``sources.local.LocalSource`` as its ``profiler``: the TUI never
imports collectors). Raises ProfilerPermissionError without ptrace permission,
ProfilerError when py-spy is missing, the process is gone or sampling fails
(``gpulens.core.pyspy``).
"""

from __future__ import annotations

from collections.abc import Callable

from gpulens.analysis.flame.model import Profile
from gpulens.analysis.flame.pyspy import Sampled, dump_profile, sampled
from gpulens.collectors.pyspy import dump_json, record


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
    ``cancel``: once it returns True, every py-spy child is killed and
    SamplingCancelled is raised (``collectors.pyspy.record``).
    """
    return sampled(record(pids, duration_s, rate_hz, count_threads=count_threads, cancel=cancel))


def dump(pid: int) -> Profile:
    """One stack per thread of ``pid`` right now (``py-spy dump --json``), 1 sample each.

    Raises ProfilerPermissionError / ProfilerError as :func:`sample_pids`.
    """
    return dump_profile(pid, dump_json(pid))
