"""The endpoint hand-over races a real second uid and never loses the name (issue 27, item 2).

The attack: alice's TUI holds ``\\0dynolog\\0``; root's agent starts and the
TUI hands the endpoint over; mallory loops on ``bind("\\0dynolog\\0")``. When
the hand-over released the name and the agent bound it afterwards, she won
the gap (then every program polling the name sent her its traces). Now the
holder passes its bound socket itself (``SCM_RIGHTS``): the name is bound at
every instant. Here the hand-over runs many rounds, each a real agent
(``Agent.start_trace_service``: the claimer asks the holder over its control
socket) taking over from the last, while a forked child running as a fresh
uid tries to bind the name as fast as it can; it must never succeed. A
control round at the end frees the name on purpose for 0.3 s and checks the
same attacker does bind it then, so the loop was really racing.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import tempfile
import threading
import time
from collections.abc import Iterator

import pytest

from gpulens.agent.agent import Agent, _NoSampler, endpoint_owner
from gpulens.ipc.kineto.endpoint import ABSTRACT_NAME, holder_of
from tests.fakes import security_helpers
from tests.fakes.security_helpers import User, call_as

two_users = security_helpers.two_users  # the fixture, visible to pytest in this module

ROUNDS = 30


def _squat(deadline: float, stop_path: str) -> tuple[int, list[float]]:
    """As the attacker: bind the Kineto name again and again until ``deadline``; (tries, when each bind won)."""
    for fd in range(3, 1024):  # a real attacker holds none of root's sockets: drop what the fork copied
        try:
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                os.close(fd)
        except OSError:
            continue
    tries = 0
    wins: list[float] = []
    while time.time() < deadline and not os.path.exists(stop_path):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            s.bind(ABSTRACT_NAME)
            wins.append(time.time())
            time.sleep(0.05)  # holding it, as a squatter would
        except OSError:
            pass
        finally:
            s.close()
        tries += 1
    return tries, wins


@pytest.fixture
def abstract_name_free(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("KINETO_IPC_SOCKET_DIR", raising=False)
    if holder_of(None) is not None or _bound_now():
        pytest.skip("the abstract Kineto name \\0dynolog\\0 is held by another process on this machine")
    yield


def _bound_now() -> bool:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        s.bind(ABSTRACT_NAME)
        return False
    except OSError:
        return True
    finally:
        s.close()


def _wait_installed(agent: Agent, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while agent.requests.trace_service is None:
        assert time.monotonic() < deadline, f"no hand-over: {agent.requests.trace_error}"
        time.sleep(0.01)


def test_a_second_uid_looping_on_bind_never_wins_the_hand_over(
    two_users: tuple[User, User], abstract_name_free: None
) -> None:
    _alice, mallory = two_users
    flags = tempfile.mkdtemp(prefix="gl-race-", dir="/tmp")
    os.chmod(flags, 0o755)  # the attacker must see the stop flag
    stop_path = os.path.join(flags, "stop")
    result: dict[str, tuple[int, list[float]]] = {}
    deadline = time.time() + 120

    def attacker() -> None:
        result["race"] = call_as(mallory, _squat, deadline, stop_path, timeout=180)

    holder = endpoint_owner("h", None)  # alice's TUI holds the name
    holder.allow_handover(lambda _event: None)
    agents = [holder]
    t = threading.Thread(target=attacker, daemon=True)
    t.start()
    time.sleep(0.5)  # the attacker's loop is running
    try:
        for _round in range(ROUNDS):
            nxt = Agent(_NoSampler(), hostname="h")
            nxt.allow_handover(lambda _event: None)  # the next round asks it in turn
            nxt.start_trace_service(None)
            agents.append(nxt)
            _wait_installed(nxt)
            held = holder_of(None)
            assert held is not None and held[0] == os.getpid()
            agents.pop(0).stop()  # the previous holder exits: the name stays with the new one
            assert _bound_now(), "the name came free when the previous holder exited"
        # Control: free the name on purpose; the same attacker takes it within 0.3 s.
        last = agents.pop()
        freed = time.time()
        last.stop()
        time.sleep(0.3)
    finally:
        for a in agents:
            a.stop()
        open(stop_path, "w").close()
        t.join(timeout=30)
        shutil.rmtree(flags, ignore_errors=True)
    tries, wins = result["race"]
    assert tries > 1000, f"the attacker's loop barely ran ({tries} binds tried)"
    during = [w for w in wins if w < freed]
    assert during == [], f"the attacker bound the name {len(during)} times during the {ROUNDS} hand-overs"
    assert wins, "the control round freed the name and the attacker did not take it: the race did not run"
