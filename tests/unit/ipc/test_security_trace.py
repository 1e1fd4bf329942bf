"""Issue 14, workstream B: what a root agent creates, reads and binds for other users, and the
Kineto endpoint's bounds.

Each attack is made the way a local user would make it: as a throwaway
unprivileged account (``two_users``: victim, attacker) in a private
directory both can reach (``shared``: root-owned 0755, holding a sticky
1777 ``t`` like /tmp). Nothing touches the real /tmp/gpulens-0.
"""

from __future__ import annotations

import contextlib
import gzip
import logging
import os
import secrets
import select
import shutil
import socket
import stat
import struct
import tempfile
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpulens.analysis.trace.errors import TraceFileError, TraceProblem
from gpulens.core.safefs import PathProblem, UnsafePath
from gpulens.ipc.errors import EndpointBusy, TraceError
from gpulens.ipc.kineto import codec, outputs
from gpulens.ipc.kineto.diagnose import diagnose_pid
from gpulens.ipc.kineto.dynolog_rpc import DynologClient, listener_uid
from gpulens.ipc.kineto.endpoint import KinetoEndpoint
from gpulens.ipc.kineto.outputs import OutputPlanner, open_trace_file, probe_trace_file
from gpulens.ipc.kineto.registry import (
    CTXT_GROUPS_PER_UID,
    CTXT_MEMBERS_PER_GROUP,
    MAX_ANCESTORS,
    Registry,
)
from gpulens.ipc.kineto.requests import TraceRequest
from gpulens.ipc.kineto.service import LocalTraceService
from gpulens.ipc.kineto.untraceable import Untraceable, UntraceableKind
from gpulens.sources import tracing as trace_remote
from tests.fakes import security_helpers
from tests.fakes.kineto_client import decode_config_reply, encode_request
from tests.fakes.security_helpers import User, call_as, demote, popen_as

two_users = security_helpers.two_users  # the fixture, visible to pytest in this module

pytestmark = pytest.mark.timeout(60)
HEX32 = set("0123456789abcdef")


