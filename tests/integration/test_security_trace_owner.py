"""Issue 27 item 8: an ordinary user's ``gpulens trace`` reaches a root agent that holds the Kineto name.

She cannot read root's ``/proc/PID/fd``, so the holder of the name is
invisible to her; the TUI then used root's control socket, the CLI said
"busy". Both now go through ``connect_owner``, which takes root's control
socket only when the kernel says its holder is uid 0 (``SO_PEERCRED``): a
socket bound under that name by another user is refused.
"""

from __future__ import annotations

import gzip  # noqa: F401  (the user's forked child cannot read the stdlib under root's home: imported here)
import os
import socket
from pathlib import Path

import pytest

from gpulens.agent.agent import Agent
from gpulens.collectors.synthetic import SyntheticSampler
from gpulens.ipc.control import ControlListener, control_name
from gpulens.ipc.errors import StreamError
from gpulens.ipc.request_schema import TraceDiagnoseParams
from gpulens.sources.stream.control_trace import connect_owner
from tests.fakes import security_helpers
from tests.fakes.security_helpers import User, call_as
from tests.fakes.trace_service import FakeTraceService

two_users = security_helpers.two_users  # the fixture, visible to pytest in this module

pytestmark = pytest.mark.timeout(120)


def _connect_as_user(socket_dir: str) -> dict[str, object]:
    """In the user's child: find the owner as ``gpulens trace`` does and ask one thing of it."""
    try:
        link = connect_owner(socket_dir, Path("/tmp"))
    except StreamError as err:
        return {"error": str(err), "problem": getattr(err.problem, "name", None)}
    try:
        answer = link.request("", TraceDiagnoseParams(pids=(os.getpid(),)), 10.0).result(timeout=15)
        return {"agent_pid": link.agent_pid, "caps": sorted(link.hello.caps), "result": answer.result,
                "me": os.getpid()}
    finally:
        link.close()


def _squat_then_connect(socket_dir: str) -> dict[str, object]:
    """In the attacker's child: bind root's control name first, then look as a user would."""
    squat = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    squat.bind(control_name(socket_dir, 0))
    squat.listen(4)
    try:
        return _connect_as_user(socket_dir)
    finally:
        squat.close()


def test_a_user_finds_roots_agent_through_its_control_socket(two_users: tuple[User, User], tmp_path: Path) -> None:
    alice, _ = two_users
    socket_dir = str(tmp_path / "kineto")
    ag = Agent(SyntheticSampler(hostname="own", gpus=0, interval_s=0.1), hostname="own", interval_s=0.1)
    ag.requests.trace_service = FakeTraceService()
    listener = ControlListener(socket_dir, lambda tr, p, pr: ag.serve_connection(tr, p, principal=pr,
                                                                                  kind="control"))
    listener.start()
    try:
        out = call_as(alice, _connect_as_user, socket_dir)
    finally:
        listener.stop()
        ag.stop()
    assert "error" not in out, out
    assert out["agent_pid"] == os.getpid()  # root's listener, found with no /proc access
    assert "trace" in out["caps"]
    assert out["result"] == {"reasons": {str(out["me"]): None}}  # her own pid: nothing against tracing it


def test_a_squatter_on_roots_control_name_is_refused(two_users: tuple[User, User], tmp_path: Path) -> None:
    alice, mallory = two_users
    socket_dir = str(tmp_path / "kineto")
    out = call_as(mallory, _squat_then_connect, socket_dir)  # mallory holds the name, then asks
    assert out.get("problem") == "NO_HOLDER", out
    out = call_as(alice, _connect_as_user, socket_dir)  # nobody: the same refusal, nothing sent
    assert out.get("problem") == "NO_HOLDER", out
