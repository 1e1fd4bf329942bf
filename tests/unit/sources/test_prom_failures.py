"""A Prometheus that is down, slow, or answers garbage: clear status, no crash,
last data kept. Local HTTP servers stand in for the broken Prometheus."""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from gpulens.core.errors import ConfigError, PrometheusError
from gpulens.core.events import (
    HostStatusEvent,
    PanelProvider,
    SampleEvent,
    Source,
    SourceEvent,
    SourceStatusEvent,
)
from gpulens.sources.prometheus.client import PromClient, parse_answer, parse_vector
from gpulens.sources.prometheus.source import PrometheusSource
from tests.fakes.prom_fixtures import free_port

NAMES = json.dumps({"status": "success", "data": ["gpulens_memory_used_bytes"]}).encode()
VECTOR = json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
    {"metric": {"host": "h1", "instance": "x:1"}, "value": [1700000000.0, "2048"]}]}}).encode()


class FakeProm(http.server.BaseHTTPRequestHandler):
    mode = "ok"
    delay_s = 0.0

    def do_GET(self) -> None:
        time.sleep(self.delay_s)
        mode = type(self).mode
        if mode == "raw":
            self.wfile.write(b"\x00\xffnot http at all\r\n\r\n")
            return
        body = {
            "ok": NAMES if "__name__" in self.path else VECTOR,
            "text": b"<html>hello, I am not Prometheus</html>",
            "huge": b"[" + b"1," * 600_000 + b"1]",
            "shape": json.dumps({"status": "success", "data": {"resultType": "vector", "result": [{"metric": 5, "value": [1, "1"]}]}}).encode()
            if "__name__" not in self.path else NAMES,
            "nan": json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
                {"metric": {"host": "h1"}, "value": [1.0, "NaN"]}]}}).encode() if "__name__" not in self.path else NAMES,
        }[mode]
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def fake() -> Iterator[tuple[str, type[FakeProm]]]:
    handler = type("Handler", (FakeProm,), {"mode": "ok", "delay_s": 0.0})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", handler
    httpd.shutdown()
    httpd.server_close()


def run_source(src: PrometheusSource) -> tuple[list[SourceEvent], Callable[[Callable[[SourceEvent], bool]], SourceEvent]]:
    events: list[SourceEvent] = []

    def wait(pred: Callable[[SourceEvent], bool], timeout_s: float = 10.0) -> SourceEvent:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for ev in list(events):
                if pred(ev):
                    return ev
            time.sleep(0.02)
        raise AssertionError(f"no such event in {events}")

    src.start(events.append)
    return events, wait


def bad_status(kind: str) -> Callable[[SourceEvent], bool]:
    return lambda e: isinstance(e, SourceStatusEvent) and not e.ok and e.details.get("kind") == kind


def test_down_says_so_and_does_not_crash() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    src = PrometheusSource(url, step_s=0.2, timeout_s=1, backfill=False)
    try:
        with pytest.raises(PrometheusError, match="Prometheus down"):
            src.expected_hosts()
        _, wait = run_source(src)
        ev = wait(bad_status("down"))
        assert isinstance(ev, SourceStatusEvent)
        assert ev.message.startswith(f"Prometheus down: {url}") and "refused" in ev.message
        assert "no data yet" in ev.message
    finally:
        src.stop()


def test_slow_prometheus_times_out_with_clear_status(fake: tuple[str, type[FakeProm]]) -> None:
    url, handler = fake
    handler.delay_s = 3.0
    src = PrometheusSource(url, step_s=0.2, timeout_s=0.3, backfill=False)
    try:
        _, wait = run_source(src)
        ev = wait(bad_status("slow"))
        assert isinstance(ev, SourceStatusEvent) and "no answer in 0.3 s" in ev.message
    finally:
        src.stop()


def test_slow_but_answering_is_reported_and_data_still_flows(fake: tuple[str, type[FakeProm]]) -> None:
    url, handler = fake
    handler.delay_s = 0.15
    src = PrometheusSource(url, step_s=0.2, timeout_s=5, slow_s=0.1, backfill=False)
    try:
        _, wait = run_source(src)
        ev = wait(lambda e: isinstance(e, SourceStatusEvent) and e.message.startswith("Prometheus slow:"))
        assert "per refresh" in getattr(ev, "message", "")
        sample = wait(lambda e: isinstance(e, SampleEvent))
        # the stand-in does not evaluate PromQL: it answers 2048 to every query
        assert isinstance(sample, SampleEvent) and sample.sample.memory.used_bytes == 2048
    finally:
        src.stop()