@pytest.fixture
def shared() -> Iterator[Path]:
    """A private /tmp/glsecXXXX (root 0755) with a sticky world-writable ``t`` inside, like /tmp."""
    base = Path(tempfile.mkdtemp(prefix="glsec", dir="/tmp"))
    os.chmod(base, 0o755)
    (base / "t").mkdir()
    os.chmod(base / "t", 0o1777)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def trace_root(shared: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Traces (and Kineto's default path) go under ``shared/t`` instead of /tmp for this test."""
    root = shared / "t"
    monkeypatch.setattr(outputs, "TRACE_ROOT", root)
    monkeypatch.setattr(outputs, "KINETO_DEFAULT_DIR", root)
    monkeypatch.setattr(outputs, "_fallback_base", None)
    return root


def _mode(p: Path) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


DONE = '{"traceEvents": [], "traceName": "t" }'
"""A finished trace as far as the watcher can tell (libkineto closes every trace with traceName)."""


def _victim_file(path: str, text: str) -> None:
    Path(path).write_text(text)


def _victim_link(target: str, path: str) -> None:
    os.symlink(target, path)


def _victim_fifo(path: str) -> None:
    os.mkfifo(path)


def _attacker_mkdir(path: str, mode: int = 0o755) -> None:
    os.mkdir(path)
    os.chmod(path, mode)


# -- hole 1: directories root creates and chowns ---------------------------------------------


def test_output_dirs_are_fresh_ours_and_handed_over_whatever_the_umask(
    two_users: tuple[User, User], trace_root: Path
) -> None:
    victim, _ = two_users
    old = os.umask(0o077)  # a umask must not decide what the target can reach
    try:
        with OutputPlanner() as planner:
            a = planner.place(4242, victim.uid, None)
            b = planner.place(4343, victim.uid, None)
        with OutputPlanner() as planner:
            c = planner.place(4242, victim.uid, None)
    finally:
        os.umask(old)
    base = trace_root / "gpulens-0"
    assert a.directory.parent == b.directory.parent != c.directory.parent  # one fresh dir per request
    for out in (a, b, c):
        run = out.directory.parent
        assert run.parent == base and len(run.name) == 32 and set(run.name) <= HEX32, run
        assert out.directory.name in ("4242", "4343") and out.log == out.directory / "trace.json"
        st = os.lstat(out.directory)
        assert (st.st_uid, _mode(out.directory)) == (victim.uid, 0o700)
        assert os.lstat(run).st_uid == 0 and _mode(run) == 0o711
        assert out.owner_uid == victim.uid
    assert os.lstat(base).st_uid == 0 and _mode(base) == 0o711


def test_squatted_base_is_neither_followed_nor_chowned(two_users: tuple[User, User], trace_root: Path) -> None:
    """The issue's attack: the user makes /tmp/gpulens-0 first (here a link to a root 0700 dir)."""
    victim, attacker = two_users
    secret = trace_root.parent / "root-only"
    secret.mkdir(mode=0o700)
    call_as(attacker, os.symlink, str(secret), str(trace_root / "gpulens-0"))
    with OutputPlanner() as planner:
        out = planner.place(4242, victim.uid, None)
    assert (os.lstat(secret).st_uid, _mode(secret)) == (0, 0o700) and not any(secret.iterdir())
    run = out.directory.parent
    assert run.parent.name.startswith("gpulens-0-") and os.lstat(run.parent).st_uid == 0
    assert os.path.islink(trace_root / "gpulens-0")  # left alone, never used
    # A real directory of the attacker's at the name: refused the same way.
    os.unlink(trace_root / "gpulens-0")
    call_as(attacker, _attacker_mkdir, str(trace_root / "gpulens-0"), 0o777)
    outputs._fallback_base = None
    with OutputPlanner() as planner:
        out = planner.place(4242, victim.uid, None)
    assert not any((trace_root / "gpulens-0").iterdir())
    assert out.directory.parent.parent.name.startswith("gpulens-0-")


def test_target_trace_dir_rules(two_users: tuple[User, User], shared: Path, trace_root: Path) -> None:
    victim, attacker = two_users
    mine = shared / "t" / "v"
    call_as(victim, _attacker_mkdir, str(mine), 0o755)
    secret = shared / "root-only"
    secret.mkdir(mode=0o700)
    # The attack: links planted where the old code's mkdir + chown went.
    call_as(victim, os.symlink, str(secret), str(mine / "gpulens-0"))
    # The target's own directory: root creates nothing there, a random file name is handed over.
    out = OutputPlanner().place(4242, victim.uid, {"KINETO_ONDEMAND_TRACE_DIR": str(mine)})
    assert out.directory == mine and out.log.parent == mine and out.log.name.startswith("gpulens-")
    assert len(out.log.stem) == len("gpulens-") + 32 and [p.name for p in mine.iterdir()] == ["gpulens-0"]
    assert out.note is None
    assert (os.lstat(secret).st_uid, _mode(secret)) == (0, 0o700) and not any(secret.iterdir())
    # Not used, nothing made there: the agent's own default place, and the note says why (a link,
    # root's or another user's directory, one others can write, a relative path).
    call_as(victim, os.symlink, str(secret), str(shared / "t" / "link"))
    theirs = shared / "t" / "a"
    call_as(attacker, _attacker_mkdir, str(theirs), 0o755)
    loose = shared / "t" / "loose"
    call_as(victim, _attacker_mkdir, str(loose), 0o777)
    cases = {
        str(shared / "t"): f"KINETO_ONDEMAND_TRACE_DIR {shared / 't'} belongs to uid 0, not to uid {victim.uid}",
        str(shared / "t" / "link"): "symbolic link",
        str(shared / "t" / "link" / "x"): "symbolic link",
        str(theirs): f"belongs to uid {attacker.uid}, not to uid {victim.uid}",
        str(loose): "writable by other users",
        "relative/dir": "not an absolute path",
    }
    before = {p.name for p in (shared / "t").iterdir()}
    for chosen, why in cases.items():
        out = OutputPlanner().place(4242, victim.uid, {"KINETO_ONDEMAND_TRACE_DIR": chosen})
        assert out.directory.parent.parent == trace_root / "gpulens-0" and out.owner_uid == victim.uid
        assert out.note is not None and why in out.note and f"tracing into {out.directory}/ instead" in out.note
        # under the directory it named (shared/t) a newer Kineto takes the file; elsewhere it says where it goes
        assert ("libkineto_activities_4242.json" in out.note) == (chosen != str(shared / "t")), out.note
    assert {p.name for p in (shared / "t").iterdir()} == before | {"gpulens-0"}
    assert (os.lstat(secret).st_uid, _mode(secret)) == (0, 0o700) and not any(secret.iterdir())
    assert not any(theirs.iterdir()) and not any(loose.iterdir())


# -- hole 2: files root reads back -------------------------------------------------------------


def test_probe_refuses_links_fifos_and_other_users_files(two_users: tuple[User, User], trace_root: Path) -> None:
    victim, attacker = two_users
    since = time.time()
    with OutputPlanner() as planner:
        out = planner.place(4242, victim.uid, None)
    final = str(outputs.final_paths(out.log, 4242)[0])
    assert probe_trace_file(out, 4242, since) == outputs.FileProbe()  # nothing yet
    call_as(victim, _victim_link, "/etc/shadow", final)
    got = probe_trace_file(out, 4242, since)
    assert got.path is None and got.refused is not None and f"{final} is a symbolic link" in got.refused
    os.unlink(final)
    call_as(victim, _victim_fifo, final)
    got = probe_trace_file(out, 4242, since)  # O_NONBLOCK: refused, never blocks on the FIFO
    assert got.refused is not None and "not a regular file" in got.refused
    os.unlink(final)
    Path(final).write_text("{}")
    os.chown(final, attacker.uid, -1)  # what a hard link to someone else's file looks like
    got = probe_trace_file(out, 4242, since)
    assert got.refused is not None and f"belongs to uid {attacker.uid}" in got.refused
    os.unlink(final)
    call_as(victim, _victim_file, final, DONE)
    assert probe_trace_file(out, 4242, since).path == final
    with pytest.raises(UnsafePath) as err:
        os.close(open_trace_file(final, attacker.uid))
    assert (err.value.problem, err.value.component) == (PathProblem.WRONG_OWNER, final)
    os.close(open_trace_file(final, victim.uid))


def test_default_path_takes_only_the_targets_own_fresh_file(two_users: tuple[User, User], trace_root: Path) -> None:
    victim, attacker = two_users
    since = time.time()
    with OutputPlanner() as planner:
        out = planner.place(4242, victim.uid, None)
    default = str(trace_root / "libkineto_activities_4242.json")
    # Another user's link at the predictable default name: noted, not followed, not fatal.
    call_as(attacker, _victim_link, "/etc/shadow", default)
    got = probe_trace_file(out, 4242, since)
    assert got.path is None and got.refused is None and got.note and f"belongs to uid {attacker.uid}" in got.note
    os.unlink(default)
    call_as(victim, _victim_link, "/etc/shadow", default)  # the target's own trick: refused
    got = probe_trace_file(out, 4242, since)
    assert got.refused is not None and "symbolic link" in got.refused
    os.unlink(default)
    call_as(victim, _victim_file, default, DONE)
    assert probe_trace_file(out, 4242, since).path == default
    os.utime(default, (since - 60, since - 60))  # left over from an earlier run: not this trace
    assert probe_trace_file(out, 4242, since).path is None


@pytest.fixture
def service(shared: Path, trace_root: Path) -> Iterator[LocalTraceService]:
    svc = LocalTraceService(socket_dir=str(shared / "sock"), use_dynolog=False, tick_s=0.05)
    svc.start()
    yield svc
    svc.stop()


def _hand_over(svc: LocalTraceService, pid: int) -> str:
    """Play the target's poll; returns the final trace path from the config it got."""
    for _ in range(100):
        reply = svc.endpoint.handle_datagram(encode_request(codec.ConfigRequest(3, 0, (pid, 1))))
        assert reply is not None
        text = decode_config_reply(reply)
        if text:
            log = Path(text.splitlines()[0].removeprefix("ACTIVITIES_LOG_FILE="))
            return str(outputs.final_paths(log, pid)[0])
        time.sleep(0.05)
    raise AssertionError("no config handed over")


@pytest.mark.parametrize("plant", ["link", "fifo", "file"])
def test_trace_of_a_planted_file_fails_with_the_reason(
    two_users: tuple[User, User], service: LocalTraceService, plant: str
) -> None:
    victim, _ = two_users
    target = popen_as(victim, ["sleep", "60"], env={"PATH": "/usr/bin:/bin"})
    try:
        service.endpoint.registry.record_poll((target.pid, 1), 0, victim.uid)
        fut = service.request_trace(TraceRequest(pids=(target.pid,), duration_ms=100, timeout_s=20))
        final = _hand_over(service, target.pid)
        if plant == "link":
            call_as(victim, _victim_link, "/etc/shadow", final)
            with pytest.raises(TraceError, match=r"trace file refused: .* is a symbolic link"):
                fut.result(timeout=15)
        elif plant == "fifo":
            call_as(victim, _victim_fifo, final)
            with pytest.raises(TraceError, match="not a regular file"):
                fut.result(timeout=15)
        else:
            call_as(victim, _victim_file, final, DONE)
            result = fut.result(timeout=15)
            assert result.files == {target.pid: final} and result.owners == {target.pid: victim.uid}
    finally:
        target.kill()
        target.wait()


def test_a_root_owned_trace_dir_she_names_gets_nothing_and_the_fallback_is_named(
    two_users: tuple[User, User], service: LocalTraceService, shared: Path, trace_root: Path
) -> None:
    """Issue 27 item 7: root made a directory of hers, per request, in any root directory she named."""
    _, mallory = two_users
    rootdir = shared / "root-0755"
    rootdir.mkdir()
    os.chmod(rootdir, 0o755)
    env = {"PATH": "/usr/bin:/bin", "KINETO_ONDEMAND_TRACE_DIR": str(rootdir)}
    target = popen_as(mallory, ["sleep", "60"], env=env)
    try:
        service.endpoint.registry.record_poll((target.pid, 1), 0, mallory.uid)
        for n in range(3):
            fut = service.request_trace(TraceRequest(pids=(target.pid,), duration_ms=100, timeout_s=20))
            final = _hand_over(service, target.pid)
            assert Path(final).parent.parent.parent == trace_root / "gpulens-0"
            if n < 2:
                call_as(mallory, _victim_file, final, DONE)  # an older Kineto: the asked path
            else:  # a newer one refuses a path outside her directory and writes its default path
                final = str(trace_root / f"libkineto_activities_{target.pid}.json")
                call_as(mallory, _victim_file, final, DONE)
            result = fut.result(timeout=15)
            assert result.files == {target.pid: final} and result.owners == {target.pid: mallory.uid}
            note = result.notes[target.pid]
            assert f"KINETO_ONDEMAND_TRACE_DIR {rootdir} belongs to uid 0, not to uid {mallory.uid}" in note
            assert f"tracing into {trace_root / 'gpulens-0'}/" in note and "libkineto_activities_" in note
            assert list(rootdir.iterdir()) == []
    finally:
        target.kill()
        target.wait()
    assert (os.lstat(rootdir).st_uid, _mode(rootdir)) == (0, 0o755)


# -- hole 3: the socket directory ----------------------------------------------------------------


def test_socket_dir_of_another_user_is_refused(two_users: tuple[User, User], shared: Path) -> None:
    _, attacker = two_users
    sock_dir = shared / "t" / "s"
    call_as(attacker, _attacker_mkdir, str(sock_dir), 0o755)
    victim_file = shared / "root-file"
    victim_file.write_text("root's")
    os.chmod(victim_file, 0o600)
    call_as(attacker, os.symlink, str(victim_file), str(sock_dir / "dynolog"))
    with pytest.raises(UnsafePath) as err:
        KinetoEndpoint(str(sock_dir)).start()
    assert (err.value.problem, err.value.component) == (PathProblem.WRONG_OWNER, str(sock_dir))
    assert _mode(victim_file) == 0o600 and os.path.islink(sock_dir / "dynolog")
    # A link of the attacker's on the way to a root directory: refused as well.
    real = shared / "real"
    real.mkdir(mode=0o700)
    call_as(attacker, os.symlink, str(real), str(shared / "t" / "via"))
    # The one sentence pinned on purpose: it tells the admin whose link was refused.
    with pytest.raises(UnsafePath, match=f"symbolic link of uid {attacker.uid}") as err:
        KinetoEndpoint(str(shared / "t" / "via")).start()
    assert (err.value.problem, err.value.component) == (PathProblem.SYMLINK, str(shared / "t" / "via"))
    assert not any(real.iterdir())
    # Root's own link on the way (like /var/run -> /run) is fine.
    os.symlink(str(real), shared / "rootlink")
    ep = KinetoEndpoint(str(shared / "rootlink"))
    ep.start()
    try:
        assert stat.S_ISSOCK(os.lstat(real / "dynolog").st_mode) and _mode(real / "dynolog") == 0o666
    finally:
        ep.stop()
    assert not (real / "dynolog").exists()


def test_what_others_leave_at_the_socket_name_is_neither_followed_nor_removed(
    two_users: tuple[User, User], shared: Path
) -> None:
    _, attacker = two_users
    sticky = shared / "t"  # root's and sticky: an accepted socket dir, like /tmp
    victim_file = shared / "root-file"
    victim_file.write_text("root's")
    os.chmod(victim_file, 0o600)
    call_as(attacker, os.symlink, str(victim_file), str(sticky / "dynolog"))
    with pytest.raises(UnsafePath) as err:
        KinetoEndpoint(str(sticky)).start()
    assert (err.value.problem, err.value.component) == (PathProblem.SYMLINK, str(sticky / "dynolog"))
    assert _mode(victim_file) == 0o600 and os.path.islink(sticky / "dynolog")
    os.unlink(sticky / "dynolog")
    call_as(attacker, _bind_and_close, str(sticky / "dynolog"))  # a dead socket of theirs
    with pytest.raises(UnsafePath) as err:
        KinetoEndpoint(str(sticky)).start()
    assert (err.value.problem, err.value.component) == (PathProblem.WRONG_OWNER, str(sticky / "dynolog"))
    assert stat.S_ISSOCK(os.lstat(sticky / "dynolog").st_mode)


def _bind_and_close(path: str) -> None:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(path)
    s.close()


def test_missing_socket_dir_gets_its_modes_whatever_the_umask(shared: Path) -> None:
    target = shared / "new" / "deeper" / "s"
    old = os.umask(0o077)
    try:
        ep = KinetoEndpoint(str(target))
        ep.start()
    finally:
        os.umask(old)
    try:
        want = 0o1733 if os.geteuid() == 0 else 0o700  # root serves every user's programs
        assert _mode(target) == want and _mode(target.parent) == 0o755 and _mode(shared / "new") == 0o755
        assert _mode(target / "dynolog") == 0o666
    finally:
        ep.stop()


@contextlib.contextmanager
def _held_as(user: User, fn: Callable[[], tuple[Any, str]]) -> Iterator[tuple[int, str]]:
    """Run ``fn()`` as ``user`` in a forked child that keeps what it returned until killed.

    ``fn`` returns (something to keep alive, a short text for the parent); yields (pid, text).
    """
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(rfd)
            demote(user)
            keep, text = fn()
            os.write(wfd, b"ok " + text.encode())
            while keep is not None:
                time.sleep(60)
        finally:
            os._exit(0)
    os.close(wfd)
    try:
        ready, _, _ = select.select([rfd], [], [], 20)
        answer = os.read(rfd, 200).decode() if ready else ""
        assert answer.startswith("ok "), "the child did not get ready"
        yield pid, answer[3:]
    finally:
        os.close(rfd)
        os.kill(pid, 9)
        os.waitpid(pid, 0)


def test_busy_names_the_holders_uid_and_flags_a_squatter(two_users: tuple[User, User], shared: Path) -> None:
    _, attacker = two_users
    sticky = shared / "t"

    def squat() -> tuple[socket.socket, str]:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.bind(str(sticky / "dynolog"))
        return s, ""

    with _held_as(attacker, squat) as (pid, _), pytest.raises(EndpointBusy) as err:
        KinetoEndpoint(str(sticky)).start()
    text = str(err.value)
    assert f"pid {pid}, uid {attacker.uid}" in text and "squatter" in text, text


def test_dynolog_port_of_another_user_gets_no_trace_configs(two_users: tuple[User, User], shared: Path) -> None:
    """The name is held (here by root's own endpoint) and "dynolog" answers on a port: the
    service uses that RPC only when root or we listen there, not another user."""
    _, attacker = two_users

    def listen() -> tuple[socket.socket, str]:
        s = socket.create_server(("127.0.0.1", 0))
        return s, str(s.getsockname()[1])

    holder = KinetoEndpoint(str(shared / "s"))
    holder.start()
    try:
        with _held_as(attacker, listen) as (_, port):
            assert listener_uid(int(port)) == attacker.uid
            svc = LocalTraceService(socket_dir=str(shared / "s"), dynolog=DynologClient(port=int(port)))
            with pytest.raises(EndpointBusy):
                svc.start()
            assert svc.dynolog is None
    finally:
        holder.stop()


def test_diagnose_says_when_the_socket_dir_is_closed_to_the_target(tmp_path: Path) -> None:
    """A root agent serving a 0755 dir: other users' programs cannot poll; say so, not "not yet"."""
    sock_dir = tmp_path / "s"
    sock_dir.mkdir(mode=0o755)
    os.chmod(sock_dir, 0o755)
    fake = tmp_path / "proc" / "4242"
    fake.mkdir(parents=True)
    (fake / "status").write_text("Name:\tpython\nUid:\t54321\t54321\t54321\t54321\n")
    (fake / "environ").write_bytes(f"KINETO_USE_DAEMON=1\0KINETO_IPC_SOCKET_DIR={sock_dir}\0".encode())
    (fake / "maps").write_text("7f00 r-xp 0 0:0 0 /x/libtorch_cpu.so\n")
    kw: dict[str, Any] = {"polling": False, "serving_dir": str(sock_dir), "requester_uid": 0}
    why = diagnose_pid(4242, proc=tmp_path / "proc", **kw)
    assert why == Untraceable(UntraceableKind.SOCKET_DIR_CLOSED, 4242, uid=54321, serving=str(sock_dir), mode=0o755)
    os.chmod(sock_dir, 0o1733)
    why = diagnose_pid(4242, proc=tmp_path / "proc", **kw)
    assert why is not None and why.kind is UntraceableKind.NOT_POLLED_YET


# -- hole 4: the endpoint's bounds ------------------------------------------------------------


def _client_as_attacker_sends(sock_dir: str, pids: list[int]) -> list[str]:
    c = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    c.bind(f"{sock_dir}/dynoconfigclient-atk-{os.getpid()}")
    c.settimeout(5)
    out = []
    for claimed in pids:
        c.sendto(encode_request(codec.ConfigRequest(3, 0, (claimed, 1))), f"{sock_dir}/dynolog")
        out.append(decode_config_reply(c.recv(70000)))
    c.close()
    return out


def test_spoofed_polls_over_the_socket_make_nothing_traceable(two_users: tuple[User, User], shared: Path) -> None:
    victim, attacker = two_users
    sock_dir = shared / "s"  # created by the root endpoint as 1733: every user may poll
    target = popen_as(victim, ["sleep", "60"], env={"PATH": "/usr/bin:/bin"})
    svc = LocalTraceService(socket_dir=str(sock_dir), use_dynolog=False)
    svc.start()
    try:
        replies = call_as(attacker, _client_as_attacker_sends, str(sock_dir), [1, target.pid, 999_999])
        assert replies == ["", "", ""]  # answered (nothing to do), never recorded
        assert svc.polling_pids() == set() and svc.endpoint.refused == 3
        assert svc.diagnose(1) is not None and svc.diagnose(target.pid) is not None
    finally:
        svc.stop()
        target.kill()
        target.wait()


def test_a_client_that_never_reads_loses_only_its_own_replies(shared: Path) -> None:
    ep = KinetoEndpoint(str(shared / "s"))
    ep.start()
    mute = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    mute.bind(str(shared / "s" / "dynoconfigclient-mute"))
    good = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    good.bind(str(shared / "s" / "dynoconfigclient-good"))
    good.settimeout(5)
    try:
        poll = encode_request(codec.ConfigRequest(3, 0, (os.getpid(), 1)))
        for _ in range(300):  # far more than its receive queue holds
            mute.sendto(poll, str(shared / "s" / "dynolog"))
        good.sendto(poll, str(shared / "s" / "dynolog"))
        assert decode_config_reply(good.recv(1000)) == ""  # within 5 s, not 300 x 0.2 s
        deadline = time.monotonic() + 10
        while ep.unsent == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ep.unsent > 0 and ep.running
    finally:
        mute.close()
        good.close()
        ep.stop()


POLL_TEMPLATE = bytearray(encode_request(codec.ConfigRequest(3, 0, tuple(range(1, 4097)))))
FIRST_PID_AT = codec.HEADER_BYTES + 16


def _flood_polls(ep: KinetoEndpoint, n: int, first: int, uid: int, sender_pid: int) -> None:
    for i in range(n):
        struct.pack_into("<i", POLL_TEMPLATE, FIRST_PID_AT, first + i)
        assert ep.handle_datagram(bytes(POLL_TEMPLATE), uid, sender_pid) is not None


@pytest.fixture
def quiet() -> Iterator[None]:
    logging.disable(logging.WARNING)  # the floods log a few lines; keep the output short
    yield
    logging.disable(logging.NOTSET)


def test_poll_flood_is_bounded(quiet: None) -> None:
    ep = KinetoEndpoint("/nonexistent-never-bound")
    # 20,000 spoofed polls (4,096 pids each) from an unprivileged sender: nothing recorded.
    _flood_polls(ep, 20_000, 100_000, uid=54321, sender_pid=777)
    assert len(ep.registry) == 0 and ep.refused == 20_000
    # The same flood with credentials that back it (root): capped per uid, ancestors trimmed.
    _flood_polls(ep, 20_000, 200_000, uid=0, sender_pid=1)
    live = ep.registry.live()
    assert len(live) == 256 and max(len(p.ancestors) for p in live) == MAX_ANCESTORS
    # At saturation nothing more is kept: what a further flood allocates is transient.
    tracemalloc.start()
    try:
        _flood_polls(ep, 100, 300_000, uid=54321, sender_pid=777)
        _flood_polls(ep, 100, 400_000, uid=0, sender_pid=1)
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert current < 256 << 10 and peak < 4 << 20, (current, peak)
    reg = Registry()
    for uid in range(40):
        for pid in range(200):
            reg.record_poll((uid * 1000 + pid + 10,), 0, uid)
    assert len(reg) == 4096  # the total cap, over 40 uids of 200 each


def test_pid_one_is_not_made_traceable_by_a_non_root_poll() -> None:
    ep = KinetoEndpoint("/nonexistent-never-bound")
    poll = encode_request(codec.ConfigRequest(3, 0, (1,)))
    for uid, pid in ((54321, 777), (54321, 1)):  # spoofed pid; or a (forged) credential pid 1
        assert decode_config_reply(ep.handle_datagram(poll, uid, pid) or b"") == ""
    assert ep.registry.get(1) is None
    own = encode_request(codec.ConfigRequest(3, 0, (os.getpid(), 1)))
    ep.handle_datagram(own, os.geteuid(), os.getpid())
    assert ep.registry.get(os.getpid()) is not None


def _kept(reply: bytes | None) -> int:
    """The count a ``ctxt`` reply carries, as libkineto reads it: the processes kept in the sender's
    (uid, job, GPU) group, 0 when the registration was not kept."""
    assert reply is not None and len(reply) == codec.HEADER_BYTES + codec.CTXT_REPLY.size
    return int(codec.CTXT_REPLY.unpack_from(reply, codec.HEADER_BYTES)[0])


def test_ctxt_flood_is_bounded(quiet: None) -> None:
    ep = KinetoEndpoint("/nonexistent-never-bound")
    head = codec.HEADER.pack(codec.CTXT_BODY.size, b"ctxt")
    body = codec.CTXT_BODY
    kept = [_kept(ep.handle_datagram(head + body.pack(0, 5, job), 0, 5)) for job in range(1_000_000)]  # distinct jobs
    assert kept[:CTXT_GROUPS_PER_UID] == [1] * CTXT_GROUPS_PER_UID  # one group per job, up to the uid's cap
    assert not any(kept[CTXT_GROUPS_PER_UID:])  # then none is kept
    members = [_kept(ep.handle_datagram(head + body.pack(0, pid + 10, 1), 0, pid + 10)) for pid in range(10_000)]
    assert members[0] == 2 and max(members) == members[-1] == CTXT_MEMBERS_PER_GROUP  # job 1's group is capped
    assert _kept(ep.handle_datagram(head + body.pack(0, 5, 2_000_000), 0, 5)) == 0  # still no room for a new job
    now = [0.0]
    reg = Registry(clock=lambda: now[0])
    assert [reg.record_context(job, 0, 5, 0) for job in range(CTXT_GROUPS_PER_UID)] == [1] * CTXT_GROUPS_PER_UID
    assert reg.record_context(CTXT_GROUPS_PER_UID, 0, 5, 0) == 0
    now[0] += 4000  # an hour later the registrations are forgotten, and their groups with them
    assert reg.record_context(CTXT_GROUPS_PER_UID, 0, 6, 0) == 1  # room for a new group again
    assert reg.record_context(7, 0, 7, 0) == 1  # job 7's group starts afresh: pid 5 left it


# -- hole 6: what `gpulens trace -o FILE` writes -------------------------------------------------


def _bomb(path: Path, plain_bytes: int) -> None:
    z = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip framing
    chunk = b"\0" * (1 << 20)
    with path.open("wb") as f:
        for _ in range(plain_bytes >> 20):
            f.write(z.compress(chunk))
        f.write(z.flush())


def test_gzip_bomb_stops_at_the_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(trace_remote.LIMIT_ENV, raising=False)
    bomb = tmp_path / "bomb.json.gz"
    _bomb(bomb, 200 << 20)  # ~200 KiB expanding 1000x
    size = bomb.stat().st_size
    out = tmp_path / "out.json"
    with pytest.raises(TraceFileError) as err:
        trace_remote.copy_trace(bomb, str(out), 1, 1)
    text = str(err.value)
    assert err.value.problem is TraceProblem.OVER_LIMIT
    assert "\n" not in text and str(200 * size) in text and trace_remote.LIMIT_ENV in text, text
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["bomb.json.gz"]
    small = tmp_path / "small.json.gz"
    _bomb(small, 8 << 20)
    monkeypatch.setenv(trace_remote.LIMIT_ENV, str(16 << 20))  # the way to allow more
    assert trace_remote.copy_trace(small, str(out), 1, 1) == str(out)
    assert out.stat().st_size == 8 << 20


def test_output_is_never_written_through_a_link(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "t.json"
    src.write_text('{"traceEvents": []}')
    precious = tmp_path / "precious"
    precious.write_text("keep")
    out = tmp_path / "out.json.gz"
    out.symlink_to(precious)  # a link at the destination is replaced, not followed
    assert trace_remote.copy_trace(src, str(out), 1, 1) == str(out)
    assert precious.read_text() == "keep" and not out.is_symlink()
    assert gzip.decompress(out.read_bytes()) == src.read_bytes()
    # A link planted at the temporary name (made predictable here): refused, nothing followed.
    monkeypatch.setattr(secrets, "token_hex", lambda n: "f" * (2 * n))  # the module gpulens.sources.trace_export uses
    os.symlink(precious, tmp_path / f".again.json.{'f' * 16}.tmp")
    with pytest.raises(TraceFileError) as err:
        trace_remote.copy_trace(src, str(tmp_path / "again.json"), 1, 1)
    assert err.value.problem is TraceProblem.WRITE_FAILED
    assert isinstance(err.value.__cause__, FileExistsError)  # the exclusive create refused the planted name
    assert precious.read_text() == "keep" and not (tmp_path / "again.json").exists()
    # The source must be a regular file (owned by whom the caller says).
    link = tmp_path / "link.json"
    link.symlink_to(src)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    for source, owner in ((link, None), (fifo, None), (src, os.geteuid() + 1)):
        with pytest.raises(TraceFileError) as err:
            trace_remote.copy_trace(source, str(tmp_path / "x.json"), 1, 1, owner_uid=owner)
        assert err.value.problem is TraceProblem.UNSAFE, source
