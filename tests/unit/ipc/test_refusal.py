"""Refusals as values (gpulens.ipc.refusal): the control socket's slots by kind, and one sentence pinned per type.

The request queue's slots are asserted through the runner (tests/unit/agent/test_agent_parts.py),
the hand-over's through the trace service and the claimer (tests/unit/agent/test_kineto_handover.py).
"""

from __future__ import annotations

from gpulens.ipc.control import MAX_CONTROL_CONNECTIONS, MAX_PER_UID, ControlListener
from gpulens.ipc.refusal import HandoverKind, NoSlot, NoSlotKind, NotHandedOver, failed


def _listener(active: dict[int, int]) -> ControlListener:
    listener = ControlListener("/nonexistent", lambda *a: None)  # never started: only its slots are used
    listener._active = dict(active)
    return listener


def test_control_slots_by_kind() -> None:
    # An ordinary user's agent serves its own uid and root; a root agent serves everyone.
    assert _listener({})._reserve(1001, 1000) == NoSlot(NoSlotKind.NOT_SERVED, uid=1001, me=1000)
    assert _listener({})._reserve(0, 1000) is None
    assert _listener({})._reserve(1001, 0) is None
    full = {uid: 1 for uid in range(5000, 5000 + MAX_CONTROL_CONNECTIONS)}
    assert _listener(full)._reserve(7, 0) == NoSlot(NoSlotKind.LOCAL_FULL, MAX_CONTROL_CONNECTIONS)
    assert _listener({7: MAX_PER_UID})._reserve(7, 0) == NoSlot(NoSlotKind.LOCAL_PER_UID, MAX_PER_UID, uid=7)
    taken = _listener({7: MAX_PER_UID - 1})
    assert taken._reserve(7, 0) is None and taken._active == {7: MAX_PER_UID}


def test_one_sentence_pinned_per_type() -> None:
    # On purpose: what a user over their share reads (the other kinds are asserted by kind, not wording).
    assert str(NoSlot(NoSlotKind.PER_UID, 2, uid=1000)) == (
        "uid 1000 already has 2 trace/profile requests running (the limit per user); try again when one finishes")
    # On purpose: the claiming agent's log line names the holder it asked and the holder's answer.
    assert str(NotHandedOver(HandoverKind.HOLDER_KEPT, "taken by pid 9", pid=9, answer="no")) == (
        "taken by pid 9 (asked pid 9 to pass the endpoint on: no)")


def test_a_raised_error_keeps_its_type_and_words() -> None:
    why = failed(PermissionError(13, "Permission denied"))
    assert why == NotHandedOver(HandoverKind.FAILED, "[Errno 13] Permission denied", error="PermissionError")
