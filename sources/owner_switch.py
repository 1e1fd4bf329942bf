"""The TUI's trace service while it owns this host's Kineto endpoint, and after it handed it over.

A TUI watching this machine binds the Kineto name first when it can (an
in-process owner, ``gpulens.agent.agent.endpoint_owner``). When a ``gpulens
agent`` starts later, it asks the owner to hand the endpoint over
(``gpulens.ipc.handover``), so that the agent's remote viewers can trace
here. :class:`HandoverTraceService` is what the TUI's screens hold through
that, a ``TraceService`` in three states:

- ``local``: the owner's own :class:`~gpulens.ipc.kineto.service.LocalTraceService`.
- ``draining`` (the owner lets its accepted traces reach Kineto): new
  requests wait here, shown as queued, and are sent once the hand-over
  ended -- to the new owner, or locally when it did not happen.
- ``remote``: after the release, the new holder of the name is checked
  before a single trace goes there (:func:`~gpulens.sources.stream.control_trace.connect_owner`:
  a gpulens of root or of our uid whose control socket the kernel
  attributes to the holder's pid), then every trace goes through its
  control socket, exactly as when the agent had started first. A holder
  that fails the check (someone took the name in between) is never sent
  anything: the name is taken back if it is free, else tracing stops with
  the reason (``failed``).

Traces the owner accepted before the hand-over finish locally (their files
land where they were planned), and :meth:`jobs` keeps listing them.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import CancelledError, Future
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from gpulens.core.errors import GpulensError
from gpulens.ipc.errors import StreamError
from gpulens.ipc.kineto.protocol import JobListener, TraceService
from gpulens.ipc.kineto.registry import PollingProcess
from gpulens.ipc.kineto.requests import TraceJob, TraceRequest, TraceResult, TraceState
from gpulens.ipc.kineto.untraceable import Untraceable, UntraceableKind

if TYPE_CHECKING:
    from gpulens.core.events import Requester

log = logging.getLogger(__name__)

RECHECK_S = 2.0
"""How often, while tracing through another owner, the holder of the Kineto name is looked at."""
NEW_OWNER_WAIT_S = 10.0
"""How long, after the release, the new owner may take to bind the name and its control socket."""
Connect = Callable[[], TraceService]
"""Connects to the gpulens now holding the name, checked (raises StreamError when it fails the check)."""


@runtime_checkable
class Rebindable(Protocol):
    """A local trace service that can take the Kineto name back (``LocalTraceService.rebind``)."""

    def rebind(self) -> None:
        """Bind the endpoint's name again; raises as ``start``."""
        ...


