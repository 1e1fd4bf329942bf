"""Typed requests to an agent: params struct in, a future of its answer struct out.

Every source that reaches an agent forwards ``request(host, params,
timeout_s)`` (:class:`~gpulens.core.events.Requester`: the routing seam; the
params struct names the frame's kind and makes its params map). A viewer asks
through :func:`ask`, with the kind's params struct (``gpulens.ipc.request_schema``)::

    reply = ask(source, "node1", ProfileParams(pids=(1234,), duration_s=5.0), 65.0).result(timeout=95)
    reply.answer.files        # ProfileAnswer, checked
    reply.files               # the files the source saved, by the agent's name

The params go on the wire as :func:`~gpulens.ipc.request_schema.to_wire`
(the struct's ``wire()``) makes them (the bytes the golden frames pin); the answer is decoded into
the kind's answer struct, and a malformed one fails the future with
:class:`~gpulens.ipc.errors.RequestFailed` as an agent's refusal does.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Generic, TypeVar

from gpulens.ipc.errors import ProtocolError, RequestFailed
from gpulens.ipc.request_schema import Answer, Params

if TYPE_CHECKING:
    from gpulens.core.events import Requester, RequestResult
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
    raw = agent.request(host, params, timeout_s)
    out: Future[Reply[A]] = Future()

    def done(f: Future[RequestResult]) -> None:
        if f.cancelled():
            out.cancel()
            return
        err = f.exception()
        if err is not None:
            out.set_exception(err)
            return
        res = f.result()
        try:
            answer = params.read(res.result)  # the agent's map, checked here
        except ProtocolError as bad:
            out.set_exception(RequestFailed(str(bad)))
            return
        out.set_result(Reply(answer, res.files, res.samples))

    raw.add_done_callback(done)
    return out
