"""Owning this host's Kineto endpoint whichever gpulens started first (issue 11, section 2).

Two halves, both given only what they need (never the agent):

- :class:`EndpointClaimer` runs in an agent that found the Kineto name
  taken. When the holder is a local gpulens that can hand the endpoint over
  (``gpulens.ipc.handover``), it asks it to pass its bound socket on
  (``SCM_RIGHTS``) and serves that socket: the name is never free; otherwise (an older gpulens, ``gpulens trace``, dynolog, anyone
  else) the agent serves without traces, says why, and tries again every
  ``retry_s`` seconds, so it takes the name when the holder exits.
- :class:`HandoverServer` runs in an in-process endpoint owner (a TUI's):
  it answers the request, only for root or its own uid (``SO_PEERCRED``),
  by letting every accepted trace reach Kineto, passing its bound socket to
  the asking agent (serving it again if anything fails), releasing its
  control socket, and telling the owner's user (``on_event``) so that it
  traces through the new owner from then on (after checking who that is).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from gpulens.agent.request_kinds import RequestError
from gpulens.core.errors import GpulensError
from gpulens.core.reasons import rendered
from gpulens.ipc.handover import handover_allowed, pass_socket, refusal, request_handover
from gpulens.ipc.principal import Principal
from gpulens.ipc.refusal import HandoverKind, NotHandedOver, failed

if TYPE_CHECKING:
    from gpulens.ipc.kineto.protocol import TraceService
    from gpulens.ipc.kineto.service import LocalTraceService

StartService = Callable[[socket.socket | None], "LocalTraceService"]
"""Starts the trace service (serving an adopted bound socket when given one); raises EndpointBusy when taken."""

log = logging.getLogger("gpulens.agent")

CLAIM_RETRY_S = 15.0
"""How often an agent without the Kineto name tries to get it again."""
DRAIN_S = 30.0
"""How long an owner waits for its accepted traces to reach Kineto before releasing the name."""
ANSWER_S = DRAIN_S + 15.0
"""How long the asking agent waits for the holder's answer."""

EventFn = Callable[[str], None]
"""Told ``draining`` (hold new traces), ``resumed`` (the hand-over did not happen) or ``released``."""


class EndpointClaimer:
    """Gets the Kineto name for an agent that found it taken (a daemon thread).

    ``socket_dir``: the Kineto socket directory served (None: the abstract
    name). ``start_service(adopt=None)`` builds and starts a trace service, serving
    ``adopt`` (a passed, bound socket) when given (raising
    EndpointBusy while the name is taken); ``install(svc)`` hands a started
    one to the agent; ``note(reason)`` records why there is none yet.
    """

    def __init__(
        self,
        socket_dir: str | None,
        start_service: StartService,
        install: Callable[[LocalTraceService], None],
        note: Callable[[str], None],
        stop: threading.Event,
        *,
        retry_s: float = CLAIM_RETRY_S,
    ) -> None:
        self.socket_dir = socket_dir
        self._start_service = start_service
        self._install = install
        self._note = note
        self._stop = stop
        self.retry_s = retry_s
        self.thread: threading.Thread | None = None

    def start(self, busy: Exception | None = None) -> None:
        """Claim in a daemon thread: at once, then every ``retry_s`` seconds until bound or stopped.

        ``busy``: the EndpointBusy the caller just got (the first attempt asks the holder straight away).
        """
        self.thread = threading.Thread(target=self._loop, args=(busy,), name="gpulens-kineto-claim", daemon=True)
        self.thread.start()

    def _loop(self, busy: Exception | None) -> None:
        last = ""
        while not self._stop.is_set():
            reason = self.claim_once(busy)
            busy = None
            if reason is None:
                return
            why = str(reason)  # the edge: the log and the agent's trace_error
            if why != last:
                log.warning("Kineto endpoint not started: %s; trying again every %g s", why, self.retry_s)
                last = why
            self._note(f"Kineto endpoint not started: {why}")
            if self._stop.wait(self.retry_s):
                return

    def claim_once(self, taken: Exception | None = None) -> NotHandedOver | None:
        """One attempt: bind, or have a gpulens holder pass its bound socket on and serve it; None when installed,
        else why not (``TAKEN``, ``HOLDER_KEPT``, ``STOPPING`` or ``FAILED``).

        ``taken``: the EndpointBusy just raised (no second bind attempt first).
        """
        from gpulens.ipc.errors import EndpointBusy
        from gpulens.ipc.kineto.endpoint import holder_of

        try:
            if taken is not None:
                raise taken
            return self._take(self._start_service(None))
        except EndpointBusy as busy:
            held = holder_of(self.socket_dir)
            uid = None if held is None else held[2]
            if held is None or uid is None:
                return NotHandedOver(HandoverKind.TAKEN, str(busy))
            pid = held[0]
            adopted: list[LocalTraceService] = []

            def adopt(sock: socket.socket) -> Callable[[], None]:
                if self._stop.is_set():
                    raise RuntimeError("the agent is stopping")
                svc = self._start_service(sock)
                adopted.append(svc)
                return lambda: _stop_keeping_name(adopted.pop())

            answer = request_handover(self.socket_dir, pid, uid, ANSWER_S, adopt)
            if not answer.released or not adopted:
                return NotHandedOver(HandoverKind.HOLDER_KEPT, str(busy), pid=pid, answer=answer.reason)
            log.info("pid %d (uid %d) passed its Kineto endpoint on; serving it", pid, uid)
            return self._take(adopted[0])
        except (OSError, GpulensError, RuntimeError) as err:  # the agent serves without traces and says why
            return failed(err)

    def _take(self, svc: LocalTraceService) -> NotHandedOver | None:
        if self._stop.is_set():
            svc.stop()
            return NotHandedOver(HandoverKind.STOPPING)
        self._install(svc)
        return None


