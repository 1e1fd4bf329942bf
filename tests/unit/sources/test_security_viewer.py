"""The viewer trusts nothing an agent, a socket squatter or a stream sends (issue 14, docs/security.md).

In-process fake agents on loopback play the impostor, the liar about its
host name, the sender of NaN / inf / 1e308 and escape sequences, the agent
that sends 30,000 file names, and the one killed mid-download. The squatter
test makes a throwaway user bind the Kineto name and the control socket
before root's ``gpulens trace`` runs (in a private network namespace when
``unshare -n`` works, so no other test's Kineto name is in the way).
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

import msgpack
import pytest

from gpulens.collectors.synthetic import SyntheticSampler
from gpulens.core.events import HostStatusEvent, SampleEvent
from gpulens.ipc import auth, stream
from gpulens.ipc.request_schema import TraceParams
from gpulens.ipc.serialize import sample_to_dict
from gpulens.ipc.stream_decode import FrameDecoder
from gpulens.ipc.stream_frames import sample_frame
from gpulens.sources.stream.downloads import MAX_FILES_PER_REQUEST, PendingRequest
from gpulens.sources.stream.link import HostLink, LinkOptions, Target
from gpulens.sources.stream.local_agent import HolderKind, HolderRefusal
from gpulens.sources.stream.source import StreamSource, tcp_target
from tests.fakes.agent_helpers import WAIT_S, EventLog
from tests.fakes.security_helpers import User, two_users  # noqa: F401  (fixture)
from tests.paths import ROOT

TOKEN = b"0123456789abcdef0123456789abcdef"
Script = Callable[[socket.socket], None]
_M = TypeVar("_M")  # a message class, for until()


# -- a one-connection fake agent ------------------------------------------------


class FakeAgent:
    """Runs ``script(conn)`` for the first connection to a loopback port, in a thread."""

    def __init__(self, script: Script) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._serve, args=(script,), daemon=True)
        self.thread.start()

    def _serve(self, script: Script) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(WAIT_S)
            try:
                script(conn)
            except OSError:
                pass  # the viewer hung up: that is often the point
            except BaseException as err:
                self.error = err

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.close()
        self.thread.join(timeout=10)


class Reader:
    """The fake agent's view of what the viewer sends."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn = conn
        self.dec = FrameDecoder()
        self.pending: list[stream.Message] = []

    def until(self, kind: type[_M]) -> _M:
        while True:
            while self.pending:
                msg = self.pending.pop(0)
                if isinstance(msg, kind):
                    return msg
            data = self.conn.recv(65536)
            if not data:
                raise OSError("the viewer hung up")
            self.pending.extend(self.dec.feed(data))


def _hold(conn: socket.socket) -> None:
    """Keep the connection open until the viewer hangs up."""
    while conn.recv(65536):
        pass


def _hello(host: str = "fake") -> bytes:
    return stream.encode(stream.Hello(proto=stream.PROTOCOL_VERSION, role="agent", host=host, caps=("trace",),
                                      interval_s=1.0))


def _sample(host: str = "fake", **changes: Any) -> dict[str, Any]:
    d = sample_to_dict(SyntheticSampler(hostname=host, gpus=4, interval_s=1.0).sample())
    for path, value in changes.items():
        target: Any = d
        keys = [int(k) if k.isdigit() else k for k in path.split("__")]
        for k in keys[:-1]:
            target = target[k]
        target[keys[-1]] = value
    return d


def _frame(sample: dict[str, Any]) -> bytes:
    return sample_frame(msgpack.packb(sample, use_bin_type=True))


@contextlib.contextmanager
def viewing(agent: FakeAgent, **opts: Any) -> Iterator[tuple[StreamSource, EventLog]]:
    log = EventLog()
    src = StreamSource([tcp_target(f"127.0.0.1:{agent.port}")], LinkOptions(backoff_min_s=30, **opts))
    src.start(log)
    try:
        yield src, log
    finally:
        src.stop()
        agent.close()


