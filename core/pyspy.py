"""What running py-spy (``collectors.pyspy``) and reading its output (``analysis.flame.pyspy``) share.

The errors a sampling raises, the bound on what py-spy may write, how often
a sampling looks at its ``cancel``, and :class:`Recording`: py-spy's raw
output per process, as the runner hands it to the reader. Pure data: no
process is started here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpulens.core.errors import GpulensError

MAX_OUTPUT_BYTES = 256 << 20
"""The most py-spy may write for one process (a record's folded stacks, a dump's JSON)."""
CANCEL_POLL_S = 0.2
"""How often a sampling run looks at its ``cancel``."""


class ProfilerError(GpulensError):
    """The stack sampler (py-spy) is missing or failed."""

    title = "profiler error"


class ProfilerPermissionError(ProfilerError):
    """The sampler may not attach to the process (ptrace denied)."""

    title = "no permission to sample"


class SamplingCancelled(ProfilerError):
    """The sampling was cancelled (its py-spy children are killed)."""


@dataclass(frozen=True, slots=True)
class Recording:
    """One ``py-spy record`` run over ``pids``: each process's raw folded output, and the others' errors.

    ``outputs``: (pid, the bytes py-spy wrote: ``--format raw``, aggregated by
    function), in the order of ``pids``, for the processes sampled;
    ``errors``: why each other one was not; ``threads``: Python threads per pid
    counted before sampling (None: not countable, or not counted).
    """

    pids: tuple[int, ...]
    seconds: int
    rate_hz: int
    outputs: tuple[tuple[int, bytes], ...]
    errors: tuple[ProfilerError, ...] = ()
    threads: Mapping[int, int | None] = field(default_factory=dict)