def _stop_keeping_name(svc: LocalTraceService) -> None:
    """Stop a service that adopted a passed socket, without unbinding the name (its passer serves it again)."""
    sock = svc.endpoint.detach()
    if sock is not None:
        sock.close()
    svc.stop()


class HandoverServer:
    """Answers ``endpoint_handover`` for an in-process endpoint owner (one hand-over at a time).

    ``service()`` is the owner's LocalTraceService now; ``release_control()``
    stops its control socket; ``on_event`` is told each step (see :data:`EventFn`).
    """

    def __init__(
        self, service: Callable[[], TraceService | None], release_control: Callable[[], None], on_event: EventFn
    ) -> None:
        self._service = service
        self._release_control = release_control
        self._on_event = on_event
        self._lock = threading.Lock()
        self.done = False

    def __call__(self, principal: Principal, params: Mapping[str, object]) -> dict[str, object]:
        me = os.geteuid()
        if not handover_allowed(principal, me):
            why = refusal(principal, me)
            log.warning("%s", why)
            raise RequestError(why)
        if not self._lock.acquire(blocking=False):
            raise RequestError("endpoint hand-over already in progress")
        try:
            svc = self._service()
            release = getattr(svc, "release_endpoint", None)  # a LocalTraceService's (not the protocol's)
            if self.done or svc is None or release is None:
                raise RequestError("this gpulens holds no Kineto endpoint to hand over")
            receiver = params.get("receiver")
            self._on_event("draining")
            why = release(
                f"this gpulens handed the Kineto endpoint over to the agent of {principal.describe()}: "
                "trace through that agent ('gpulens trace' finds it)",
                DRAIN_S,
                # release_endpoint (ipc/kineto/service.py) takes the receiver's words: rendered here, its edge
                lambda sock: rendered(pass_socket(receiver, sock, principal.uid)),
            )
            if why is not None:
                self._on_event("resumed")
                log.warning("Kineto endpoint kept: %s", why)
                raise RequestError(f"endpoint hand-over not now: {why}")
            self._release_control()
            self.done = True
            log.info("Kineto endpoint %s passed on to %s", svc.address, principal.describe())
            self._on_event("released")
            return {"released": True}
        finally:
            self._lock.release()