def _first_down(log: EventLog) -> HostStatusEvent:
    log.wait_for(lambda evs: any(isinstance(e, HostStatusEvent) and not e.up for e in evs), what="link down")
    return next(e for e in log.snapshot() if isinstance(e, HostStatusEvent) and not e.up)


def _never_up(log: EventLog) -> None:
    evs = log.snapshot()
    assert not any(isinstance(e, HostStatusEvent) and e.up for e in evs), evs
    assert not any(isinstance(e, SampleEvent) for e in evs)


# -- 1. mutual authentication --------------------------------------------------------


def _skips_challenge(conn: socket.socket) -> None:
    conn.sendall(_hello() + _frame(_sample()))
    Reader(conn).until(stream.Hello)


def _skips_auth_ok(conn: socket.socket) -> None:
    conn.sendall(stream.encode(stream.Challenge(proto=1, nonce=auth.new_nonce())))
    r = Reader(conn)
    r.until(stream.AuthResponse)
    conn.sendall(_hello() + _frame(_sample()))
    r.until(stream.Hello)


def _wrong_mac(conn: socket.socket) -> None:
    nonce = auth.new_nonce()
    conn.sendall(stream.encode(stream.Challenge(proto=1, nonce=nonce)))
    r = Reader(conn)
    resp = r.until(stream.AuthResponse)
    forged = auth.agent_proof(b"another token, not the viewer's!", nonce, resp.cnonce)
    conn.sendall(stream.encode(stream.AuthOk(mac=forged)) + _hello() + _frame(_sample()))
    r.until(stream.Hello)


def _auth_ok_unasked(conn: socket.socket) -> None:
    conn.sendall(stream.encode(stream.AuthOk(mac=b"\0" * 32)) + _hello())
    Reader(conn).until(stream.Hello)


@pytest.mark.parametrize(
    ("script", "why"),
    [
        (_skips_challenge, "sent its hello without the challenge"),
        (_skips_auth_ok, "sent its hello without auth_ok"),
        (_wrong_mac, "its auth_ok MAC is wrong"),
        (_auth_ok_unasked, "auth_ok without a challenge"),
    ],
    ids=["skips-challenge", "skips-auth-ok", "wrong-mac", "auth-ok-unasked"],
)
def test_impostor_agent_is_down_with_the_auth_reason_never_up(script: Script, why: str) -> None:
    with viewing(FakeAgent(script), token=TOKEN) as (_src, log):
        down = _first_down(log)
        assert down.reason.startswith("authentication failed: the agent did not prove it holds the token")
        assert why in down.reason
        _never_up(log)


def test_agent_that_proves_the_token_is_up() -> None:
    def honest(conn: socket.socket) -> None:
        nonce = auth.new_nonce()
        conn.sendall(stream.encode(stream.Challenge(proto=1, nonce=nonce)))
        r = Reader(conn)
        resp = r.until(stream.AuthResponse)
        auth.verify_viewer(TOKEN, nonce, resp.cnonce, resp.mac, auth.ReplayGuard())
        conn.sendall(stream.encode(stream.AuthOk(mac=auth.agent_proof(TOKEN, nonce, resp.cnonce))) + _hello())
        r.until(stream.Hello)
        conn.sendall(_frame(_sample()))
        _hold(conn)

    with viewing(FakeAgent(honest), token=TOKEN) as (_src, log):
        log.wait_for(lambda evs: any(isinstance(e, SampleEvent) for e in evs), what="a sample")
        assert any(isinstance(e, HostStatusEvent) and e.up for e in log.snapshot())


# -- 2. samples only under the hello's host name -------------------------------------