@pytest.mark.parametrize(("mode", "needle"), [
    ("text", "not JSON"),
    ("huge", "larger than"),
    ("shape", "labels are not a string map"),
    ("raw", "garbage"),
])
def test_garbage_answers_keep_last_data(fake: tuple[str, type[FakeProm]], mode: str, needle: str) -> None:
    url, handler = fake
    src = PrometheusSource(url, step_s=0.1, timeout_s=2, backfill=False, max_response_bytes=1_000_000)
    try:
        events, wait = run_source(src)
        wait(lambda e: isinstance(e, SampleEvent))
        handler.mode = mode
        ev = wait(lambda e: isinstance(e, SourceStatusEvent) and not e.ok)
        assert isinstance(ev, SourceStatusEvent)
        assert needle in ev.message and "showing data from" in ev.message, ev.message
        # last data kept: no host was declared down because Prometheus misbehaved
        assert not any(isinstance(e, HostStatusEvent) and not e.up for e in events)
        handler.mode = "ok"
        wait(lambda e: isinstance(e, SourceStatusEvent) and e.ok and events.index(e) > events.index(ev))
    finally:
        src.stop()


def test_nan_values_are_missing_not_zero(fake: tuple[str, type[FakeProm]]) -> None:
    url, handler = fake
    handler.mode = "nan"
    src = PrometheusSource(url, step_s=1, backfill=False)
    try:
        assert src.fetch_latest() == {}  # a NaN-only series places no host at all
    finally:
        src.stop()


def test_parse_answer_rejects_hostile_documents() -> None:
    for body in [b"", b"null", b"[]", b'{"status":"success"}', b'{"status":"success","data":{"resultType":"matrix","result":[]}}',
                 b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,2]}]}}',
                 b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":["x","1"]}]}}',
                 b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"abc"]}]}}',
                 b"\xff\xfe\x00"]:
        # the fast path ignores sample times and takes a bare number as a value: harmless
        lenient = b'"value":[1,2]' in body or b'"value":["x","1"]' in body
        for parse in (lambda b: parse_answer(b, "vector"), *(() if lenient else (parse_vector,))):
            with pytest.raises(PrometheusError) as info:
                parse(body)
            assert info.value.kind == "garbage"
    with pytest.raises(PrometheusError) as info:
        parse_answer(b'{"status":"error","errorType":"bad_data","error":"1:5: parse error: boom"}', "vector")
    assert (info.value.kind, str(info.value)) == ("query", "1:5: parse error: boom")


def test_implements_source_and_panel_provider() -> None:
    src = PrometheusSource("http://127.0.0.1:9", selector='{cluster="a"}')
    assert isinstance(src, Source) and isinstance(src, PanelProvider)
    assert (src.name, src.simulated, src.step_s) == ("prometheus http://127.0.0.1:9", False, 5.0)
    src.stop()
    src.stop()  # idempotent, also before start()


def test_bad_url_and_selector_are_config_errors() -> None:
    with pytest.raises(ConfigError):
        PrometheusSource("ftp://x")
    with pytest.raises(ConfigError):
        PrometheusSource("http://127.0.0.1:9", selector="up or vector(1)")
    with pytest.raises(ValueError):
        PromClient("localhost:9090")


def test_panel_never_raises_when_prometheus_is_down() -> None:
    src = PrometheusSource(f"http://127.0.0.1:{free_port()}", timeout_s=1)
    try:
        data = src.panel_series("up", "h", "j", 60)
        assert data.points == () and data.error is not None and "Prometheus down" in data.error
    finally:
        src.stop()


def test_server_that_closes_mid_answer() -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)

    def serve() -> None:
        for _ in range(2):
            conn, _ = srv.accept()
            conn.recv(4096)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n{\"status\":")
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    client = PromClient(f"http://127.0.0.1:{srv.getsockname()[1]}", timeout_s=2)
    with pytest.raises(PrometheusError) as info:
        client.query("up")
    assert info.value.kind == "garbage"
    srv.close()


def test_snapshot_against_down_prometheus_is_one_clear_line() -> None:
    import os
    import subprocess
    import sys

    url = f"http://127.0.0.1:{free_port()}"
    out = subprocess.run([sys.executable, "-m", "gpulens", "snapshot", "--prometheus", url, "--json"],
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "XDG_CONFIG_HOME": "/nonexistent"})
    # Never reached: listed under its address with up false and the reason (exit 1 = a host down).
    assert out.returncode == 1, out.stderr
    doc = json.loads(out.stdout)
    (entry,) = doc["hosts"]
    assert entry["up"] is False and entry["sample"] is None
    assert entry["host"] == url
    assert entry["reason"].startswith(f"Prometheus down: {url}")
    assert "Traceback" not in out.stderr
