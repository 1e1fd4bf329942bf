"""Starting and stopping the long-lived daemon threads of services (endpoint, control socket, watchers).

Every service thread is a daemon (so no thread can keep the process from
exiting on SIGTERM) and is stopped the same way: set its stop event, join it
for a bounded time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

JOIN_S = 2.0
"""How long ``stop_thread`` waits for a thread to notice its stop event."""


def start_thread(target: Callable[[], None], name: str) -> threading.Thread:
    """Start ``target`` in a daemon thread called ``name``; returns the thread."""
    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread


def stop_thread(stop: threading.Event, thread: threading.Thread | None, timeout_s: float = JOIN_S) -> None:
    """Set ``stop`` and wait up to ``timeout_s`` for ``thread`` (None: nothing to wait for)."""
    stop.set()
    if thread is not None:
        thread.join(timeout=timeout_s)
