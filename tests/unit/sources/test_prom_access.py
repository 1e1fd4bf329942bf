"""A Prometheus that asks who you are: bearer token file, basic auth from the URL
or a password file, a CA file, extra headers (X-Scope-OrgID), from flags and
config.toml; the password never shown. A local HTTP(S) server checks what
arrives exactly as a reverse proxy in front of Prometheus would."""

from __future__ import annotations

import argparse
import base64
import http.server
import json
import os
import shutil
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from gpulens.core.config import parse_config
from gpulens.core.errors import UNSET, ConfigError, ConfigProblem, PrometheusError
from gpulens.sources.prometheus.access import (
    PromAccess,
    access_from,
    add_access_flags,
    parse_header,
    split_url,
)
from gpulens.sources.prometheus.client import PromClient
from gpulens.sources.prometheus.source import PrometheusSource
from gpulens.sources_from_args import prom_flags

SECRET = "s3cr3t-p@ss:word"
TOKEN = "tok-1234567890"
NAMES = json.dumps({"status": "success", "data": ["gpulens_memory_used_bytes"]}).encode()
VECTOR = json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
    {"metric": {"host": "h1"}, "value": [1700000000.0, "2048"]}]}}).encode()


class Guarded(http.server.BaseHTTPRequestHandler):
    """Answers only requests carrying ``want`` (header -> value); 401 otherwise."""

    want: ClassVar[dict[str, str]] = {}
    seen: ClassVar[list[dict[str, str]]] = []

    def do_GET(self) -> None:
        type(self).seen.append(dict(self.headers.items()))
        if any(self.headers.get(k) != v for k, v in self.want.items()):  # names are case-insensitive
            self.send_response(401, "Unauthorized")
            self.send_header("WWW-Authenticate", 'Basic realm="prometheus"')
            self.send_header("Content-Length", "12")
            self.end_headers()
            self.wfile.write(b"Unauthorized")
            return
        body = NAMES if "__name__" in self.path else VECTOR
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _serve(want: dict[str, str], context: ssl.SSLContext | None = None) -> tuple[http.server.HTTPServer, str]:
    handler = type("H", (Guarded,), {"want": want, "seen": []})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    if context is not None:
        httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    scheme = "https" if context else "http"
    return httpd, f"{scheme}://127.0.0.1:{httpd.server_address[1]}"


@pytest.fixture
def basic() -> Iterator[str]:
    pair = base64.b64encode(f"alice:{SECRET}".encode()).decode()
    httpd, url = _serve({"Authorization": f"Basic {pair}", "X-Scope-OrgID": "team-a"})
    yield url
    httpd.shutdown()
    httpd.server_close()


def _fetch(url: str, access: PromAccess | None = None) -> dict[str, object]:
    src = PrometheusSource(url, step_s=1, backfill=False, access=access)
    try:
        return dict(src.fetch_latest())
    finally:
        src.stop()


def test_basic_auth_from_the_url_is_sent_and_never_shown(basic: str) -> None:
    quoted = SECRET.replace("@", "%40").replace(":", "%3A")
    url = basic.replace("http://", f"http://alice:{quoted}@")
    tenant = PromAccess(headers=(("X-Scope-OrgID", "team-a"),))
    src = PrometheusSource(url, step_s=1, backfill=False, access=tenant)
    try:
        assert src.fetch_latest()["h1"].memory.used_bytes == 2048
        for shown in (src.name, src.address, repr(src._client.access)):
            assert SECRET not in shown and quoted not in shown and "alice" not in shown.split("PromAccess")[0]
        assert src.address == basic
    finally:
        src.stop()
    wrong = basic.replace("http://", "http://alice:nope-wrong@")
    with pytest.raises(PrometheusError) as err:
        _fetch(wrong, tenant)
    assert err.value.kind == "auth" and "401" in str(err.value) and "credentials rejected" in str(err.value)
    assert "nope-wrong" not in str(err.value)


def test_password_file_and_config_toml(basic: str, tmp_path: Path) -> None:
    pw = tmp_path / "pw"
    pw.write_text(SECRET + "\n")
    cfg = parse_config({"prometheus": {"username": "alice", "password_file": str(pw),
                                       "headers": {"X-Scope-OrgID": "team-a"}}}, "config.toml")
    assert _fetch(basic, access_from(None, cfg))["h1"]
    # the config is also what PrometheusSource reads when given no access at all
    src = PrometheusSource(basic, cfg=cfg, step_s=1, backfill=False)
    try:
        assert "h1" in src.fetch_latest()
    finally:
        src.stop()
    # a flag wins over the file
    parser = argparse.ArgumentParser()
    add_access_flags(parser)
    args = parser.parse_args(["--prom-user", "bob", "--prom-header", "X-Scope-OrgID: team-b"])
    access = access_from(prom_flags(args), cfg)
    assert access.username == "bob" and dict(access.headers) == {"X-Scope-OrgID": "team-b"}
    assert access.password_file == str(pw)
    with pytest.raises(PrometheusError) as err:
        _fetch(basic, access)
    assert err.value.kind == "auth" and SECRET not in str(err.value)