@pytest.mark.parametrize("how", ["live", "history"])
def test_samples_under_another_host_name_end_the_session(how: str) -> None:
    def liar(conn: socket.socket) -> None:
        conn.sendall(_hello("fake"))
        Reader(conn).until(stream.Hello)
        own, other = _sample("fake"), _sample("victim")
        if how == "live":
            conn.sendall(_frame(own) + _frame(other))
        else:
            # raw sample maps, as a lying agent sends them (encode packs them as it packs HostSamples)
            conn.sendall(stream.encode(stream.History(id=0, samples=(own, other))))  # type: ignore[arg-type]
        _hold(conn)

    with viewing(FakeAgent(liar)) as (_src, log):
        down = _first_down(log)
        assert "sample for host 'victim'" in down.reason and "declared 'fake'" in down.reason
        assert down.host == "fake"
        assert not log.samples("victim")


def test_hello_without_a_host_is_refused() -> None:
    def nameless(conn: socket.socket) -> None:
        conn.sendall(_hello("\x1b[2J"))
        _hold(conn)

    with viewing(FakeAgent(nameless)) as (_src, log):
        assert "names no host" in _first_down(log).reason
        _never_up(log)


# -- 3. non-finite and absurd values become n/a with a reason ----------------------


def test_nan_inf_and_1e308_reach_the_store_as_none_with_reasons() -> None:
    hostile = _sample(
        "fake",
        gpus__3__power_w=float("inf"),
        gpus__0__utilization_percent=1e308,
        gpus__1__temperature_c=float("-inf"),
        cpu__total_percent=float("nan"),
        network__rx_bytes_per_s=1e308,
        memory__used_bytes=-5,
    )
    history = _sample("fake", gpus__2__power_w=float("nan"))
    history["time"] = hostile["time"] - 5

    def sender(conn: socket.socket) -> None:
        conn.sendall(_hello("fake"))
        Reader(conn).until(stream.Hello)
        # a raw sample map holding what no HostSample holds (NaN power)
        conn.sendall(stream.encode(stream.History(id=0, samples=(history,))) + _frame(hostile))  # type: ignore[arg-type]
        _hold(conn)

    with viewing(FakeAgent(sender)) as (_src, log):
        log.wait_for(lambda evs: len(log.samples("fake")) >= 2, what="both samples")
        old, new = (e.sample for e in log.samples("fake"))
    assert old.gpus[2].power_w is None and "non-finite value (nan) for gpus[2].power_w" in old.gpus[2].unavailable["power_w"]
    g = new.gpus
    assert g[3].power_w is None and "non-finite value (inf) for gpus[3].power_w" in g[3].unavailable["power_w"]
    assert g[0].utilization_percent is None and "1e+308" in g[0].unavailable["utilization_percent"]
    assert g[1].temperature_c is None and "-inf" in g[1].unavailable["temperature_c"]
    assert new.cpu.total_percent is None and "nan" in new.unavailable["cpu.total_percent"]
    assert new.network.rx_bytes_per_s is None and "implausible" in new.unavailable["network.rx_bytes_per_s"]
    assert new.memory.used_bytes is None and "memory.used_bytes" in new.unavailable

    from gpulens.store.store import Store
    from gpulens.store.views import unavailable_reason

    assert "gpus[3].power_w" in (unavailable_reason(new, "gpu.power_w") or "")
    store = Store()
    for s in (old, new):
        store.apply(SampleEvent(s))
    for metric in ("gpu.power_w", "gpu.utilization_percent", "cpu.total_percent", "network.rx_bytes_per_s"):
        assert all(math.isfinite(v) or math.isnan(v) for v in store.series("fake", metric, 300.0, 20))


def test_required_number_out_of_range_drops_its_entry_or_the_sample() -> None:
    from gpulens.core.errors import SchemaError
    from gpulens.ipc.serialize import sample_from_dict

    d = _sample("fake")
    d["network"]["interfaces"] = [{"name": "eth0", "rx_bytes_per_s": float("inf"), "tx_bytes_per_s": 1.0},
                                  {"name": "eth1", "rx_bytes_per_s": 2.0, "tx_bytes_per_s": 3.0}]
    d["cpu"]["per_core_percent"] = [10.0, float("nan"), 30.0]
    s = sample_from_dict(d)
    assert [i.name for i in s.network.interfaces] == ["eth1"]
    assert "network.interfaces[0] dropped" in s.unavailable["network.interfaces[0]"]
    assert s.cpu.per_core_percent == () and "cpu.per_core_percent" in s.unavailable
    d["time"] = float("inf")
    with pytest.raises(SchemaError, match=r"^time: "):
        sample_from_dict(d)
    d["time"] = 10**400  # JSON allows it; float() would overflow
    with pytest.raises(SchemaError, match=r"^time: "):
        sample_from_dict(d)


