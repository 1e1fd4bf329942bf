"""py-spy on this machine, from the source that can run it itself (the TUI's own machine).

A source that samples this machine in-process (``LocalSource``, handed
``agent.pyspy`` as its ``profiler`` by the command line: sources and the TUI
never import collectors) offers a :class:`LocalProfiler`; any other host is
asked through its agent (the ``profile`` request, tui/profiling.py). With no
part that offers one, the TUI says py-spy is not available here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from gpulens.sources.local import offered

if TYPE_CHECKING:
    from gpulens.analysis.flame.model import Profile
    from gpulens.analysis.flame.pyspy import Sampled


class LocalProfiler(Protocol):
    """Samples this machine's Python processes with py-spy (``gpulens.agent.pyspy``)."""

    def sample_counted(self, pids: list[int], duration_s: float, rate_hz: int = 100, *,
                       count_threads: bool = True, cancel: Callable[[], bool] | None = None) -> Sampled:
        """``pids`` sampled for ``duration_s`` seconds, one profile, and the idle samples py-spy left out;
        ``cancel`` returning True kills py-spy and raises SamplingCancelled."""
        ...

    def dump(self, pid: int) -> Profile:
        """One stack per thread of ``pid`` now (``py-spy dump``)."""
        ...


def local_profiler(source: object) -> LocalProfiler | None:
    """The py-spy of the first part of ``source`` that runs it on this machine, None when no part does."""
    found: LocalProfiler | None = next(offered(source, "profiler"), None)
    return found
