"""The agent's trace service over its life: the Kineto endpoint, its claim, its hand-over, the control socket.

:class:`TraceHost` starts the local trace service (or, when a local gpulens
holds the Kineto name, an :class:`~gpulens.agent.kineto_owner.EndpointClaimer`
that asks for it and retries), installs it in the
:class:`~gpulens.agent.requests.RequestRunner`, serves the local control
socket beside it, answers hand-over requests (a TUI's in-process owner,
:class:`~gpulens.agent.kineto_owner.HandoverServer`) and takes the name
back. It is handed the runner, the agent's stop event and the function
that serves one control-socket connection -- never the agent.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from gpulens.agent.kineto_owner import CLAIM_RETRY_S, EndpointClaimer, EventFn, HandoverServer
from gpulens.agent.requests import RequestRunner
from gpulens.core.errors import GpulensError
from gpulens.ipc.principal import Principal
from gpulens.ipc.transport import Transport

if TYPE_CHECKING:
    from gpulens.ipc.control import ControlListener
    from gpulens.ipc.kineto.protocol import TraceService
    from gpulens.ipc.kineto.service import LocalTraceService

log = logging.getLogger("gpulens.agent")

STOP_JOIN_S = 1.0
ServeControl = Callable[[Transport, str, Principal], None]
"""Serves one control-socket peer (its transport, its name, the principal ``SO_PEERCRED`` proved)."""


class TraceHost:
    """The trace service's lifetime for one agent: start or claim, install, hand over, take back, stop."""

    def __init__(self, requests: RequestRunner, stop: threading.Event, serve_control: ServeControl) -> None:
        self.requests = requests
        self._stop = stop
        self._serve_control = serve_control
        self._control: ControlListener | None = None
        self._claimer: EndpointClaimer | None = None
        self._handover: HandoverServer | None = None

    def start(self, socket_dir: str | None = None, *, strict: bool = False, retry_s: float = CLAIM_RETRY_S) -> None:
        """Own this host's Kineto endpoint when the trace service is installed (and the control socket).

        ``strict``: raise why the endpoint could not be bound instead of logging it and
        serving without traces. Not strict, a taken name is claimed in the background,
        tried again every ``retry_s`` seconds (``Agent.start_trace_service``).
        """
        try:
            from gpulens.ipc.errors import EndpointBusy
            from gpulens.ipc.kineto.endpoint import resolve_socket_dir
            from gpulens.ipc.kineto.service import LocalTraceService
        except ImportError as err:
            self.requests.trace_error = f"trace service not installed: {err}"
            if strict:
                raise
            return

        def started(adopt: socket.socket | None = None) -> LocalTraceService:
            svc = LocalTraceService(socket_dir)
            svc.start(adopt)
            return svc

        try:
            svc = started()
        except EndpointBusy as err:
            if strict:
                raise
            self.requests.trace_error = f"Kineto endpoint not started: {err}"
            log.warning("%s; asking its holder to hand it over, else trying again every %g s",
                        self.requests.trace_error, retry_s)
            self._claimer = EndpointClaimer(
                resolve_socket_dir(socket_dir), started, self.install, self._note_error, self._stop, retry_s=retry_s,
            )
            self._claimer.start(err)
            return
        except (OSError, GpulensError, RuntimeError, ValueError) as err:  # the socket directory, the bind, a thread
            if strict:
                raise
            self.requests.trace_error = f"Kineto endpoint not started: {err}"
            log.warning("%s", self.requests.trace_error)
            return
        self.install(svc)

    def install(self, svc: TraceService) -> None:
        """Serve traces with ``svc`` (started, holding the name) and open the control socket."""
        self.requests.trace_service = svc
        self.requests.trace_error = ""
        log.info("Kineto endpoint serving at %s", svc.address)
        if getattr(svc, "dynolog", None) is None:
            self._start_control(getattr(svc, "socket_dir", None) or "")

    def _note_error(self, reason: str) -> None:
        self.requests.trace_error = reason

    def allow_handover(self, on_event: EventFn) -> None:
        """Hand this owner's endpoint over when a later agent of root or our uid asks (a TUI's owner)."""
        self._handover = HandoverServer(lambda: self.requests.trace_service, self.stop_control, on_event)
        self.requests.handover = self._handover

    def reclaim(self) -> None:
        """Take the Kineto name back after handing it over; raises as ``LocalTraceService.start``."""
        svc = self.requests.trace_service
        rebind = getattr(svc, "rebind", None)
        if svc is None or rebind is None:
            raise RuntimeError("this gpulens has no Kineto endpoint to take back")
        rebind()
        if self._control is None:
            self._start_control(getattr(svc, "socket_dir", None) or "")
        if self._handover is not None:
            self._handover.done = False
        log.info("Kineto endpoint %s taken back", svc.address)

    def stop_control(self) -> None:
        """Stop serving the control socket (idempotent)."""
        control, self._control = self._control, None
        if control is not None:
            control.stop()

    def close(self) -> None:
        """Stop the control socket, wait briefly for the claimer, stop the trace service."""
        self.stop_control()
        if self._claimer is not None and self._claimer.thread is not None:
            self._claimer.thread.join(timeout=STOP_JOIN_S)  # a daemon; it drops a service it starts now
        svc, self.requests.trace_service = self.requests.trace_service, None
        if svc is not None:
            svc.stop()

    def _start_control(self, socket_dir: str) -> None:
        """Serve the local control socket so ``gpulens trace`` here can use this agent."""
        from gpulens.ipc.control import ControlListener, describe_holder

        listener = ControlListener(socket_dir, self._serve_control)
        try:
            listener.start()
        except OSError as err:
            held = describe_holder(listener.name) if err.errno == 98 else ""  # EADDRINUSE
            log.warning("local control socket %s not served: %s%s", listener.address, err.strerror or err, held)
            return
        self._control = listener
        log.info("local control socket at %s", listener.address)