def test_every_numeric_field_has_a_deliberate_bound() -> None:
    from gpulens.core.model import HostSample
    from gpulens.core.sample_fields import ANY, SPECS, field_specs

    field_specs(HostSample)  # every class a sample holds
    unbounded = [f"{cls.__name__}.{f.name}" for cls, spec in SPECS.items() for f in spec
                 if f.kind in ("num", "nums", "nummap") and (f.lo, f.hi) == ANY]
    assert unbounded == []


@pytest.mark.parametrize("bad", [float("inf"), -float("inf"), 1e308, -1e308, float("nan")])
def test_widgets_never_raise_on_inf_or_1e308(bad: float) -> None:
    from gpulens.core import units as fmt
    from gpulens.tui.widgets.plot import braille_area
    from gpulens.tui.widgets.sparklines import spark

    values = [1.0, bad, 50.0, bad, 1e308, 99.0]
    for lo, hi in ((0.0, 100.0), (0.0, bad), (bad, 100.0), (0.0, 1e-300)):
        rows = braille_area(values, 3, lo, hi)
        assert len(rows) == 3 and all(len(r) == 3 for r in rows)
        assert len(spark(values, lo, hi)) == len(values)
    shown = [fmt.pct(bad), fmt.size(bad), fmt.rate(bad), fmt.num(bad, "W"), fmt.window_name(bad)]
    if not math.isfinite(bad):
        assert shown == ["n/a"] * 5
    assert fmt.duration(bad) in ("n/a", "0s")


# -- 4. control characters never reach a terminal ------------------------------------

ESC_HOST = "node\x1b]0;pwned\x07-1\x1b[31m\x9b2J\u202e"


def test_strings_from_the_agent_lose_their_control_characters() -> None:
    from gpulens.core.sanitize import clean_text

    d = _sample("node-1")
    d["gpus"][0]["name"] = "H100\x1b[2J\x1b[H"
    d["jobs"] = [{"pid": 7, "tree_id": "t\x00", "cmdline": "python\x1b]8;;http://x\x07train.py\nrm -rf",
                  "user": "al\x7fice", "start_time": 1.0}]
    d["unavailable"] = {"cache\x1b[1m": "perf\x1b[5m:\rENOENT"}

    def sender(conn: socket.socket) -> None:
        conn.sendall(_hello(ESC_HOST))
        Reader(conn).until(stream.Hello)
        d["host"] = ESC_HOST  # its own (raw) name: the same once cleaned
        conn.sendall(_frame(d))
        _hold(conn)

    with viewing(FakeAgent(sender)) as (_src, log):
        log.wait_for(lambda evs: len(log.samples("node-1")) >= 1, what="the sample")
        (ev,) = log.samples("node-1")
    s = ev.sample
    assert s.host == "node-1" == clean_text(ESC_HOST)
    assert s.gpus[0].name == "H100"
    job = s.jobs[0]
    assert job.cmdline == "pythontrain.py rm -rf" and job.user == "alice" and job.tree_id == "t"
    assert s.unavailable == {"cache": "perf: ENOENT"}
    assert all(isinstance(e, HostStatusEvent) is False or e.host == "node-1" for e in log.snapshot())