class HandoverTraceService:
    """The TUI owner's trace service, local until the hand-over, then the new owner's (a TraceService).

    ``local``: the owner's LocalTraceService. ``reclaim``: takes the name
    back (the owner agent's ``reclaim_endpoint``; default ``local.rebind``).
    ``connect``: how to reach the new owner (default: :func:`connect_owner`
    on ``socket_dir``, files under ``download_dir``). While remote, the
    holder of the name is looked at every :data:`RECHECK_S` seconds (on the
    callers' queries; ``holder`` and ``bound`` say who holds the name and
    whether anyone does): when the new owner exited the name is taken back;
    when another gpulens holds it now, that one is checked and used.
    """

    def __init__(
        self,
        local: object,
        socket_dir: str | None = None,
        *,
        download_dir: Path | None = None,
        connect: Connect | None = None,
        reclaim: Callable[[], None] | None = None,
        holder: Callable[[], int | None] | None = None,
        bound: Callable[[], bool] | None = None,
        remote: TraceService | None = None,
    ) -> None:
        if not isinstance(local, TraceService):  # the owner agent's, typed optional (an agent may have none)
            raise TypeError(f"the owner's trace service is {type(local).__name__}, not a TraceService")
        self.local: TraceService = local
        if reclaim is None:
            if not isinstance(local, Rebindable):
                raise TypeError(f"{type(local).__name__} cannot take the Kineto name back: pass reclaim")
            reclaim = local.rebind
        self._reclaim = reclaim
        self._holder = holder or (lambda: holder_pid(self.socket_dir))
        self._bound = bound or (lambda: name_bound(self.socket_dir))
        self._remote_pid: int | None = None
        self._checked = 0.0
        self._following = False
        self._old: list[TraceService] = []
        self.socket_dir = socket_dir
        self._download_dir = download_dir
        self._connect = connect or self._connect_owner
        self.remote: TraceService | None = None
        self.state = "local"
        self.error = ""
        self._held: list[tuple[TraceJob, Future[TraceResult]]] = []
        self._listeners: list[JobListener] = []
        self._lock = threading.Lock()
        if remote is not None:  # started while another gpulens held the name: follow it, take it when it exits
            self.state, self.remote = "remote", remote
            self._remote_pid = self._holder()

    @classmethod
    def follower(cls, remote: TraceService, take: Callable[[], tuple[TraceService, Callable[[], None]]],
                 socket_dir: str | None = None, *, holder: Callable[[], int | None] | None = None,
                 bound: Callable[[], bool] | None = None) -> HandoverTraceService:
        """A TUI that found the name held by another gpulens: traces through it (``remote``) and, when that
        one exits, becomes the owner itself within :data:`RECHECK_S` (``take()``: binds the name, returns the
        new LocalTraceService and how to take it back later; raises EndpointBusy while it is held)."""
        box: list[HandoverTraceService] = []

        def become_owner() -> None:
            svc = box[0]
            local, reclaim = take()
            with svc._lock:
                listeners = list(svc._listeners)
                svc.local, svc._reclaim = local, reclaim
            for fn in listeners:
                local.add_listener(fn)
            log.warning("the gpulens that held the Kineto endpoint (pid %s) exited: this gpulens serves it now",
                        svc._remote_pid if svc._remote_pid is not None else "?")

        service = cls(NoTraceService("no Kineto endpoint here yet: traces go through the gpulens holding it"),
                      socket_dir, reclaim=become_owner, remote=remote, holder=holder, bound=bound)
        box.append(service)
        return service

    # -- the owner's events (gpulens.agent.kineto_owner.HandoverServer) -----------
    def on_handover(self, event: str) -> None:
        """``draining``: hold new requests; ``resumed``: send them locally; ``released``: switch."""
        if event == "draining":
            with self._lock:
                self.state = "draining"
        elif event == "resumed":
            self._settle("local", None)
        elif event == "released":
            threading.Thread(target=self._switch, name="gpulens-trace-handover", daemon=True).start()

    def _switch(self) -> None:
        """Check the new holder, then trace through it; never send anything to one that fails the check."""
        deadline = time.monotonic() + NEW_OWNER_WAIT_S
        why = ""
        while True:
            try:
                remote = self._connect()
                self._remote_pid = self._holder()
                break
            except (OSError, GpulensError, RuntimeError, ValueError) as err:  # not up yet, or not one we may use
                why = str(err) or type(err).__name__
            if time.monotonic() > deadline:
                self._fall_back(why)
                return
            time.sleep(0.2)
        for fn in self._listeners_now():
            remote.add_listener(fn)
        log.info("tracing through the new owner of the Kineto endpoint: %s", remote.address)
        self._settle("remote", remote)

    def _fall_back(self, why: str) -> None:
        """The new holder is not one we may use: take the name back, or say why tracing stopped."""
        try:
            self._reclaim()
        except (OSError, GpulensError, RuntimeError, ValueError) as err:  # ValueError: the service would not start
            reason = (f"the Kineto endpoint was handed over, but its holder now is not a gpulens of yours or "
                      f"root's ({why}), and it cannot be taken back ({err}): tracing is off")
            log.warning("%s", reason)
            self._remote_pid = self._holder()  # looked at again only when the holder changes
            self._settle("failed", None, reason)
            return
        log.warning("the new Kineto endpoint owner did not check out (%s); serving it here again", why)
        self._settle("local", None)

    def _settle(self, state: str, remote: TraceService | None, error: str = "") -> None:
        """Enter ``state`` and send (or fail) every request held meanwhile."""
        with self._lock:
            self.state, self.error = state, error
            if remote is not None or state != "remote":
                if self.remote is not None and self.remote is not remote:
                    self._old.append(self.remote)
                self.remote = remote
            self._following = False
            held, self._held = self._held, []
        for job, fut in held:
            _chain(self._route(job.request), fut)

    def _recheck(self) -> None:
        """While remote (or off): has the owner changed? Looked at on a thread, every RECHECK_S at most."""
        now = time.monotonic()
        with self._lock:
            if self.state not in ("remote", "failed") or self._following or now - self._checked < RECHECK_S:
                return
            self._checked = now
            self._following = True
        threading.Thread(target=self._probe, name="gpulens-trace-owner", daemon=True).start()

    def _probe(self) -> None:
        """Follow the owner when it exited (the name is free), was replaced, or our link to it closed."""
        if not self._bound():
            self._begin_follow(None)
            return
        pid = self._holder()  # None: not visible to us (root's process seen by a user)
        if pid is not None and pid != self._remote_pid:
            self._begin_follow(pid)
            return
        if self.state == "remote" and not remote_alive(self.remote):
            self._begin_follow(pid)
            return
        with self._lock:
            self._following = False

    def _begin_follow(self, pid: int | None) -> None:
        with self._lock:
            self.state = "draining"  # requests wait for the outcome
        self._follow(pid)

    def _follow(self, pid: int | None) -> None:
        if pid is None:  # the new owner is gone and nobody holds the name: ours again
            try:
                self._reclaim()
            except (OSError, GpulensError, RuntimeError, ValueError) as err:  # ValueError: the service would not start
                log.info("Kineto name not taken back (%s); looking for its new holder", err)
            else:
                log.info("the Kineto endpoint's owner exited; serving it here again")
                self._settle("local", None)
                return
        self._switch()

    # -- TraceService --------------------------------------------------------------
    @property
    def address(self) -> str:
        """Where traces are taken now."""
        current = self._current()
        return current.address if current is not None else "nowhere (tracing is off)"

    def polling_pids(self) -> set[int]:
        """The current owner's polling pids."""
        current = self._current()
        return current.polling_pids() if current is not None else set()

    def processes(self) -> list[PollingProcess]:
        """The current owner's polling processes."""
        current = self._current()
        return current.processes() if current is not None else []

    def diagnose(self, pid: int, /) -> Untraceable | None:
        """The current owner's answer (or why tracing is off)."""
        current = self._current()
        return current.diagnose(pid) if current is not None else Untraceable(UntraceableKind.TRACING_OFF,
                                                                             detail=self.error)

    def jobs(self) -> list[TraceJob]:
        """Traces accepted here (those finishing locally too), held ones, then the new owner's."""
        with self._lock:
            held = [job for job, _ in self._held]
            others = [*self._old, *([self.remote] if self.remote is not None else [])]
        return [*self.local.jobs(), *held, *(job for svc in others for job in svc.jobs())]

    def add_listener(self, listener: JobListener, /) -> None:
        """Called on every state change, before and after the hand-over."""
        with self._lock:
            self._listeners.append(listener)
            remote = self.remote
        self.local.add_listener(listener)
        if remote is not None:
            remote.add_listener(listener)

    def remove_listener(self, listener: JobListener, /) -> None:
        """Undo add_listener."""
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)
            remote = self.remote
        self.local.remove_listener(listener)
        if remote is not None:
            remote.remove_listener(listener)

    def request_trace(self, req: TraceRequest, /) -> Future[TraceResult]:
        """Trace through the current owner; during a hand-over the request waits (shown queued)."""
        fut: Future[TraceResult] = Future()
        job = TraceJob(f"held-{os.getpid()}-{id(fut):x}", req, req.pids, TraceState.QUEUED,
                       "waiting for the Kineto endpoint to be handed over to the agent starting here",
                       time.monotonic())
        with self._lock:
            draining = self.state == "draining"
            if draining:
                self._held.append((job, fut))
            listeners = list(self._listeners)
        if not draining:
            return self._route(req)
        for fn in listeners:
            fn(job)
        return fut

    def stop(self) -> None:
        """Close the link to the new owner (the local service is the owner's to stop); held requests fail."""
        with self._lock:
            remote, self.remote = self.remote, None
            held, self._held = self._held, []
        for _job, fut in held:
            fut.set_exception(RuntimeError("the trace service stopped"))
        if remote is not None:
            remote.stop()

    # -- helpers -----------------------------------------------------------------
    def _current(self) -> TraceService | None:
        self._recheck()
        with self._lock:
            if self.state == "remote":
                return self.remote
            return None if self.state == "failed" else self.local

    def _route(self, req: TraceRequest) -> Future[TraceResult]:
        current = self._current()
        if current is None:
            fut: Future[TraceResult] = Future()
            fut.set_exception(RuntimeError(self.error or "tracing is off"))
            return fut
        return current.request_trace(req)

    def _listeners_now(self) -> list[JobListener]:
        with self._lock:
            return list(self._listeners)

    def _connect_owner(self) -> TraceService:
        from gpulens.sources.stream.control_trace import ControlTraceService, connect_owner
        from gpulens.sources.tracing import default_download_dir

        if self._holder() == os.getpid():
            raise RuntimeError("this process still holds the Kineto name")
        # A holder this user cannot see in /proc is looked for as root's control socket there.
        return ControlTraceService(connect_owner(self.socket_dir, self._download_dir or default_download_dir()))


