"""Background work of the screens: thread workers the app owns, cancelled with their screen.

``Worker.StateChanged`` does not bubble, so a worker's failure reaches only
the node that runs it. The screens' workers therefore run on the app, whose
one handler (:func:`notify_failure`) says when any of them fails; each
:class:`Background` cancels its own workers when its screen goes away
(``cancel`` from the screen's ``on_unmount``), as Textual does for a node's
workers. Worker code checks :func:`cancelled` in its loops, waits on futures
with :func:`wait` and hands results to the UI with :func:`call_in_app`, which
drops them once the worker is cancelled.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, ParamSpec, TypeVar

from textual.app import App
from textual.dom import DOMNode
from textual.worker import Worker, WorkerState, get_current_worker

T = TypeVar("T")
_P = ParamSpec("_P")
POLL_S = 0.2
"""How often a wait checks whether its worker was cancelled."""


class Cancelled(Exception):
    """Raised inside a worker (by :func:`check_cancelled`) to stop work nobody wants any more."""


class Background:
    """The thread workers one screen started; a newer one in a group cancels the older."""

    def __init__(self, owner: DOMNode) -> None:
        self.owner = owner
        self._workers: dict[str, Worker[Any]] = {}

    def start(self, work: Callable[[], object], *, name: str, group: str) -> Worker[Any]:
        """Run ``work`` in a thread; ``name`` says what failed if it raises (e.g. ``py-spy profile``)."""
        previous = self._workers.get(group)
        if previous is not None:
            previous.cancel()
        worker: Worker[Any] = self.owner.app.run_worker(
            work, name=name, group=group, thread=True, exit_on_error=False)
        self._workers[group] = worker
        return worker

    def cancel(self) -> None:
        """Cancel every worker still running (the screen is going away)."""
        for worker in self._workers.values():
            worker.cancel()
        self._workers.clear()


def cancelled() -> bool:
    """In a worker: True once its work is no longer wanted (its screen left, or a newer one replaced it)."""
    return get_current_worker().is_cancelled


def check_cancelled() -> None:
    """In a worker: raise :class:`Cancelled` once it is cancelled (for progress callbacks)."""
    if cancelled():
        raise Cancelled()


def wait(fut: Future[T], timeout_s: float) -> T | None:
    """In a worker: ``fut``'s result, or None as soon as the worker is cancelled.

    Raises ``fut``'s error, or ``TimeoutError`` after ``timeout_s``. The futures
    waited on here (agent requests) never hold None.
    """
    deadline = time.monotonic() + timeout_s
    while not fut.done():
        if cancelled():
            return None
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no answer in {timeout_s:g} s")
        concurrent.futures.wait([fut], timeout=min(POLL_S, left))
    return fut.result()


def call_in_app(fn: Callable[_P, object], *args: _P.args, **kwargs: _P.kwargs) -> None:
    """In a worker: run ``fn`` on the app's thread, unless the worker is cancelled by then.

    Checked on the app's thread, where cancelling happens, so a screen that has
    gone never gets a late result.
    """
    worker = get_current_worker()

    def deliver() -> None:
        if not worker.is_cancelled:
            fn(*args, **kwargs)

    if not worker.is_cancelled:
        worker.node.app.call_from_thread(deliver)


def notify_failure(app: App[Any], event: Worker.StateChanged) -> None:
    """The app's ``Worker.StateChanged`` handler: a failed worker becomes an error notice."""
    if event.state is WorkerState.ERROR:
        app.notify(f"{event.worker.name} failed: {event.worker.error}", severity="error", timeout=10)
