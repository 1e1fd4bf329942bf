"""Refusals as values, rendered to text at the edge: :class:`NoSlot` and :class:`NotHandedOver`.

:class:`NoSlot` says why a connection or a request gets no slot: a local
viewer on the control socket (``gpulens.ipc.control``: not a user this agent
serves, its uid's cap, the cap in all) or a trace/profile request
(``gpulens.agent.requests``: the agent stopping, the connection's, the uid's
or the agent's cap). :class:`NotHandedOver` says why the Kineto endpoint did
not change hands, on either side: the holder releasing it
(``LocalTraceService.release_endpoint``) or the agent claiming it
(``gpulens.agent.kineto_owner.EndpointClaimer``).

Code decides on ``kind`` (and the fields); people, logs and the wire get
``str(reason)``, the same sentence as before these were values.

Usage::

    why = svc.release_endpoint(refusal, DRAIN_S, hand)  # a LocalTraceService's
    if why is not None and why.kind is HandoverKind.WAITING:
        ...  # why.count traces still wait for their target's poll
    raise RequestError(f"endpoint hand-over not now: {why}")  # the edge: the sentence
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import ClassVar

from gpulens.core.reasons import Reason, ReasonText


class NoSlotKind(enum.Enum):
    """Which rule refused; the comment says which fields of :class:`NoSlot` it fills."""

    NOT_SERVED = "not-served"  # control socket: uid (the peer's), me (the agent's)
    LOCAL_FULL = "local-full"  # control socket: limit (local connections in all)
    LOCAL_PER_UID = "local-per-uid"  # control socket: uid, limit (local connections of one uid)
    STOPPING = "stopping"  # requests: the agent is stopping
    IN_FLIGHT = "in-flight"  # requests: limit (trace/profile requests of one connection)
    PER_UID = "per-uid"  # requests: uid, limit (trace/profile requests of one uid)
    AGENT_FULL = "agent-full"  # requests: limit (trace/profile requests on the whole agent)


@dataclass(frozen=True, slots=True)
class NoSlot(Reason):
    """Why a connection or request is refused a slot: ``kind`` and the facts its sentence names; ``str()`` (or
    ``render()``) is the one line a viewer (or the agent's log) reads."""

    kind: NoSlotKind
    limit: int = 0
    uid: int | None = None
    me: int | None = None

    TEXT: ClassVar[ReasonText] = {
        NoSlotKind.NOT_SERVED: "uid {0.uid} is not this agent's user (uid {0.me})",
        NoSlotKind.LOCAL_FULL: "{0.limit} local viewers already connected",
        NoSlotKind.LOCAL_PER_UID: "uid {0.uid} already has {0.limit} local connections",
        NoSlotKind.STOPPING: "agent is stopping",
        NoSlotKind.IN_FLIGHT: "too many requests in flight on this connection (at most {0.limit})",
        NoSlotKind.PER_UID: ("uid {0.uid} already has {0.limit} trace/profile requests running "
                             "(the limit per user); try again when one finishes"),
        NoSlotKind.AGENT_FULL: "agent is running {0.limit} trace/profile requests (its limit); try again when one finishes",
    }


class HandoverKind(enum.Enum):
    """Why the endpoint stayed where it was; the comment says which fields of :class:`NotHandedOver` it fills."""

    # The holder's side (release_endpoint):
    THROUGH_DYNOLOG = "through-dynolog"  # it traces through dynolog's RPC: it holds no Kineto name
    WAITING = "waiting"  # count: accepted traces whose config has not reached Kineto yet
    NOT_SERVING = "not-serving"  # its endpoint serves no socket to pass on
    NOT_TAKEN = "not-taken"  # detail: the receiver's words (it did not serve the passed socket)
    # The claiming agent's side (claim_once):
    STOPPING = "stopping"  # the agent is stopping
    TAKEN = "taken"  # detail: the EndpointBusy's words (a holder that cannot be asked)
    HOLDER_KEPT = "holder-kept"  # detail (the EndpointBusy's words), pid (the holder asked), answer (its reason)
    # Either side:
    FAILED = "failed"  # error (the exception's type name), detail: a call raised


@dataclass(frozen=True, slots=True)
class NotHandedOver(Reason):
    """Why the Kineto endpoint did not change hands: ``kind`` and the facts its sentence names; ``str()`` is the
    one line the agent's log, its ``trace_error`` and a hand-over's answer carry."""

    kind: HandoverKind
    detail: str = ""
    count: int = 0
    pid: int = 0
    answer: str = ""
    error: str = ""

    TEXT: ClassVar[ReasonText] = {
        HandoverKind.THROUGH_DYNOLOG: "this gpulens sends its traces through dynolog's RPC; it does not hold the Kineto name",
        HandoverKind.WAITING: "{0.count} trace(s) accepted here still wait for their target's poll",
        HandoverKind.NOT_SERVING: "this gpulens's Kineto endpoint is not serving",
        HandoverKind.NOT_TAKEN: "{0.detail}",  # the words as they came
        HandoverKind.STOPPING: "the agent is stopping",
        HandoverKind.TAKEN: "{0.detail}",  # the words as they came
        HandoverKind.HOLDER_KEPT: "{0.detail} (asked pid {0.pid} to pass the endpoint on: {0.answer})",
        HandoverKind.FAILED: "{0.error}: {0.detail}",
    }


def failed(err: BaseException) -> NotHandedOver:
    """A call of the hand-over raised ``err``: its type and words (``OSError: ...``)."""
    return NotHandedOver(HandoverKind.FAILED, str(err), error=type(err).__name__)
