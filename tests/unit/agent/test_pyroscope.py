"""Issue 32 item 14: the agent pushes GPU-memory profiles to Pyroscope's ingest API.

No Pyroscope server installs here: a local HTTP server checks each request
against Pyroscope's documented ingest API (``POST /ingest`` with ``name``
= ``APP{labels}``, ``from`` / ``until`` in unix seconds, ``format=pprof``,
the profile as the body) and keeps what it got.
"""

from __future__ import annotations

import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from gpulens.agent.pyroscope import GpuMemPusher, ingest_url, labels_of, target_from
from gpulens.analysis.flame.pprof import read_pprof
from gpulens.core.errors import ConfigError, ConfigProblem
from gpulens.core.model import JobInfo, Workload
from tests.unit.store.test_store import T0, sample

KV = ("<module> (serve.py:40)", "Runner > _allocate_kv_cache_tensors (runner.py:212)", "cudaMalloc", "cuMemAlloc_v2")


class FakePyroscope(ThreadingHTTPServer):
    """A test double of Pyroscope's ingest endpoint: refuses what the documented API would, keeps the rest."""

    def __init__(self, status: int = 200) -> None:
        self.got: list[dict[str, Any]] = []
        self.status = status
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                q = dict(urllib.parse.parse_qsl(url.query))
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                ok = (url.path == "/ingest" and q.get("format") == "pprof" and "{" in q.get("name", "")
                      and q.get("name", "").endswith("}") and q.get("from", "").isdigit()
                      and q.get("until", "").isdigit() and int(q["from"]) <= int(q["until"]))
                if ok:
                    outer.got.append({"query": q, "body": body, "auth": self.headers.get("Authorization")})
                self.send_response(outer.status if ok else 400)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)


@pytest.fixture
def server() -> Iterator[FakePyroscope]:
    srv = FakePyroscope()
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def test_each_traced_process_lands_as_one_labelled_pprof_profile(server: FakePyroscope, tmp_path: Path) -> None:
    (tmp_path / "tok").write_text("s3cret\n")
    target = target_from(f"http://127.0.0.1:{server.server_address[1]}", "gpulens.gpu_memory", str(tmp_path / "tok"))
    served = JobInfo(pid=7, tree_id="t", cmdline="serve", user="erin", start_time=T0 - 5, job_key=None,
                     workload=Workload(pod_uid="5e1f0000-0000-4000-8000-000000000001", pod="vllm-0",
                                       namespace="llm-serving", container="vllm"))
    stacks: dict[int, dict[tuple[str, ...], int]] = {7: {KV: 1 << 30}, 8: {}}
    pusher = GpuMemPusher(target, lambda pid: stacks[pid], lambda: [7, 8], lambda: sample(T0, host="n1", jobs=(served,)),
                          "n1")
    assert pusher.push_once(T0 - 15, T0) == 1 and pusher.failed == 0
    (got,) = server.got
    assert got["auth"] == "Bearer s3cret"
    name = got["query"]["name"]
    assert name.startswith("gpulens.gpu_memory{") and "pod=vllm-0" in name and "namespace=llm-serving" in name
    assert "host=n1" in name and "pid=7" in name and "job=pod=5e1f0000" not in name  # '=' in a value is made '_'
    assert (int(got["query"]["from"]), int(got["query"]["until"])) == (int(T0 - 15), int(T0))
    profile = read_pprof(got["body"])
    assert profile.unit == "bytes" and {tuple(f): v for f, v in profile.stacks()} == {KV: float(1 << 30)}


def test_a_failing_server_is_counted_not_fatal() -> None:
    srv = FakePyroscope(status=503)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        target = target_from(f"http://127.0.0.1:{srv.server_address[1]}", "app", None)
        pusher = GpuMemPusher(target, lambda pid: {KV: 10}, lambda: [1, 2], lambda: None, "n1")
        assert pusher.push_once(T0, T0 + 1) == 0 and pusher.failed == 2
    finally:
        srv.shutdown()
        srv.server_close()


def test_flags_are_checked_and_label_values_cannot_break_the_name() -> None:
    with pytest.raises(ConfigError) as err:
        target_from("file:///etc/passwd", "app", None)
    assert (err.value.expected, err.value.got, err.value.problem) == (
        "http(s)://HOST[:PORT]", "file:///etc/passwd", ConfigProblem.BAD_FORMAT)
    with pytest.raises(ConfigError) as err:
        target_from("http://h:4040", "app{evil=1}", None)
    assert (err.value.got, err.value.problem) == ("app{evil=1}", ConfigProblem.BAD_FORMAT)
    assert err.value.where.startswith("--pyroscope-app ")
    url = ingest_url(target_from("http://h:4040/", "app", None), {"job": "a}{b=c,d", "bad-name": "x"}, 1.0, 2.0)
    name = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))["name"]
    assert name == "app{job=a__b_c_d}"  # delimiters replaced, an invalid label name left out
    assert "token" not in repr(target_from("http://h:4040", "app", None)).replace("token=''", "")
    assert labels_of("n1", 9, None) == {"host": "n1", "pid": "9"}