def test_snapshot_text_output_is_free_of_control_characters() -> None:
    from gpulens.commands.snapshot import to_text

    sample = sample_to_dict(SyntheticSampler(hostname="ok", gpus=1).sample())
    sample["cpu"]["total_percent"] = float("inf")  # another source's value: still printed safely
    hosts = [
        {"host": ESC_HOST, "up": True, "reason": "", "sample": sample},
        {"host": "down\x1b[1A", "up": False, "reason": "agent refused: \x1b]52;c;ZXZpbA==\x07busy\x1b[0m",
         "sample": None},
    ]
    out = to_text(hosts, ["prom\x1b[2Jetheus slow"])
    assert not any(ch in out for ch in "\x1b\x07\x9b\u202e\x00\r")
    assert "node-1" in out and "n/a" in out and "agent refused: busy" in out and "prometheus slow" in out


def _strict(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def test_snapshot_json_is_strict_even_with_infinities() -> None:
    from gpulens.commands.snapshot import collect, to_json

    doc = {"hosts": [{"host": "x", "sample": {"a": float("inf"), "b": [float("nan"), -float("inf"), 1.5]}}]}
    parsed = _strict(to_json(doc))
    assert parsed["hosts"][0]["sample"] == {"a": None, "b": [None, None, 1.5]}

    hostile = _sample("fake", gpus__0__power_w=float("inf"), cpu__total_percent=float("nan"))

    def sender(conn: socket.socket) -> None:
        conn.sendall(_hello("fake"))
        Reader(conn).until(stream.Hello)
        conn.sendall(_frame(hostile))
        _hold(conn)

    agent = FakeAgent(sender)
    try:
        hosts, _errors = collect(StreamSource([tcp_target(f"127.0.0.1:{agent.port}")]), 30.0)
    finally:
        agent.close()
    (h,) = _strict(to_json({"hosts": hosts}))["hosts"]
    assert h["up"] and h["sample"]["gpus"][0]["power_w"] is None and h["sample"]["cpu"]["total_percent"] is None


def test_snapshot_cli_json_is_strict(gpulens_exe: str) -> None:
    hostile = _sample("fake", gpus__0__power_w=float("inf"))

    def sender(conn: socket.socket) -> None:
        conn.sendall(_hello("fake"))
        Reader(conn).until(stream.Hello)
        conn.sendall(_frame(hostile))
        _hold(conn)

    agent = FakeAgent(sender)
    try:
        out = subprocess.run([gpulens_exe, "snapshot", "--connect", f"127.0.0.1:{agent.port}", "--json",
                              "--timeout", "30"], capture_output=True, text=True, timeout=120)
    finally:
        agent.close()
    assert out.returncode == 0, out.stderr
    assert "Infinity" not in out.stdout and "NaN" not in out.stdout
    assert _strict(out.stdout)["hosts"][0]["sample"]["gpus"][0]["power_w"] is None


# -- 5. a sample in the same read as the hello is delivered --------------------------


class OneReadChannel:
    """A channel whose first read holds the agent's hello and a sample together."""

    def __init__(self, first: bytes) -> None:
        self.reads = [first]
        self.sent: list[bytes] = []

    def recv(self, timeout_s: float) -> bytes:
        return self.reads.pop(0) if self.reads else b""

    def send(self, data: bytes) -> None:
        self.sent.append(data)

    def describe_eof(self) -> str:
        return "the agent closed the connection"

    def close(self) -> None:
        pass


def test_sample_in_the_same_read_as_the_hello_is_delivered() -> None:
    from gpulens.ipc.channels import ChannelClosed

    log = EventLog()
    link = HostLink(Target(address="fake:1", kind="tcp"), log, LinkOptions(), threading.Event())
    chan = OneReadChannel(_hello("fake") + _frame(_sample("fake")) + _frame(_sample("fake", time=2e9)))
    with pytest.raises(ChannelClosed):
        link._session(chan)
    kinds = [type(e).__name__ for e in log.snapshot()]
    assert kinds == ["HostStatusEvent", "SampleEvent", "SampleEvent"], kinds
    assert len(chan.sent) == 1  # the viewer's hello


def test_hello_and_sample_in_one_sendall_over_tcp() -> None:
    def eager(conn: socket.socket) -> None:
        conn.sendall(_hello("fake") + _frame(_sample("fake")))
        Reader(conn).until(stream.Hello)
        _hold(conn)

    with viewing(FakeAgent(eager)) as (_src, log):
        log.wait_for(lambda evs: len(log.samples("fake")) >= 1, what="the sample sent with the hello")


# -- 6. squatting: another user's process holding the Kineto name gets nothing ------

_SQUATTER = r"""
import socket, sys, time
control, hello, forged = (bytes.fromhex(a) for a in sys.argv[1:4])
k = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
try:
    k.bind(b"\0dynolog\0")
except OSError:
    print("busy", flush=True)
    sys.exit(3)
c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
c.bind(control)
c.listen(8)
print("ready", flush=True)
while True:
    conn, _ = c.accept()
    conn.settimeout(60)
    got = b""
    try:
        conn.sendall(hello)
        frames = 0
        while frames < 2:  # the viewer's hello, then its request (id 1)
            data = conn.recv(65536)
            if not data:
                break
            got += data
            frames, at = 0, 0
            while len(got) >= at + 4 and len(got) >= at + 4 + int.from_bytes(got[at:at + 4], "big"):
                at += 4 + int.from_bytes(got[at:at + 4], "big")
                frames += 1
        if frames >= 2:
            conn.sendall(forged)  # the forged trace, for whoever asked
            while conn.recv(65536):
                pass
    except OSError:
        pass
    print(f"received {len(got)}", flush=True)
    conn.close()
"""

_DRIVER = r"""
import json, os, subprocess, sys, time
sys.path.insert(0, sys.argv[5])
from gpulens.ipc import stream
from gpulens.ipc.control import control_name

uid, gid, workdir, gpulens = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
os.environ.pop("KINETO_IPC_SOCKET_DIR", None)
hello = stream.encode(stream.Hello(proto=stream.PROTOCOL_VERSION, role="agent", host="x", caps=("trace",)))
forged = stream.encode(stream.FileChunk(id=1, name="1-forged.json", offset=0, data=b'{"forged": 1}', last=True))
forged += stream.encode(stream.Response(id=1, ok=True, result={"files": {"1": "1-forged.json"}}))

def demote():
    os.setgroups([]); os.setgid(gid); os.setuid(uid)

squat = subprocess.Popen(
    ["gpulens", "-c", open(os.path.join(workdir, "squatter.py")).read(),
     control_name(None, uid).hex(), hello.hex(), forged.hex(), "agent"],
    executable=sys.argv[6], preexec_fn=demote, cwd="/", stdout=subprocess.PIPE, text=True)
report = {"squatter": squat.stdout.readline().strip(), "squatter_pid": squat.pid}
try:
    if report["squatter"] == "ready":
        out = os.path.join(workdir, "root-trace.json")
        r = subprocess.run([gpulens, "trace", "--pid", str(os.getpid()), "--duration-ms", "100",
                            "--timeout", "5", "-o", out], capture_output=True, text=True, timeout=120)
        report.update(rc=r.returncode, stdout=r.stdout, stderr=r.stderr, written=os.path.exists(out))
        from gpulens.sources.stream.local_agent import LocalAgentLink
        from gpulens.ipc.errors import StreamError
        try:
            LocalAgentLink(None, squat.pid, uid, __import__("pathlib").Path(workdir) / "dl").close()
            report["link"] = "accepted"
        except StreamError as err:
            report["link"] = str(err)
            report["link_problem"] = getattr(err.problem, "name", None)
finally:
    squat.kill()
    rest = squat.communicate(timeout=10)[0]
report["received"] = [line for line in rest.splitlines() if line.startswith("received")]
print(json.dumps(report))
"""


def test_squatter_of_another_user_gets_no_request_and_writes_no_file(
    two_users: tuple[User, User], tmp_path: Path, gpulens_exe: str  # noqa: F811 - the fixture
) -> None:
    python = shutil.which("python3", path="/usr/bin:/bin")
    if python is None:
        pytest.skip("needs a system python3 the throwaway user can run")
    _victim, attacker = two_users
    (tmp_path / "squatter.py").write_text(_SQUATTER)
    (tmp_path / "driver.py").write_text(_DRIVER)
    argv = [sys.executable, str(tmp_path / "driver.py"), str(attacker.uid), str(attacker.gid), str(tmp_path),
            gpulens_exe, str(ROOT), python]
    private = shutil.which("unshare") is not None and subprocess.run(
        ["unshare", "-n", "true"], capture_output=True, timeout=30).returncode == 0
    run = subprocess.run((["unshare", "-n"] if private else []) + argv,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout.strip().splitlines()[-1])
    if report["squatter"] == "busy":
        pytest.skip("the Kineto name is held by another process here and no private network namespace is possible")
    assert report["squatter"] == "ready", report
    assert report["rc"] == 1, report
    assert str(HolderRefusal(HolderKind.OTHER_USER, report["squatter_pid"], attacker.uid)) in report["stderr"]
    assert not report["written"] and not (tmp_path / "root-trace.json").exists()
    assert report["link_problem"] == "UNTRUSTED_HOLDER", report
    assert f"uid {attacker.uid}" in report["link"]  # the refusal names the attacker's uid (a fact, not wording)
    assert all(line == "received 0" for line in report["received"]), report  # no request ever reached it
    assert not (tmp_path / "dl").exists()


def test_root_accepts_only_root_and_a_user_accepts_self_or_root() -> None:
    from gpulens.sources.stream.local_agent import trusted_peer

    assert trusted_peer(0, 0) and not trusted_peer(1000, 0)
    assert trusted_peer(1000, 1000) and trusted_peer(0, 1000) and not trusted_peer(1001, 1000)


# -- 7. downloads: capped, never following a link, nothing partial left behind --------


def test_thirty_thousand_file_names_are_capped_and_nothing_is_left(tmp_path: Path) -> None:
    def flooder(conn: socket.socket) -> None:
        conn.sendall(_hello("fake"))
        r = Reader(conn)
        req = r.until(stream.Request)
        frames = b"".join(stream.encode(stream.FileChunk(id=req.id, name=f"f{i}.json", offset=0, data=b"x",
                                                          last=True)) for i in range(30_000))
        conn.sendall(frames + stream.encode(stream.Response(id=req.id, ok=True, result={})))
        _hold(conn)

    dl = tmp_path / "dl"
    with viewing(FakeAgent(flooder), download_dir=dl) as (src, log):
        log.wait_for(lambda evs: any(isinstance(e, HostStatusEvent) and e.up for e in evs), what="link up")
        fut = src.request("fake", TraceParams(), WAIT_S)
        with pytest.raises(Exception, match=f"more than {MAX_FILES_PER_REQUEST} files"):
            fut.result(timeout=WAIT_S)
        assert list(dl.iterdir()) == []


def test_pending_request_caps_files_and_never_follows_a_planted_link(tmp_path: Path) -> None:
    from gpulens.ipc.errors import ProtocolError, ProtocolProblem

    dl = tmp_path / "dl"
    dl.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (dl / "evil-t.json").symlink_to(victim)
    p = PendingRequest(Future())
    p.write_chunk(stream.FileChunk(id=1, name="t.json", offset=0, data=b"new", last=True), dl, "evil")
    files = p.finish()
    assert victim.read_text() == "precious" and (dl / "evil-t.json").is_symlink()
    assert files["t.json"] == dl / "evil-1-t.json" and files["t.json"].read_bytes() == b"new"
    assert files["t.json"].stat().st_mode & 0o077 == 0

    q = PendingRequest(Future())
    for i in range(MAX_FILES_PER_REQUEST):
        q.write_chunk(stream.FileChunk(id=2, name=f"n{i}", offset=0, data=b"y", last=i % 2 == 0), dl, "h")
    with pytest.raises(ProtocolError) as err:
        q.write_chunk(stream.FileChunk(id=2, name="one-more", offset=0, data=b"z", last=True), dl, "h")
    assert err.value.problem is ProtocolProblem.ANSWER_TOO_LARGE
    q.abort()
    assert sorted(x.name for x in dl.iterdir()) == ["evil-1-t.json", "evil-t.json"]
    q.write_chunk(stream.FileChunk(id=2, name="late", offset=0, data=b"z", last=True), dl, "h")  # ignored
    assert not (dl / "h-late").exists()


def test_ok_answer_keeps_complete_files_and_deletes_an_unfinished_one(tmp_path: Path) -> None:
    p = PendingRequest(Future())
    p.write_chunk(stream.FileChunk(id=1, name="done", offset=0, data=b"a", last=True), tmp_path, "h")
    p.write_chunk(stream.FileChunk(id=1, name="half", offset=0, data=b"b", last=False), tmp_path, "h")
    assert p.finish() == {"done": tmp_path / "h-done"}
    assert sorted(x.name for x in tmp_path.iterdir()) == ["h-done"]


_DYING_AGENT = r"""
import socket, sys, time
sys.path.insert(0, sys.argv[1])
from gpulens.ipc import stream
from gpulens.ipc.stream_decode import FrameDecoder
srv = socket.create_server(("127.0.0.1", 0))
print(srv.getsockname()[1], flush=True)
conn, _ = srv.accept()
conn.sendall(stream.encode(stream.Hello(proto=1, role="agent", host="dying", interval_s=1.0)))
dec = FrameDecoder()
req = None
while req is None:
    for msg in dec.feed(conn.recv(65536)):
        if isinstance(msg, stream.Request):
            req = msg
conn.sendall(stream.encode(stream.FileChunk(id=req.id, name="big.json", offset=0, data=b"x" * 1_000_000, last=False)))
print("sent", flush=True)
time.sleep(600)
"""


def test_agent_killed_mid_download_leaves_no_partial_file(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", _DYING_AGENT, str(ROOT)], stdout=subprocess.PIPE, text=True)
    dl = tmp_path / "dl"
    log = EventLog()
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        src = StreamSource([tcp_target(f"127.0.0.1:{port}")], LinkOptions(backoff_min_s=30, download_dir=dl))
        src.start(log)
        try:
            log.wait_for(lambda evs: any(isinstance(e, HostStatusEvent) and e.up for e in evs), what="link up")
            fut = src.request("dying", TraceParams(), WAIT_S)
            assert proc.stdout.readline().strip() == "sent"
            deadline = time.monotonic() + WAIT_S
            while not (dl.exists() and any(dl.iterdir())):  # the partial file is being written
                assert time.monotonic() < deadline, "the partial file never appeared"
                time.sleep(0.02)
            proc.kill()
            with pytest.raises(Exception, match="connection lost"):
                fut.result(timeout=WAIT_S)
            assert list(dl.iterdir()) == []
        finally:
            src.stop()
    finally:
        proc.kill()
        proc.wait()


def test_request_timeout_deletes_the_partial_file(tmp_path: Path) -> None:
    def slow(conn: socket.socket) -> None:
        conn.sendall(_hello("fake"))
        req = Reader(conn).until(stream.Request)
        conn.sendall(stream.encode(stream.FileChunk(id=req.id, name="t.json", offset=0, data=b"x" * 1000,
                                                    last=False)))
        _hold(conn)

    dl = tmp_path / "dl"
    with viewing(FakeAgent(slow), download_dir=dl) as (src, log):
        log.wait_for(lambda evs: any(isinstance(e, HostStatusEvent) and e.up for e in evs), what="link up")
        fut = src.request("fake", TraceParams(), 1.0)
        with pytest.raises(TimeoutError):
            fut.result(timeout=WAIT_S)
        assert not dl.exists() or list(dl.iterdir()) == []