def test_bearer_token_file_read_at_each_request(tmp_path: Path) -> None:
    httpd, url = _serve({"Authorization": f"Bearer {TOKEN}"})
    token = tmp_path / "token"
    try:
        with pytest.raises(PrometheusError) as err:
            _fetch(url)
        assert err.value.kind == "auth" and "no credentials sent" in str(err.value)
        token.write_text(TOKEN + "\n")
        access = PromAccess(bearer_token_file=str(token))
        assert "h1" in _fetch(url, access)
        token.write_text("rotated-and-wrong\n")  # a rotated token is picked up (Kubernetes projects them)
        with pytest.raises(PrometheusError):
            _fetch(url, access)
        token.write_text(TOKEN + "\n")
        src = PrometheusSource(url, step_s=1, backfill=False, access=access)
        try:
            token.unlink()  # gone while running: that poll fails, naming the file
            with pytest.raises(PrometheusError) as gone:
                src.fetch_latest()
        finally:
            src.stop()
        assert str(token) in str(gone.value) and "cannot read" in str(gone.value) and TOKEN not in str(gone.value)
        with pytest.raises(ConfigError) as at_start:  # gone at start: one line, naming the file
            PrometheusSource(url, access=access)
        assert at_start.value.problem is ConfigProblem.UNREADABLE
        assert at_start.value.where == f"Prometheus bearer token file {token}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_credential_errors_name_the_file_never_the_secret(tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.write_bytes(b"x" * 70_000)
    with pytest.raises(ConfigError) as err:
        PromAccess(bearer_token_file=str(big)).request_headers()
    assert (err.value.where, err.value.problem) == (f"Prometheus bearer token file {big}", ConfigProblem.TOO_LARGE)
    assert err.value.got is UNSET  # the fields name the file, never hold its text
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(ConfigError) as err:
        PromAccess(password_file=str(empty), username="u").request_headers()
    assert (err.value.where, err.value.problem) == (f"Prometheus password file {empty}", ConfigProblem.MISSING)
    with pytest.raises(ConfigError) as err:
        PromAccess(bearer_token_file=str(big), username="u").request_headers()
    assert (err.value.where, err.value.problem) == ("Prometheus", ConfigProblem.CONFLICT)
    assert split_url(f"http://u:{SECRET.replace('@', '%40')}@[::1]:9090/p") == ("http://[::1]:9090/p", "u", SECRET)
    assert split_url("http://h:9090") == ("http://h:9090", None, None)
    with pytest.raises(ValueError) as bad:
        PromClient("http://u:pw-in-bad-url@host:notaport")
    assert "pw-in-bad-url" not in str(bad.value)
    with pytest.raises(ConfigError) as bad_cfg:
        PrometheusSource("ftp://u:ftp-secret@host")
    assert "ftp-secret" not in str(bad_cfg.value)


def test_headers_are_checked() -> None:
    assert parse_header("X-Scope-OrgID: team-a", "--prom-header") == ("X-Scope-OrgID", "team-a")
    for bad, problem in (("no colon", ConfigProblem.BAD_FORMAT), ("Bad Name: x", ConfigProblem.BAD_FORMAT),
                         ("Authorization: Bearer x", ConfigProblem.CONFLICT), (": x", ConfigProblem.BAD_FORMAT),
                         ("X-A: one\rtwo", ConfigProblem.BAD_FORMAT)):
        with pytest.raises(ConfigError) as err:
            parse_header(bad, "--prom-header")
        assert (err.value.where, err.value.problem) == ("--prom-header", problem), bad
    with pytest.raises(ConfigError):
        parse_config({"prometheus": {"headers": {"X-A": "one\ntwo"}}}, "config.toml")
    with pytest.raises(ConfigError):
        parse_config({"prometheus": {"bearer_token_file": 5}}, "config.toml")
    cfg = parse_config({"prometheus": {"ca_fille": "x"}}, "config.toml")
    assert "did you mean 'prometheus.ca_file'" in cfg.warnings[0]


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl CLI not installed (needed to make a test certificate)")
def test_ca_file_verifies_an_https_prometheus(tmp_path: Path) -> None:
    crt, key = tmp_path / "p.crt", tmp_path / "p.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=gpulens-test",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(crt)],
        check=True, capture_output=True, timeout=60,
    )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(crt, key)
    httpd, url = _serve({}, ctx)
    try:
        with pytest.raises(PrometheusError) as err:  # the system CAs do not know it
            _fetch(url)
        assert err.value.kind == "down" and "CERTIFICATE_VERIFY_FAILED" in str(err.value)
        assert "h1" in _fetch(url, PromAccess(ca_file=str(crt)))
        with pytest.raises(ConfigError) as bad_ca:
            PromAccess(ca_file=str(key.parent / "missing.pem")).ssl_context()
        assert bad_ca.value.where == f"Prometheus CA file {key.parent / 'missing.pem'}"
        assert bad_ca.value.problem is ConfigProblem.UNREADABLE
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_snapshot_json_and_errors_never_hold_the_password(basic: str) -> None:
    url = basic.replace("http://", "http://alice:wrong-" + "pw-42@")
    out = subprocess.run(
        [sys.executable, "-m", "gpulens", "snapshot", "--prometheus", url, "--json", "--timeout", "3",
         "--prom-header", "X-Scope-OrgID: team-a"],
        capture_output=True, text=True, timeout=60, env={**os.environ, "XDG_CONFIG_HOME": "/nonexistent"},
    )
    assert out.returncode != 0
    assert "wrong-pw-42" not in out.stdout + out.stderr
    assert "Traceback" not in out.stderr
    assert "401" in out.stdout + out.stderr
