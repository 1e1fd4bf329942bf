"""The asking agent's side of an endpoint hand-over, for tests: adopt the passed socket.

``Adopter(socket_dir)`` is the ``adopt`` argument of
:func:`gpulens.ipc.handover.request_handover`: it serves the bound Kineto
socket the holder passed (``SCM_RIGHTS``) with a real
:class:`~gpulens.ipc.kineto.service.LocalTraceService`, and returns how to stop
serving it without unbinding the name (what the agent does when it cannot
tell the holder). ``close()`` stops every service it started.
"""

from __future__ import annotations

import socket
from collections.abc import Callable

from gpulens.ipc.kineto.service import LocalTraceService


class Adopter:
    """Serves passed Kineto sockets (one LocalTraceService each)."""

    def __init__(self, socket_dir: str | None) -> None:
        self.socket_dir = socket_dir
        self.services: list[LocalTraceService] = []

    def __call__(self, sock: socket.socket) -> Callable[[], None]:
        svc = LocalTraceService(self.socket_dir, use_dynolog=False, tick_s=0.02)
        svc.start(adopt=sock)
        self.services.append(svc)

        def undo() -> None:
            passed = svc.endpoint.detach()
            if passed is not None:
                passed.close()
            svc.stop()
            self.services.remove(svc)

        return undo

    def close(self) -> None:
        """Stop every service started here (a filesystem name is unlinked by the last one)."""
        for svc in self.services:
            svc.stop()
        self.services.clear()
