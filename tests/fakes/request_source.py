"""The one test double of the request seam, ``core.events.Requester``: an agent that answers from a script.

Each request kind is answered from :attr:`FakeAgent.answers`:

- an answer struct of ``ipc.request_schema`` (``ProfileAnswer(files=("p.folded",))``): the result is
  what a ``StreamSource`` gives, a ``RequestResult`` of the struct as an agent sends it
  (``answer_to_wire``), so ``sources.ask.ask`` and the raw readers see the real wire shape;
- an :class:`Answered`: the struct and the files the source saved (name -> path);
- an exception: the future fails with it (``RequestFailed`` for a refusal, ``TimeoutError``);
- a future: returned as it is (an answer that comes later, or never);
- a function of the host and the params struct giving one of those (files written per request, a clock).

A kind with no script fails as an agent refuses it: ``RequestFailed("unsupported request kind 'x'")``.
Every request is kept in :attr:`FakeAgent.asked` as ``(host, kind, params)``, params as the wire map sent
(``params.wire()``). :class:`RawParams` is a request no schema struct makes (an unknown kind, a refused
value): what a broken or hostile viewer sends, for the tests of the agent's refusals.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpulens.core.events import Requester, RequestParams, RequestResult
from gpulens.ipc.errors import RequestFailed
from gpulens.ipc.request_schema import Answer, answer_to_wire

__all__ = ["Answered", "FakeAgent", "RawParams", "Script"]


@dataclass(frozen=True)
class RawParams:
    """A request of any ``kind`` and params map, sent as it is (a ``core.events.RequestParams``)."""

    kind: str
    params: Mapping[str, object] = field(default_factory=dict)

    def wire(self) -> dict[str, object]:
        """The params map as given."""
        return dict(self.params)


@dataclass(frozen=True)
class Answered:
    """An answer and the files the source saved for it (the agent's name -> where it is)."""

    answer: Answer
    files: Mapping[str, Path] = field(default_factory=dict)


Reply = Answer | Answered | BaseException | Future[RequestResult]
"""What one request is answered with."""
Script = Reply | Callable[[str, RequestParams], Reply]
"""How a kind is answered: always the same, or computed from ``(host, params struct)``."""


class FakeAgent:
    """A scripted agent behind the :class:`~gpulens.core.events.Requester` protocol (see the module docstring)."""

    def __init__(self, answers: Mapping[str, Script] | None = None) -> None:
        self.answers: dict[str, Script] = dict(answers or {})
        """Request kind -> how it is answered; change it while a test runs to change the agent."""
        self.asked: list[tuple[str, str, dict[str, Any]]] = []
        """Every request, oldest first: (host, kind, the wire map sent; Any: a test reads it as it expects)."""

    @property
    def kinds(self) -> list[str]:
        """The kinds asked, oldest first."""
        return [kind for _, kind, _ in self.asked]

    def request(self, host: str, params: RequestParams, timeout_s: float) -> Future[RequestResult]:
        """Answer ``params.kind`` from its script; the future is done at once unless the script gave its own."""
        kind = params.kind
        self.asked.append((host, kind, params.wire()))
        script = self.answers.get(kind)
        reply = script(host, params) if callable(script) else script
        if isinstance(reply, Future):
            return reply
        fut: Future[RequestResult] = Future()
        if reply is None:
            fut.set_exception(RequestFailed(f"unsupported request kind {kind!r}"))
        elif isinstance(reply, BaseException):
            fut.set_exception(reply)
        elif isinstance(reply, Answered):
            fut.set_result(RequestResult(answer_to_wire(reply.answer), dict(reply.files)))
        else:
            fut.set_result(RequestResult(answer_to_wire(reply)))
        return fut


def _is_a_requester(agent: FakeAgent) -> Requester:
    """Where mypy checks that the fake is a ``Requester`` (scripts/typecheck.sh checks tests/)."""
    return agent
