"""This machine's GPU memory by stack, from the source that can read it itself (the TUI as root, no agent).

A source that reads it (this machine's in-process collector, handed
``agent.gpumem.LocalGpuMemory`` by the command line when eBPF can load)
offers ``gpu_memory_stacks(pids)``; any other host is asked through its
agent (the ``gpumem`` request, tui/gpumem_flame.py).
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from gpulens.sources.local import offered


def local_gpu_memory(source: object, pids: list[int]) -> Future[tuple[str, dict[str, Any]]] | None:
    """Folded live bytes of this machine's ``pids`` and a note, or None when no part of ``source`` reads them."""
    for own in offered(source, "gpu_memory_stacks"):
        fut: Future[tuple[str, dict[str, Any]]] | None = own(pids)
        if fut is not None:
            return fut
    return None
