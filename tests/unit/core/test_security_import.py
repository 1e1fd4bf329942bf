"""Importers and clients are bounded by what they read (issue 14, workstream D).

Every hostile input is generated small in ``tmp_path`` at test time. The
memory bounds are generous (the point is "a few tens of MiB, not gigabytes"):
measured with ``tracemalloc`` in process, or as the peak RSS of a child that
also runs under an address-space limit, so a regression fails here instead of
swapping the machine.
"""

from __future__ import annotations

import gzip
import json
import os
import pickle
import socket
import struct
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpulens.analysis.flame.errors import FlameFormatError, FlameProblem
from gpulens.analysis.flame.importers import group_from_bytes, load_profile
from gpulens.analysis.flame.snapshot import load_snapshot_bytes, scan_pickle
from gpulens.analysis.trace.analyze import analyze_file
from gpulens.analysis.trace.errors import TraceFileError
from gpulens.core.errors import PrometheusError, RecordingError, RecordingProblem
from gpulens.core.limits import InputLimits, InputProblem, InputRefused, open_regular, read_input
from gpulens.ipc.recording import read_recording
from gpulens.sources.prometheus.client import PromClient, parse_vector
from gpulens.sources.prometheus.source import PrometheusSource

MiB = 1 << 20
CHILD_AS_LIMIT = 3 << 30
CHILD = r"""
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
from gpulens.cli import main
rc = main(sys.argv[1:])
sys.stdout.flush()
# VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the parent (a big pytest) across exec.
hwm = next(int(ln.split()[1]) for ln in open("/proc/self/status") if ln.startswith("VmHWM:"))
print("MAXRSS_KIB", hwm, file=sys.stderr)
sys.exit(rc)
"""


def run_cli(*args: str, timeout: float = 60) -> tuple[int, str, int]:
    """Run ``gpulens ARGS`` in a child under an address-space limit: (exit code, stderr, peak RSS in MiB)."""
    code = CHILD.format(limit=CHILD_AS_LIMIT)
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout,
                         check=False)
    lines = out.stderr.splitlines()
    rss = [int(ln.split()[1]) for ln in lines if ln.startswith("MAXRSS_KIB")]
    message = "\n".join(ln for ln in lines if not ln.startswith("MAXRSS_KIB"))
    assert rss, f"child died (rc {out.returncode}): {out.stderr[-2000:]}"
    return out.returncode, message, rss[0] // 1024


def peak_mib(fn: Callable[[], Any]) -> tuple[Any, float]:
    """Run ``fn`` under tracemalloc: (its exception or result, peak traced MiB)."""
    tracemalloc.start()
    try:
        try:
            result: Any = fn()
        except Exception as err:
            result = err
        return result, tracemalloc.get_traced_memory()[1] / MiB
    finally:
        tracemalloc.stop()


def one_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 1, text
    assert "Traceback" not in text and "internal error" not in text, text
    return lines[0]


