"""Who may get our trace request when another process holds the Kineto name (sources.stream.control_trace).

The real squatter of another uid is tests/unit/sources/test_security_viewer.py; here /proc's answer is faked.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpulens.ipc.errors import StreamError, StreamProblem
from gpulens.sources.stream import control_trace
from gpulens.sources.stream.control_trace import untrusted_holder
from gpulens.sources.stream.local_agent import HolderKind, HolderRefusal


@pytest.mark.parametrize(("me", "uid", "refused"), [
    (1000, None, False),  # gone, or /proc says nothing: nothing to refuse yet
    (1000, 1000, False), (1000, 0, False), (0, 0, False),  # ourselves, or root
    (1000, 1001, True), (0, 1000, True),  # another user (root trusts only root)
])
def test_only_another_users_holder_is_refused(monkeypatch: pytest.MonkeyPatch, me: int, uid: int | None,
                                              refused: bool) -> None:
    monkeypatch.setattr(control_trace, "proc_uid", lambda pid: uid)
    monkeypatch.setattr(os, "geteuid", lambda: me)
    assert untrusted_holder(4242) == (HolderRefusal(HolderKind.OTHER_USER, 4242, uid) if refused and uid is not None
                                      else None)


def test_the_refusal_is_what_connect_owner_raises_and_trace_prints(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(control_trace, "proc_uid", lambda pid: 1001)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(control_trace, "holder_of", lambda socket_dir: (4242, "python3", 1001))
    with pytest.raises(StreamError) as err:
        control_trace.connect_owner("/nonexistent", Path("/nonexistent"))
    assert err.value.problem is StreamProblem.UNTRUSTED_HOLDER
    assert str(err.value) == str(HolderRefusal(HolderKind.OTHER_USER, 4242, 1001)) == str(untrusted_holder(4242))
    # Pinned on purpose: the one sentence of this refusal, as `gpulens trace` prints it.
    assert str(untrusted_holder(4242)) == ("the Kineto name is held by pid 4242 of uid 1001, not by a gpulens agent of "
                                     "yours or root's: refusing to send it your request; it may be squatting")
