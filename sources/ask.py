"""Typed requests to an agent: params struct in, a future of its answer struct out.

Every source that reaches an agent forwards ``request(host, kind, params,
timeout_s)`` (:class:`~gpulens.core.events.Requester`: the routing seam,
one frame's kind and params map). A viewer asks through :func:`ask`
instead, with the kind's params struct (``gpulens.ipc.request_schema``)::

    reply = ask(source, "node1", ProfileParams(pids=(1234,), duration_s=5.0), 65.0).result(timeout=95)
    reply.answer.files        # ProfileAnswer, checked
    reply.files               # the files the source saved, by the agent's name

The params go on the wire as :func:`~gpulens.ipc.request_schema.to_wire`
makes them (the bytes the golden frames pin); the answer is decoded into
the kind's answer struct, and a malformed one fails the future with
:class:`~gpulens.ipc.errors.RequestFailed` as an agent's refusal does.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from gpulens.ipc.errors import ProtocolError, RequestFailed
from gpulens.ipc.request_schema import Answer, Params, to_wire

if TYPE_CHECKING:
    from gpulens.core.events import Requester
    from gpulens.core.model import HostSample

__all__ = ["Reply", "ask"]

A = TypeVar("A", bound=Answer)


@dataclass(frozen=True, slots=True)
class Reply(Generic[A]):
    """An agent's answer to one request, with what came before it."""

    answer: A
    files: Mapping[str, Path] = field(default_factory=dict)
    """The agent's name of each file it sent -> where the source saved it."""
    samples: tuple[HostSample, ...] = ()
    """A ``history`` request's samples."""


def ask(agent: Requester, host: str, params: Params[A], timeout_s: float) -> Future[Reply[A]]:
    """Send ``params`` to ``host``'s agent through ``agent``; the future holds the decoded :class:`Reply`.

    It fails as the request does (``RequestFailed``: refused, not connected;
    ``TimeoutError`` after ``timeout_s``), and with ``RequestFailed`` when the
    answer is not the kind's.
    """
    raw = agent.request(host, params.kind, to_wire(params), timeout_s)
    out: Future[Reply[A]] = Future()

    def done(f: Future[Any]) -> None:  # the Requester protocol's future: checked here
        if f.cancelled():
            out.cancel()
            return
        err = f.exception()
        if err is not None:
            out.set_exception(err)
            return
        res = f.result()  # a RequestResult (sources.stream.requests), or what quacks like one
        files, samples = getattr(res, "files", None), getattr(res, "samples", None)
        try:
            answer = params.read(getattr(res, "result", None))
        except ProtocolError as bad:
            out.set_exception(RequestFailed(str(bad)))
            return
        out.set_result(Reply(answer, files if isinstance(files, Mapping) else {},
                             tuple(samples) if isinstance(samples, tuple) else ()))

    raw.add_done_callback(done)
    return out
