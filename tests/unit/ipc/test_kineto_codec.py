"""The Kineto IPC codec and endpoint: wire format, bounds, hostile datagrams."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import struct
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpulens.ipc.errors import (
    DatagramProblem,
    DynologRpcError,
    EndpointBusy,
    IpcError,
    MalformedDatagram,
    NotTraceable,
    TraceError,
    TraceTimeout,
)
from gpulens.ipc.kineto import codec
from gpulens.ipc.kineto.dynolog_rpc import DynologClient
from gpulens.ipc.kineto.endpoint import KinetoEndpoint
from gpulens.ipc.kineto.kconfig import DURATION_PAD_MS
from gpulens.ipc.kineto.outputs import final_paths
from gpulens.ipc.kineto.registry import Registry
from gpulens.ipc.kineto.requests import (
    TraceJob,
    TraceRequest,
    TraceState,
    config_text,
)
from gpulens.ipc.kineto.service import LocalTraceService
from gpulens.ipc.kineto.untraceable import Untraceable, UntraceableKind
from tests.fakes.kineto_client import decode_config_reply, encode_context, encode_request


def _req_bytes(pids: list[int], job: int = 0, ctype: int = 3) -> bytes:
    body = struct.pack("<iiq", ctype, len(pids), job) + struct.pack(f"<{len(pids)}i", *pids)
    return struct.pack("<Q32s", len(body), b"req") + body


def test_header_is_40_bytes_and_req_decodes() -> None:
    data = _req_bytes([1234, 1000, 1], job=77)
    assert codec.HEADER_BYTES == 40
    msg = codec.decode(data)
    assert msg == codec.ConfigRequest(config_type=3, job_id=77, pids=(1234, 1000, 1))
    assert isinstance(msg, codec.ConfigRequest) and msg.pid == 1234
    assert encode_request(msg) == data


def test_ctxt_roundtrip_and_reply() -> None:
    reg = codec.ContextRegistration(gpu=1, pid=42, job_id=9)
    assert codec.decode(encode_context(reg)) == reg
    reply = codec.encode_context_reply(3)
    assert len(reply) == 44 and struct.unpack_from("<i", reply, 40) == (3,)


def test_config_reply_has_no_nul_and_roundtrips() -> None:
    data = codec.encode_config_reply("A=1\nB=2")
    assert struct.unpack_from("<Q", data)[0] == 7 and data[8:12] == b"req\0"
    assert decode_config_reply(data) == "A=1\nB=2"
    assert decode_config_reply(codec.encode_config_reply("")) == ""
    with pytest.raises(ValueError):
        codec.encode_config_reply("x\0y")
    with pytest.raises(ValueError):
        codec.encode_config_reply("x" * codec.MAX_DATAGRAM_BYTES)


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"", DatagramProblem.SHORT_HEADER),
        (b"\0" * 39, DatagramProblem.SHORT_HEADER),
        (struct.pack("<Q32s", 5, b"req") + b"\0" * 4, DatagramProblem.SIZE_MISMATCH),
        (struct.pack("<Q32s", 0, b"bogus"), DatagramProblem.UNKNOWN_TYPE),
        (struct.pack("<Q", 0) + b"r" * 32, DatagramProblem.BAD_TYPE),
        (struct.pack("<Q32s", 8, b"req") + b"\0" * 8, DatagramProblem.BAD_BODY),
        (struct.pack("<Q32s", 16, b"req") + struct.pack("<iiq", 3, 5, 0), DatagramProblem.BAD_BODY),
        (struct.pack("<Q32s", 16, b"req") + struct.pack("<iiq", 3, -1, 0), DatagramProblem.BAD_BODY),
        (struct.pack("<Q32s", 16, b"req") + struct.pack("<iiq", 3, 10**9, 0), DatagramProblem.BAD_BODY),
        (struct.pack("<Q32s", 4, b"ctxt") + b"\0" * 4, DatagramProblem.BAD_BODY),
        (struct.pack("<Q32s", 0, b"\xff\0"), DatagramProblem.BAD_TYPE),
        (b"\0" * (codec.MAX_DATAGRAM_BYTES + 1), DatagramProblem.TOO_LARGE),
    ],
)
def test_malformed_datagrams_raise_specific_errors(data: bytes, problem: DatagramProblem) -> None:
    with pytest.raises(MalformedDatagram) as info:
        codec.decode(data)
    assert info.value.problem is problem


def test_a_malformed_datagram_names_what_was_wrong() -> None:
    """Pinned on purpose: the one sentence the daemon logs for a pid count that does not fill the body."""
    with pytest.raises(MalformedDatagram, match=r"^req pid count 5 needs 36 body bytes, got 16$"):
        codec.decode(struct.pack("<Q32s", 16, b"req") + struct.pack("<iiq", 3, 5, 0))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_fuzz_decode_never_raises_anything_else(data: bytes) -> None:
    with contextlib.suppress(MalformedDatagram):
        codec.decode(data)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=-(2**31), max_value=2**31 - 1), max_size=40), st.integers(-(2**63), 2**63 - 1))
def test_fuzz_valid_requests_roundtrip(pids: list[int], job: int) -> None:
    msg = codec.ConfigRequest(3, job, tuple(pids))
    assert codec.decode(encode_request(msg)) == msg


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=120))
def test_fuzz_endpoint_logic_drops_garbage(data: bytes) -> None:
    ep = KinetoEndpoint("/nonexistent-never-bound")
    reply = ep.handle_datagram(data)
    if reply is None:
        assert ep.dropped == 1
    else:
        codec.decode_header(reply)  # any answer is itself well formed


def test_registry_tracks_polls_and_expires() -> None:
    now = [100.0]
    reg = Registry(expiry_intervals=3, clock=lambda: now[0])
    reg.record_poll((10, 5, 1), 0, 0)
    now[0] += 1.0
    entry = reg.record_poll((10, 5, 1), 0, 0)
    assert entry is not None and entry.polls == 2 and entry.interval_s == pytest.approx(1.0) and entry.ancestors == (5, 1)
    now[0] += 10.0
    assert [p.pid for p in reg.live()] == [10]  # never sooner than ~11 s
    now[0] += 2.0
    assert reg.live() == []


def test_config_text_matches_dyno_gputrace_keys(tmp_path: Path) -> None:
    text = config_text(TraceRequest(pids=(1,), duration_ms=500, record_shapes=True), tmp_path / "trace.json", "r1")
    lines = text.splitlines()
    assert lines[0] == f"ACTIVITIES_LOG_FILE={tmp_path}/trace.json"
    for key in ("PROFILE_START_TIME=0", f"ACTIVITIES_DURATION_MSECS={500 + DURATION_PAD_MS}",
                "ACTIVITIES_WARMUP_PERIOD_SECS=0",
                "PROFILE_REPORT_INPUT_SHAPES=true", "PROFILE_WITH_STACK=false", "REQUEST_TRACE_ID=r1"):
        assert key in lines
    it = config_text(TraceRequest(pids=(1,), duration_ms=None, iterations=3), tmp_path / "t.json", "r2")
    assert "ACTIVITIES_ITERATIONS=3" in it and "PROFILE_START_ITERATION=0" in it
    assert final_paths(tmp_path / "trace.json", 42)[0] == tmp_path / "trace_42.json"


@pytest.mark.parametrize(
    "req",
    [
        TraceRequest(),
        TraceRequest(pids=(1,), job_id=2),
        TraceRequest(pids=(1,), duration_ms=None),
        TraceRequest(pids=(1,), duration_ms=0),
        TraceRequest(pids=(-3,)),
        TraceRequest(pids=(1,), iterations=5),
        TraceRequest(pids=(1,), warmup_s=-1),
    ],
)
def test_bad_requests_are_rejected(req: TraceRequest) -> None:
    with pytest.raises(ValueError):
        req.validate()


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A socket dir short enough for client names (sun_path holds 108 bytes)."""
    d = Path(tempfile.mkdtemp(prefix="gk", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _client(sock_dir: Path) -> socket.socket:
    c = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    c.bind(str(sock_dir / f"dynoconfigclient-test-{os.getpid()}"))
    c.settimeout(2)
    return c


def test_real_socket_survives_hostile_datagrams(short_dir: Path) -> None:
    tmp_path = short_dir
    ep = KinetoEndpoint(str(tmp_path), config_provider=lambda msg, uid: "X=1" if msg.pid == 4242 else "")
    ep.start()
    try:
        c = _client(tmp_path)
        target = str(tmp_path / "dynolog")
        hostile = [b"", b"\0" * 39, b"\xff" * 40, struct.pack("<Q32s", 2**63, b"req"), b"A" * 70000,
                   struct.pack("<Q32s", 16, b"req") + struct.pack("<iiq", 3, 999, 0)]
        for data in hostile:
            with contextlib.suppress(OSError):  # too big for a datagram: the kernel refuses it
                c.sendto(data, target)
        c.sendto(_req_bytes([4242, 1]), target)
        reply = c.recv(70000)
        assert decode_config_reply(reply) == "X=1"
        assert ep.running and ep.dropped >= 5
        c.sendto(_req_bytes([os.getpid(), 1]), target)
        assert decode_config_reply(c.recv(1000)) == ""
        procs = {p.pid: p for p in ep.registry.live()}
        assert procs[4242].uid == os.geteuid()  # from SO_PASSCRED
        c.close()
    finally:
        ep.stop()
    assert not (tmp_path / "dynolog").exists()


def test_name_taken_is_a_clear_error(short_dir: Path) -> None:
    tmp_path = short_dir
    first = KinetoEndpoint(str(tmp_path))
    first.start()
    try:
        with pytest.raises(EndpointBusy, match=r"already taken by .*pid"):
            KinetoEndpoint(str(tmp_path)).start()
    finally:
        first.stop()


def test_stale_socket_file_is_replaced(short_dir: Path) -> None:
    tmp_path = short_dir
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    stale.bind(str(tmp_path / "dynolog"))
    stale.close()  # the file stays, nobody listens
    ep = KinetoEndpoint(str(tmp_path))
    ep.start()
    try:
        assert ep.running
    finally:
        ep.stop()


def test_socket_dir_too_long_is_refused(tmp_path: Path) -> None:
    with pytest.raises(IpcError, match="too long"):
        KinetoEndpoint(str(tmp_path / ("d" * 80))).start()


class FakeDynolog:
    """A test double of dynolog's JSON RPC server: records requests, answers processesMatched."""

    def __init__(self, reply: bytes | None = None) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.requests: list[dict[str, object]] = []
        self.reply = reply
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with conn:
                head = conn.recv(4)
                if len(head) < 4:
                    continue
                (size,) = struct.unpack("=i", head)
                body = b""
                while len(body) < size:
                    body += conn.recv(size - len(body))
                req = json.loads(body)
                self.requests.append(req)
                out = self.reply if self.reply is not None else json.dumps(
                    {"processesMatched": list(req.get("pids", []))}).encode()
                conn.sendall(struct.pack("=i", len(out)) + out)

    def close(self) -> None:
        self.server.close()


def test_dynolog_rpc_client_frames_and_replies() -> None:
    fake = FakeDynolog()
    try:
        client = DynologClient(port=fake.port)
        assert client.reachable()
        assert client.set_kineto_on_demand_request("A=1\nB=2", pids=(7, 8)) == [7, 8]
        req = fake.requests[0]
        assert req == {"fn": "setKinetOnDemandRequest", "config": "A=1\nB=2", "job_id": 0,
                       "pids": [7, 8], "process_limit": 3}
    finally:
        fake.close()


@pytest.mark.parametrize("reply", [b"not json", b"[1, 2]", b'{"processesMatched": "x"}'])
def test_dynolog_bad_replies_are_clear_errors(reply: bytes) -> None:
    fake = FakeDynolog(reply)
    try:
        with pytest.raises(DynologRpcError):
            DynologClient(port=fake.port).set_kineto_on_demand_request("A=1", pids=(1,))
    finally:
        fake.close()


def test_dynolog_unreachable_is_a_clear_error() -> None:
    s = socket.create_server(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(DynologRpcError, match="cannot reach dynolog"):
        DynologClient(port=port, timeout_s=1).call({"fn": "getStatus"})


def test_service_uses_dynolog_when_the_name_is_taken(short_dir: Path) -> None:
    holder = KinetoEndpoint(str(short_dir))
    holder.start()
    fake = FakeDynolog()
    svc = LocalTraceService(socket_dir=str(short_dir), dynolog=DynologClient(port=fake.port))
    try:
        svc.start()
        assert svc.dynolog is not None and "dynolog RPC" in svc.address
        fut = svc.request_trace(TraceRequest(pids=(os.getpid(),), duration_ms=100, timeout_s=0.5))
        assert fake.requests and "ACTIVITIES_LOG_FILE=/tmp/gpulens-" in str(fake.requests[0]["config"])
        assert svc.jobs()[0].state is TraceState.TRACING
        with pytest.raises(TraceTimeout):  # nobody writes the file here
            fut.result(timeout=10)
    finally:
        svc.stop()
        fake.close()
        holder.stop()
    no_dynolog = LocalTraceService(socket_dir=str(short_dir), use_dynolog=False)
    blocker = KinetoEndpoint(str(short_dir))
    blocker.start()
    try:
        with pytest.raises(EndpointBusy):
            no_dynolog.start()
    finally:
        blocker.stop()


def test_other_users_processes_are_refused(short_dir: Path) -> None:
    svc = LocalTraceService(socket_dir=str(short_dir), requester_uid=os.geteuid() + 12345, use_dynolog=False)
    svc.start()
    try:
        reason = svc.diagnose(os.getpid())
        assert reason == Untraceable(UntraceableKind.OTHER_USER, os.getpid(), uid=os.geteuid())
        fut = svc.request_trace(TraceRequest(pids=(os.getpid(),)))
        with pytest.raises(NotTraceable) as err:
            fut.result(timeout=5)
        assert err.value.reasons == {os.getpid(): reason}
        gone = svc.request_trace(TraceRequest(pids=(2**22 + 17,)))
        with pytest.raises(NotTraceable) as err:
            gone.result(timeout=5)
        assert err.value.reasons == {2**22 + 17: Untraceable(UntraceableKind.GONE, 2**22 + 17)}
    finally:
        svc.stop()


def test_an_idle_endpoint_sleeps_until_a_datagram_or_stop(short_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No wake-ups while nothing arrives (each costs a viewer CPU on a VM); stop() still returns at once."""
    import select as select_module

    polls: list[object] = []
    real = select_module.poll

    class Counted:
        def __init__(self) -> None:
            self._p = real()

        def register(self, fd: int, mask: int) -> None:
            self._p.register(fd, mask)

        def poll(self, timeout: object = None) -> list[tuple[int, int]]:
            polls.append(timeout)
            return self._p.poll(timeout)  # type: ignore[arg-type]

    monkeypatch.setattr("gpulens.ipc.kineto.endpoint.select.poll", Counted)
    ep = KinetoEndpoint(str(short_dir), config_provider=lambda msg, uid: "")
    ep.start()
    try:
        time.sleep(1.0)  # the old loop woke every 200 ms: 5 polls here
        assert len(polls) == 1 and polls[0] is None, polls
        c = _client(short_dir)
        c.sendto(b"\xff" * 40, str(short_dir / "dynolog"))  # garbage: dropped, and the loop waits again
        deadline = time.monotonic() + 5
        while ep.dropped < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ep.dropped == 1
        c.close()
    finally:
        ep.stop()
    assert not ep.running  # stop()'s byte woke it (it no longer wakes on its own)


def test_an_idle_trace_service_looks_at_nothing_until_a_trace_is_requested(short_dir: Path) -> None:
    """The watch thread ticks only while a trace is open: idle, it used to wake every tick_s (10 Hz) for nothing."""
    svc = LocalTraceService(socket_dir=str(short_dir), use_dynolog=False, tick_s=0.02)
    ticks: list[float] = []
    real_tick = svc._table.tick

    def counted(*args: Any, **kwargs: Any) -> list[TraceJob]:
        ticks.append(time.monotonic())
        return real_tick(*args, **kwargs)

    svc._table.tick = counted  # type: ignore[method-assign]
    svc.diagnose = lambda pid: None  # type: ignore[method-assign]  # as if this process could be traced
    svc.start()
    try:
        time.sleep(0.5)  # 25 ticks of the old loop
        assert ticks == []
        fut = svc.request_trace(TraceRequest(pids=(os.getpid(),), duration_ms=100))  # we never poll
        deadline = time.monotonic() + 5  # 5 ticks take 0.1 s, longer on a loaded machine
        while len(ticks) < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not fut.done(), fut.exception()
        assert len(ticks) >= 5, ticks  # open: watched every tick_s again
    finally:
        started = time.monotonic()
        svc.stop()
    assert time.monotonic() - started < 1.5  # the stop woke it
    with pytest.raises(TraceError, match="stopped"):
        fut.result(timeout=1)