def gzip_of_empty_events(path: Path, events: int) -> Path:
    """A trace of ``events`` empty ``{}`` events, gzipped: ~1000x smaller than its contents."""
    with gzip.open(path, "wb", compresslevel=9) as gz:
        gz.write(b'{"traceEvents":[')
        block = b"{}," * 1_000_000
        for _ in range(events // 1_000_000):
            gz.write(block)
        gz.write(b"{}]}")
    return path


# ---- 1. gzip bombs and event floods ---------------------------------------------------------

@pytest.fixture(scope="module")
def bomb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return gzip_of_empty_events(tmp_path_factory.mktemp("bomb") / "bomb.json.gz", 40_000_000)


@pytest.mark.parametrize("command", ["flame", "analyze"])
def test_gzip_bomb_stops_while_decompressing(bomb: Path, command: str) -> None:
    assert bomb.stat().st_size < 200_000  # ~120 MB inside
    rc, err, rss = run_cli(command, str(bomb), "--json")
    line = one_line(err)
    assert rc == 2
    assert "--max-ratio" in line and "100x" in line and "MiB uncompressed" in line
    assert rss < 250, f"peak RSS {rss} MiB"


def test_gzip_bomb_library_peak_is_the_ratio_not_the_contents(bomb: Path) -> None:
    for call in (lambda: load_profile(str(bomb)), lambda: analyze_file(bomb)):
        err, peak = peak_mib(call)
        assert isinstance(err, (FlameFormatError, TraceFileError)) and "--max-ratio" in str(err)
        assert peak < 64, f"{peak:.0f} MiB traced"


def test_absolute_limit_and_ratio_floor(tmp_path: Path) -> None:
    small = tmp_path / "small.txt.gz"
    small.write_bytes(gzip.compress(b"a;b 1\n" * 100_000))  # 600 KB inside, ~500x: under the 1 MiB floor
    assert load_profile(str(small)).total == 100_000
    limits = InputLimits(max_bytes=MiB // 2)
    with pytest.raises(FlameFormatError, match=r"more than 0\.5 MiB uncompressed \(the --max-mib limit") as over:
        load_profile(str(small), limits=limits)  # the sentence names the flag that raises the limit: kept
    assert over.value.problem is FlameProblem.TOO_LARGE
    loose = InputLimits(max_bytes=64 * MiB, max_ratio=float("inf"))
    big = tmp_path / "big.txt.gz"
    big.write_bytes(gzip.compress(b"a;b 1\n" * 1_000_000))
    with pytest.raises(FlameFormatError) as info:
        load_profile(str(big))
    assert info.value.problem is FlameProblem.TOO_LARGE
    assert load_profile(str(big), limits=loose).total == 1_000_000


def flood(tmp_path: Path, n: int) -> Path:
    path = tmp_path / "flood.json"
    path.write_bytes(b'{"traceEvents":[' + b'{"ph":"X"},' * n + b'{}]}')
    return path


def test_event_cap_stops_flame_parsing_at_the_cap(tmp_path: Path) -> None:
    path = flood(tmp_path, 300_000)
    limits = InputLimits(max_bytes=64 * MiB, max_events=1000)
    err, peak = peak_mib(lambda: load_profile(str(path), limits=limits))
    assert isinstance(err, FlameFormatError)
    assert "more than 1000 JSON objects" in str(err) and "--max-events" in str(err)
    assert peak < 3 * path.stat().st_size / MiB + 8, f"{peak:.1f} MiB: objects built past the cap"


def test_event_cap_in_analyze_and_folded(tmp_path: Path) -> None:
    path = flood(tmp_path, 50_000)
    rc, err, _ = run_cli("analyze", str(path), "--max-events", "1000")
    assert rc == 2 and "more than 1000 events" in one_line(err) and "--max-events" in err
    folded = tmp_path / "many.txt"
    folded.write_bytes(b"a;b 1\n" * 5000)
    with pytest.raises(FlameFormatError) as info:
        load_profile(str(folded), limits=InputLimits(max_bytes=MiB, max_events=1000))
    assert info.value.problem is FlameProblem.TOO_LARGE


def test_limit_flags_are_checked(tmp_path: Path) -> None:
    rc, err, _ = run_cli("flame", str(tmp_path / "x"), "--max-ratio", "0")
    assert rc == 2 and "--max-ratio: expected 1 or more" in one_line(err)


def test_analyze_without_usable_events_fails(tmp_path: Path) -> None:
    path = tmp_path / "empty.json"
    path.write_text(json.dumps({"traceEvents": [{}, {"ph": "i", "name": "x"}]}))
    rc, err, _ = run_cli("analyze", str(path))
    assert rc == 2 and "no CPU or GPU events in its 2 events" in one_line(err)


# ---- 2. memory-snapshot pickles --------------------------------------------------------------

def test_memo_index_bomb_is_refused_before_unpickling(tmp_path: Path) -> None:
    # LONG_BINPUT 0x0fffffff after one dict: the C unpickler would allocate a 4 GiB memo.
    one = b"\x80\x02}r" + struct.pack("<I", 0x0FFFFFFF) + b"."
    err, peak = peak_mib(lambda: load_snapshot_bytes(one, "memo.pickle"))
    assert isinstance(err, FlameFormatError) and "memo index 268435455" in str(err)
    assert peak < 4
    # 32 KB of them (different indexes), as a file through the CLI
    many = b"\x80\x02]" + b"".join(b"r" + struct.pack("<I", 0x0FFFFFFF - k) for k in range(6500)) + b"."
    path = tmp_path / "memo.pickle"
    path.write_bytes(many)
    rc, err_text, rss = run_cli("flame", str(path), "--json")
    assert rc == 2 and "memo-growth bomb" in one_line(err_text)
    assert rss < 200, f"peak RSS {rss} MiB"


def test_shared_reference_bomb_is_bounded(tmp_path: Path) -> None:
    """32 KB that lists one block 4,000 times in each of 4,000 segments, each with 1,000 frames."""
    frames = [{"name": "f", "filename": "x.py", "line": 1}] * 1000
    block = {"size": 1, "state": "active_allocated", "frames": frames}
    segment = {"blocks": [block] * 4000}
    doc = {"segments": [segment] * 4000, "device_traces": []}
    data = pickle.dumps(doc, protocol=4)
    assert len(data) < 40_000
    path = tmp_path / "refs.pickle"
    path.write_bytes(data)
    err, peak = peak_mib(lambda: load_profile(str(path)))
    assert isinstance(err, FlameFormatError) and "reference bomb" in str(err)
    assert peak < 32, f"{peak:.0f} MiB"


def test_frame_sharing_bomb_is_bounded() -> None:
    frames = [{"name": "f", "filename": "x.py", "line": 1}] * 10_000
    doc = {"segments": [{"blocks": [{"size": 1, "state": "active_allocated", "frames": frames}] * 3000}]}
    data = pickle.dumps(doc, protocol=4)
    err, peak = peak_mib(lambda: group_from_bytes(data, "frames.pickle").pick())
    assert isinstance(err, FlameFormatError) and "frames per byte" in str(err)
    assert peak < 32


def test_container_and_memo_caps_name_the_flag() -> None:
    data = pickle.dumps({"segments": [[] for _ in range(3000)]}, protocol=4)
    with pytest.raises(FlameFormatError) as info:
        group_from_bytes(data, "many.pickle", limits=InputLimits(max_bytes=MiB, max_events=1000)).pick()
    assert info.value.problem is FlameProblem.TOO_LARGE
    with pytest.raises(FlameFormatError) as info:
        scan_pickle(pickle.dumps({"segments": [str(k) for k in range(3000)]}, protocol=4), "m", 5000 // 5)
    assert info.value.problem is FlameProblem.TOO_LARGE


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_plain_data_pickles_of_every_protocol_still_load(protocol: int) -> None:
    frames = [{"name": "main", "filename": "train.py", "line": 3}]
    doc = {"segments": [{"blocks": [{"size": 512, "state": "active_allocated", "frames": frames}] * 3,
                         "total_size": 2 ** 40, "ratio": 0.5, "flag": True, "none": None, "t": (1, "a")}]}
    data = pickle.dumps(doc, protocol=protocol)
    assert load_snapshot_bytes(data, "ok") == doc
    if protocol >= 2:  # files are recognised as snapshots by the PROTO opcode (torch writes 4 or 5)
        assert group_from_bytes(data, "ok").pick().total == 3 * 512


@pytest.mark.parametrize("payload", [
    b"\x80\x04\x8c\x05posix\x94\x8c\x06system\x94\x93\x94\x8c\x04true\x94\x85\x94R\x94.",  # STACK_GLOBAL + REDUCE
    b"cos\nsystem\n(S'true'\ntR.",  # protocol 0 GLOBAL
    b"(S'true'\nios\nsystem\n.",  # INST
    b"\x80\x02}\x94(\x8c\x01a\x94K\x01ub.",  # BUILD on a dict
    b"\x80\x02\x82\x01.",  # EXT1
    b"\x80\x05\x97.",  # NEXT_BUFFER
])
def test_hostile_opcodes_run_nothing(tmp_path: Path, payload: bytes) -> None:
    with pytest.raises(FlameFormatError) as info:
        load_snapshot_bytes(payload, "evil")
    assert info.value.problem in (FlameProblem.UNSAFE, FlameProblem.UNSUPPORTED)  # refused, or cut by the scan


# ---- 3. nesting depth --------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["flame", "analyze"])
@pytest.mark.parametrize("shape", ["bare", "in-event"])
def test_million_deep_json_is_one_clear_error(tmp_path: Path, command: str, shape: str) -> None:
    deep = b"[" * 1_000_000 + b"]" * 1_000_000
    path = tmp_path / "deep.json"
    path.write_bytes(deep if shape == "bare" else b'{"traceEvents":[{"ph":"X","args":' + deep + b"}]}")
    rc, err, _ = run_cli(command, str(path), "--json")
    assert rc == 2 and "recursion limit" in one_line(err)


# ---- 4. FIFOs, devices, sockets ---------------------------------------------------------------

@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "trace.json"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("command", ["flame", "analyze"])
def test_fifo_without_writer_is_refused_not_waited_on(fifo: Path, command: str) -> None:
    rc, err, _ = run_cli(command, str(fifo), "--json", timeout=20)
    assert rc == 2 and "a pipe (FIFO)" in one_line(err) and "not a regular file" in err


def test_every_reader_refuses_fifos_devices_and_sockets(fifo: Path, tmp_path: Path) -> None:
    with pytest.raises(RecordingError) as rec:
        read_recording(str(fifo))
    assert (rec.value.problem, rec.value.refused) == (RecordingProblem.NOT_OPENED, InputProblem.NOT_REGULAR)
    with pytest.raises(InputRefused) as device:
        read_input("/dev/zero", InputLimits(max_bytes=MiB))
    assert device.value.problem is InputProblem.NOT_REGULAR
    sock_path = tmp_path / "s.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(sock_path))
        with pytest.raises(InputRefused) as sock:
            open_regular(str(sock_path))
        assert sock.value.problem is InputProblem.NOT_REGULAR
    with pytest.raises(InputRefused) as info:
        open_regular(str(tmp_path / "missing"))
    assert info.value.problem is InputProblem.CANNOT_OPEN


# ---- 5. Prometheus: whole-answer deadline, size and series caps -------------------------------

class RawServer:
    """A TCP server on 127.0.0.1:0 running ``handler(conn, request)`` for every connection, in threads."""

    def __init__(self, handler: Callable[[socket.socket, bytes], None]) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.handler = handler
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        try:
            self.handler(conn, conn.recv(65536))
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


def drip(data: bytes, every_s: float, stop: threading.Event) -> Callable[[socket.socket, bytes], None]:
    def handler(conn: socket.socket, _request: bytes = b"") -> None:
        for i in range(len(data)):
            if stop.wait(every_s):
                return
            conn.sendall(data[i : i + 1])
    return handler


@pytest.fixture
def servers() -> Iterator[list[RawServer]]:
    made: list[RawServer] = []
    yield made
    for srv in made:
        srv.close()


NAMES = json.dumps({"status": "success", "data": ["gpulens_memory_used_bytes"]}).encode()


def http_ok(body: bytes, length: bool = True) -> bytes:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
    if length:
        head += f"Content-Length: {len(body)}\r\n".encode()
    return head + b"\r\n" + body


@pytest.mark.parametrize("where", ["headers", "body"])
def test_dripping_server_is_cut_off_at_the_deadline(servers: list[RawServer], where: str) -> None:
    stop = threading.Event()
    answer = http_ok(NAMES)
    if where == "headers":
        handler = drip(answer, 0.2, stop)
    else:
        def handler(conn: socket.socket, _request: bytes) -> None:
            conn.sendall(answer[: answer.index(b"\r\n\r\n") + 4])
            drip(answer[answer.index(b"\r\n\r\n") + 4 :], 0.2, stop)(conn, b"")
    srv = RawServer(handler)
    servers.append(srv)
    client = PromClient(srv.url, timeout_s=1.0)
    began = time.monotonic()
    with pytest.raises(PrometheusError) as info:
        client.metric_names()
    took = time.monotonic() - began
    stop.set()
    assert info.value.kind == "slow" and "no answer in 1 s" in str(info.value)
    assert took < 3.0, f"{took:.1f} s for a 1 s timeout"


def test_one_poll_shares_one_deadline(servers: list[RawServer]) -> None:
    """Every request of a poll drips: the poll still ends near poll_timeout_s, not requests x timeout."""
    stop = threading.Event()
    srv = RawServer(drip(http_ok(NAMES), 0.1, stop))
    servers.append(srv)
    src = PrometheusSource(srv.url, timeout_s=1.0, poll_timeout_s=1.5, backfill=False)
    began = time.monotonic()
    try:
        with pytest.raises(PrometheusError, match="slow"):
            src.expected_hosts()
    finally:
        stop.set()
        src.stop()
    assert time.monotonic() - began < 4.5


def test_snapshot_against_a_dripping_prometheus_ends(servers: list[RawServer]) -> None:
    stop = threading.Event()
    srv = RawServer(drip(http_ok(NAMES), 2.0, stop))
    servers.append(srv)
    began = time.monotonic()
    rc, _err, _ = run_cli("snapshot", "--prometheus", srv.url, "--timeout", "3", "--json", timeout=60)
    stop.set()
    assert rc == 1  # listed as down with the reason
    assert time.monotonic() - began < 30


def test_declared_oversized_answer_is_refused_unread(servers: list[RawServer]) -> None:
    def handler(conn: socket.socket, _request: bytes) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 999999999999\r\n\r\n" + b"[" * 65536)
    srv = RawServer(handler)
    servers.append(srv)
    with pytest.raises(PrometheusError, match=r"larger than 1048576 bytes \(Content-Length 999999999999\)"):
        PromClient(srv.url, timeout_s=5, max_bytes=MiB).query("up")


def test_endless_answer_stops_at_the_size_cap(servers: list[RawServer]) -> None:
    def handler(conn: socket.socket, _request: bytes) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\n\r\n")  # no length: read to close
        chunk = b" " * 65536
        for _ in range(4096):  # 256 MiB if nobody stopped reading
            conn.sendall(chunk)
    srv = RawServer(handler)
    servers.append(srv)
    client = PromClient(srv.url, timeout_s=20, max_bytes=4 * MiB)
    err, peak = peak_mib(lambda: client.query("up"))
    assert isinstance(err, PrometheusError) and "larger than 4194304 bytes" in str(err)
    assert peak < 24


def hosts_answer(n: int) -> bytes:
    items = b",".join(b'{"metric":{"host":"h%d"},"value":[1700000000,"0.5"]}' % i for i in range(n))
    return b'{"status":"success","data":{"resultType":"vector","result":[' + items + b"]}}"


def test_answer_with_too_many_hosts_is_refused_before_samples_are_built(servers: list[RawServer]) -> None:
    body = hosts_answer(200_000)

    def handler(conn: socket.socket, request: bytes) -> None:
        conn.sendall(http_ok(NAMES if b"__name__" in request else body))
    srv = RawServer(handler)
    servers.append(srv)
    src = PrometheusSource(srv.url, timeout_s=20, backfill=False)
    began = time.monotonic()
    try:
        err, peak = peak_mib(src.fetch_latest)
    finally:
        src.stop()
    assert isinstance(err, PrometheusError), err
    assert "more than 4096 hosts" in str(err) and "--prom-selector" in str(err)
    assert time.monotonic() - began < 30
    assert peak < 400, f"{peak:.0f} MiB"


def test_series_cap_is_checked_before_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    import gpulens.sources.prometheus.client as pc

    monkeypatch.setattr(pc, "MAX_SERIES", 1000)
    body = hosts_answer(20_000)
    err, peak = peak_mib(lambda: parse_vector(body))
    assert isinstance(err, PrometheusError) and "more than 1000 series" in str(err)
    assert peak < 2 + len(body) / MiB  # counted with 16-byte placeholders, not decoded
    odd = body.replace(b'"value":[1700000000,"0.5"]}', b'"value":[1700000000,0.5]}', 1)  # not the fast shape
    with pytest.raises(PrometheusError, match="more than 1000 series"):
        parse_vector(odd)
