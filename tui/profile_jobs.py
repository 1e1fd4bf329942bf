"""py-spy work that outlives its screen (issue 31, items 1 and 2).

A flame graph in progress used to be lost when its screen closed (the worker
was the screen's, and cancelled with it), and ``F``'s duration was forgotten.
Now each host or job screen's profiling state lives on the app, keyed by the
screen (``HostScreen:node07``, ``JobScreen:job 4242``): the duration, the last
graph, and the sampling running now. A screen opened again for the same host
or job finds it; a sampling that ends while its screen is closed keeps its
graph as that screen's last one (``L``) and says so in a toast; the header
shows what runs (``py-spy job 4242 12s``), like REC. The app quitting cancels
the work, and the sampler kills its py-spy children within
:data:`~gpulens.core.pyspy.CANCEL_POLL_S`.

Only the app's thread touches these objects.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from textual.app import App

    from gpulens.analysis.flame.model import Profile

PROFILE_S = 5.0
"""Seconds ``f`` samples the processes for, until ``F`` sets another duration."""


@dataclass
class ProfileState:
    """One screen's profiling, kept by the app (mutable; the app's thread only)."""

    label: str
    """What the header and toasts call it: ``job 4242``, ``node07``."""
    duration_s: float = PROFILE_S
    """How long ``f`` samples (``F`` changes it)."""
    last: tuple[Profile, str] | None = None
    """The last flame graph of this screen and its title (``L`` reopens it)."""
    last_note: str = ""
    doing: str = ""
    """What runs now (``sampling 2 process(es) with py-spy``); "" when idle."""
    deadline: float = 0.0
    """When the running sampling's duration ends (monotonic)."""
    seconds: float = 0.0
    """The running sampling's duration."""
    ready: bool = False
    """A graph finished while its screen was closed and has not been looked at yet."""

    def left_s(self) -> float:
        """Seconds left of the running sampling (0 when idle or reading the output)."""
        return max(0.0, self.deadline - time.monotonic()) if self.doing else 0.0


@dataclass
class ProfileJobs:
    """Every screen's :class:`ProfileState`, by screen key."""

    states: dict[str, ProfileState] = field(default_factory=dict)

    def state(self, key: str, label: str) -> ProfileState:
        """The state of the screen ``key`` (made on first use)."""
        st = self.states.get(key)
        if st is None:
            st = self.states[key] = ProfileState(label)
        return st

    def note(self) -> str:
        """``py-spy job 4242 12s`` (``+1`` more) while samplings run; "" when none does."""
        running = [s for s in self.states.values() if s.doing]
        if not running:
            return ""
        first = running[0]
        more = f" +{len(running) - 1}" if len(running) > 1 else ""
        return f"py-spy {first.label} {round(first.left_s())}s{more}"


def profile_jobs(app: App[object]) -> ProfileJobs:
    """The app's :class:`ProfileJobs` (made on first use)."""
    jobs = getattr(app, "_gpulens_profile_jobs", None)
    if not isinstance(jobs, ProfileJobs):
        jobs = ProfileJobs()
        app._gpulens_profile_jobs = jobs  # type: ignore[attr-defined]
    return jobs