def name_bound(socket_dir: str | None) -> bool:
    """Does anyone hold the Kineto name now (a connect, no /proc scan)?"""
    from gpulens.ipc.kineto.endpoint import (
        ABSTRACT_NAME,
        SOCKET_NAME,
        is_live,
        resolve_socket_dir,
    )

    directory = resolve_socket_dir(socket_dir)
    return is_live(os.path.join(directory, SOCKET_NAME) if directory else ABSTRACT_NAME)


def remote_alive(remote: TraceService | None) -> bool:
    """False once the link to the owner we trace through has closed (it exited or restarted)."""
    from gpulens.ipc.request_schema import TraceStatusParams
    from gpulens.sources.ask import ask

    link: Requester | None = getattr(remote, "link", None)
    if link is None:
        return True
    try:
        ask(link, "", TraceStatusParams(tag="liveness"), 3.0).result(timeout=4)
    except TimeoutError:
        return True  # slow, not gone
    except (StreamError, CancelledError) as err:
        return "closed" not in str(err)
    return True


def holder_pid(socket_dir: str | None) -> int | None:
    """The pid holding the Kineto name (None: nobody, or not one this user can see)."""
    from gpulens.ipc.kineto.endpoint import holder_of, resolve_socket_dir

    held = holder_of(resolve_socket_dir(socket_dir))
    return None if held is None else held[0]


