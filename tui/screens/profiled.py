"""A data screen whose processes can be sampled with py-spy: the keys every such screen shares.

The host and job screens each hand a :class:`~gpulens.tui.profiling.Profiling` their processes
(here and on other hosts); the keys ``f``, ``d``, ``F``, ``L`` and ``m`` (``PROFILE_BINDINGS`` plus
each screen's own ``f`` and ``d``, whose help text names what it samples) do the same on both.
"""

from __future__ import annotations

from gpulens.tui.profiling import Profiling
from gpulens.tui.screens.base import DataScreen


class ProfiledScreen(DataScreen):
    """A :class:`DataScreen` with a :attr:`profiling` component; its profile keys' actions."""

    profiling: Profiling
    """Sampling the screen's processes: set by the screen's ``__init__``."""

    def action_profile(self) -> None:
        """f: sample the screen's processes with py-spy and open a flame graph."""
        self.profiling.profile()

    def action_quick_look(self) -> None:
        """d: one py-spy dump of each of the screen's local processes, as a flame graph."""
        self.profiling.quick_look()

    def action_profile_seconds(self) -> None:
        """F: how many seconds f samples for."""
        self.profiling.ask_duration()

    def action_last_flame(self) -> None:
        """L: reopen the last flame graph."""
        self.profiling.reopen()

    def action_gpu_memory(self) -> None:
        """m: the GPU-memory flame graph of these processes, by Python stack (through their host's agent)."""
        from gpulens.tui.gpumem_flame import open_gpu_memory

        open_gpu_memory(self.profiling)
