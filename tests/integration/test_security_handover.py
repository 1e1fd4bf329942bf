"""Endpoint hand-over attacks by another user of the node (issue 11, section 2; docs/security.md).

The owner of this host's Kineto endpoint (a TUI's in-process owner) hands
it over only to a control-socket peer whose kernel credentials show root or
the owner's own uid. Run as root (CI): two throwaway users, A (holds an
endpoint) and B (the attacker); B's requests are made from a forked child
that really runs with B's uid, so ``SO_PEERCRED`` says B.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpulens.agent.agent import endpoint_owner
from gpulens.ipc.handover import request_handover
from gpulens.ipc.kineto.endpoint import holder_of
from gpulens.ipc.kineto.service import LocalTraceService
from tests.fakes.handover_helpers import Adopter
from tests.fakes.security_helpers import User, call_as, demote, two_users

__all__ = ["two_users"]


@pytest.fixture
def sock() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="gs", dir="/tmp"))
    (d / "s").mkdir()
    yield d / "s"
    shutil.rmtree(d, ignore_errors=True)


def _holder(sock: Path) -> int | None:
    held = holder_of(str(sock))
    return None if held is None else held[0]


def test_another_user_cannot_make_roots_owner_hand_over(two_users: tuple[User, User], sock: Path) -> None:
    _victim, attacker = two_users
    os.chmod(sock.parent, 0o755)
    own = endpoint_owner("h", str(sock))  # root's TUI owner: its control socket takes every uid
    events: list[str] = []
    own.allow_handover(events.append)
    try:
        answer = call_as(attacker, request_handover, str(sock), os.getpid(), 0, 20.0, Adopter(str(sock)))
        assert not answer.released and answer.supported
        assert f"endpoint hand-over refused: uid {attacker.uid} (control socket) is neither root" in answer.reason
        assert events == [] and _holder(sock) == os.getpid()  # nothing drained, nothing released
        svc = own.requests.trace_service
        assert isinstance(svc, LocalTraceService) and svc.endpoint.running
        # The owner's own user (root here) may: the decision is the kernel's uid, nothing else.
        adopter = Adopter(str(sock))
        try:
            assert request_handover(str(sock), os.getpid(), 0, 20.0, adopter).released
            assert events == ["draining", "released"] and adopter.services[0].endpoint.running
        finally:
            adopter.close()
    finally:
        own.stop()


def _owner_as(user: User, sock: Path) -> tuple[int, int]:
    """A TUI owner running as ``user`` in a forked child; (pid, fd to write to stop it)."""
    ready_r, ready_w = os.pipe()
    stop_r, stop_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never returns into pytest
        try:
            os.close(ready_r)
            os.close(stop_w)
            demote(user)
            own = endpoint_owner("h", str(sock))
            own.allow_handover(lambda _event: None)
            os.write(ready_w, b"1")
            os.read(stop_r, 1)
            own.stop()
        finally:
            os._exit(0)
    os.close(ready_w)
    os.close(stop_r)
    try:
        assert os.read(ready_r, 1) == b"1", "the owner child did not start"
    finally:
        os.close(ready_r)
    return pid, stop_w


def test_another_user_cannot_take_a_users_endpoint_but_root_can(two_users: tuple[User, User], sock: Path) -> None:
    victim, attacker = two_users
    os.chmod(sock.parent, 0o755)
    os.chmod(sock, 0o1777)  # a shared, sticky socket directory of root's (1733 is not listable by users)
    pid, stop_w = _owner_as(victim, sock)
    try:
        assert _holder(sock) == pid
        answer = call_as(attacker, request_handover, str(sock), pid, victim.uid, 20.0, Adopter(str(sock)))
        assert not answer.released and "closed the connection before its hello" in answer.reason
        assert _holder(sock) == pid
        # Root (the node's agent) may: the victim's very socket is served by root now.
        adopter = Adopter(str(sock))
        ok = request_handover(str(sock), pid, victim.uid, 20.0, adopter)
        assert ok.released, ok.reason
        assert _holder(sock) == os.getpid() and adopter.services[0].endpoint.running
        adopter.close()
    finally:
        os.write(stop_w, b"x")
        os.close(stop_w)
        os.waitpid(pid, 0)


def test_a_pass_root_cannot_serve_leaves_the_user_holding_it(two_users: tuple[User, User], sock: Path) -> None:
    victim, _attacker = two_users
    os.chmod(sock.parent, 0o755)
    os.chown(sock, victim.uid, victim.gid)  # the victim's own socket directory: root will not serve there
    pid, stop_w = _owner_as(victim, sock)
    try:
        adopter = Adopter(str(sock))
        answer = request_handover(str(sock), pid, victim.uid, 20.0, adopter)
        assert not answer.released and "belongs to uid" in answer.reason, answer.reason
        assert adopter.services == [] and _holder(sock) == pid  # the victim serves it still: no gap
    finally:
        os.write(stop_w, b"x")
        os.close(stop_w)
        os.waitpid(pid, 0)