def _chain(src: Future[TraceResult], dst: Future[TraceResult]) -> None:
    """``dst`` (a held request's) gets ``src``'s outcome."""

    def done(f: Future[TraceResult]) -> None:
        err = f.exception()
        if err is not None:
            dst.set_exception(err)
        else:
            dst.set_result(f.result())

    src.add_done_callback(done)


class NoTraceService:
    """A trace service with nothing behind it (a follower's local side before it owns the name)."""

    def __init__(self, why: str) -> None:
        self.why = why

    address = "no Kineto endpoint here"

    def request_trace(self, req: TraceRequest, /) -> Future[TraceResult]:
        """Fails at once with the reason."""
        fut: Future[TraceResult] = Future()
        fut.set_exception(RuntimeError(self.why))
        return fut

    def rebind(self) -> None:
        """Nothing to bind."""
        raise RuntimeError(self.why)

    def jobs(self) -> list[TraceJob]:
        """None."""
        return []

    def add_listener(self, listener: JobListener, /) -> None:
        """Nothing ever changes state here."""

    def remove_listener(self, listener: JobListener, /) -> None:
        """Undo add_listener (nothing)."""

    def polling_pids(self) -> set[int]:
        """None."""
        return set()

    def processes(self) -> list[PollingProcess]:
        """None."""
        return []

    def diagnose(self, pid: int, /) -> Untraceable | None:
        """The reason."""
        return Untraceable(UntraceableKind.TRACING_OFF, detail=self.why)

    def stop(self) -> None:
        """Nothing to stop."""
