"""Issue 32 item 14, read side: a profile stored in Pyroscope opens in the terminal.

The flamebearer documents follow Pyroscope's render API (``format=json``,
"single" format: per level, quadruples of x offset from the previous node's
end, total, self, name index; level 0 is ``total``). No Pyroscope server
installs here: a local HTTP server answers ``/pyroscope/render`` as the API
documents, and ``gpulens flame --pyroscope`` is run against it.
"""

from __future__ import annotations

import json
import subprocess
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gpulens.analysis.flame.errors import FlameFormatError, FlameProblem
from gpulens.analysis.flame.flamebearer import from_flamebearer

# total 1000: <module> (1000) -> Runner > alloc (900, self 900), Model > __init__ (100) -> cuMemAlloc_v2 (100)
DOC = {
    "flamebearer": {
        "names": ["total", "<module>", "Runner > alloc", "Model > __init__", "cuMemAlloc_v2"],
        "levels": [[0, 1000, 0, 0], [0, 1000, 0, 1], [0, 900, 900, 2, 0, 100, 0, 3], [900, 100, 100, 4]],
        "numTicks": 1000, "maxSelf": 900,
    },
    "metadata": {"format": "single", "units": "bytes", "appName": "gpulens.gpu_memory"},
}


def _stacks(doc: object) -> dict[tuple[str, ...], float]:
    return {tuple(f): v for f, v in from_flamebearer(doc).stacks()}


def test_levels_become_stacks_with_their_self_values() -> None:
    assert _stacks(DOC) == {("<module>", "Runner > alloc"): 900.0,
                            ("<module>", "Model > __init__", "cuMemAlloc_v2"): 100.0}
    assert from_flamebearer(DOC).unit == "bytes"
    cpu = {**DOC, "metadata": {"format": "single", "units": "samples", "sampleRate": 100}}
    assert from_flamebearer(cpu).unit == "seconds" and from_flamebearer(cpu).total == pytest.approx(10.0)


@pytest.mark.parametrize(("bad", "problem", "at"), [
    ({}, FlameProblem.UNSUPPORTED, None),
    ({"flamebearer": {"names": [], "levels": "x"}}, FlameProblem.UNSUPPORTED, None),
    ({"flamebearer": {"names": ["total"], "levels": [[0, 1, 0]]}}, FlameProblem.MALFORMED, "level 0"),
    ({"flamebearer": {"names": ["total"], "levels": [[0, 1, 0, 5]]}}, FlameProblem.BAD_REFERENCE, "level 0 node 0"),
    ({"flamebearer": {"names": ["total", "a"], "levels": [[0, 1, 0, 0], [5, 1, 1, 1]]}},  # no parent under x=5
     FlameProblem.BAD_REFERENCE, "level 1 node 0"),
    ({**DOC, "metadata": {"format": "double"}}, FlameProblem.UNSUPPORTED, None),
])
def test_malformed_documents_are_refused_with_the_reason(bad: object, problem: FlameProblem, at: str | None) -> None:
    with pytest.raises(FlameFormatError) as info:
        from_flamebearer(bad)
    assert (info.value.problem, info.value.at) == (problem, at)


class FakeRender(ThreadingHTTPServer):
    """A test double of Pyroscope's render endpoint."""

    def __init__(self) -> None:
        self.asked: list[dict[str, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                q = dict(urllib.parse.parse_qsl(url.query))
                outer.asked.append(q)
                ok = url.path == "/pyroscope/render" and q.get("format") == "json" and "query" in q
                body = json.dumps(DOC).encode() if ok else b"{}"
                self.send_response(200 if ok else 404)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)


@pytest.fixture
def render() -> Iterator[FakeRender]:
    srv = FakeRender()
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


def test_gpulens_flame_opens_a_stored_profile(render: FakeRender, gpulens_exe: str) -> None:
    url = f"http://127.0.0.1:{render.server_address[1]}"
    query = 'gpulens.gpu_memory{pod="vllm-0"}'
    out = subprocess.run([gpulens_exe, "flame", "--pyroscope", url, "--query", query, "--from", "now-15m", "--json"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["unit"] == "bytes" and doc["total"] == 1000
    assert {f["name"]: f["self"] for f in doc["frames"]}["Runner > alloc"] == 900
    assert render.asked == [{"query": query, "from": "now-15m", "until": "now", "format": "json"}]
    missing = subprocess.run([gpulens_exe, "flame", "--pyroscope", url], capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "--pyroscope needs --query" in missing.stderr
